package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/testenv"
)

// TestDLQReplayStaleAndCapped (issue 15 item 8): a letter older than the
// op's current acceptance is skipped (the op was replayed and
// dead-lettered again since: the newer letter is acted on), and --follow
// replays an op that keeps failing once per run instead of forever.
func TestDLQReplayStaleAndCapped(t *testing.T) {
	o := startOpsServe(t)
	o.app.SetRespond(func(_ context.Context, d opstest.Delivery) int {
		if d.Object == "s" {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	o.mustBaton(0, "", "ops", "submit", "--id", "st-1", "s", `{"n":1}`)
	o.waitOp("st-1", api.OpDeadLettered)
	// Group g1 replays the first letter; the op fails again: a second letter.
	out := o.mustBaton(0, "", "dlq", "replay", "--group", "g1")
	if !strings.Contains(out, "replayed st-1 (object s): queued again") {
		t.Fatalf("first replay printed:\n%s", out)
	}
	waitCond(t, 30*time.Second, "st-1 dead-lettered again at seq 2", func() bool {
		op, err := o.c.Op(context.Background(), "st-1")
		return err == nil && op.State == api.OpDeadLettered && op.Seq == 2
	})
	waitCond(t, 30*time.Second, "two letters on the topic", func() bool {
		code, out, _ := o.baton("", "dlq", "ls")
		return code == 0 && strings.Count(out, "st-1") == 2
	})

	// A new group reads both letters: the first is stale, the second is replayed.
	out = o.mustBaton(0, "", "dlq", "replay", "--group", "g2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "skipped st-1 (object s): letter of seq 1, the op was accepted again since (seq 2") ||
		lines[1] != "replayed st-1 (object s): queued again" || !strings.Contains(out, "superseded 1") || !strings.Contains(out, "committed 2") {
		t.Errorf("replay in a new group printed:\n%s\nwant the seq-1 letter skipped as superseded, the seq-2 letter replayed", out)
	}
	waitCond(t, 30*time.Second, "st-1 dead-lettered again at seq 3", func() bool {
		op, err := o.c.Op(context.Background(), "st-1")
		return err == nil && op.State == api.OpDeadLettered && op.Seq == 3
	})

	// --follow in a third group: the op is replayed once, fails again, its
	// new letter is skipped (capped) and committed; no loop.
	before := len(o.app.ByID("st-1"))
	r, err := dlq.NewReader(dlq.ReaderOptions{Brokers: []string{o.kafka.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := client.New(o.socket)
	defer c.Close()
	var buf testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, refused, err := replayAll(ctx, &globals{stdout: &buf, stderr: &buf}, r, newReplayer(c, 1), dlq.ReplayOptions{Group: "g3", Follow: true})
		if refused != nil {
			err = refused
		}
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), "replayed 1 time(s) in this run") {
		if time.Now().After(deadline) {
			t.Fatalf("the follow run did not skip st-1 as capped within 30s; it printed:\n%s", buf.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a looping replay would deliver again meanwhile
	cancel()
	if err := <-done; err != nil {
		t.Errorf("follow replay = %v", err)
	}
	out = buf.String()
	// Three letters were there (seq 1, 2, 3): 1 and 2 superseded, 3 replayed; its failure's letter capped.
	if got := strings.Count(out, "replayed st-1 (object s): queued again"); got != 1 {
		t.Errorf("follow replay requeued st-1 %d times, want 1:\n%s", got, out)
	}
	if n := len(o.app.ByID("st-1")) - before; n != 1 {
		t.Errorf("st-1 delivered %d times during the follow run, want 1:\n%s", n, out)
	}
}
