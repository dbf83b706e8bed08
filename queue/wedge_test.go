package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/queue"
)

// TestDueRetryNotStarved (issue 15 item 5): a retry that has been due for
// 10 minutes is claimed before the 200 ops accepted after it became due;
// retrying heads are ordered by next_attempt_at and queued heads by
// accepted_at on one timeline, so ops accepted before it still go first.
func TestDueRetryNotStarved(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now})
	ctx := t.Context()
	submit(t, s, "r1", "R")
	claim(t, s, clk.Now()) // r1
	clk.Add(time.Millisecond)
	early := submit(t, s, "early", "E") // accepted before r1 becomes due
	due := clk.Now().Add(time.Second)
	if err := s.Retry(ctx, "r1", "HTTP503", "busy", due); err != nil {
		t.Fatal(err)
	}
	clk.Add(10 * time.Minute)
	for i := range 200 {
		submit(t, s, fmt.Sprintf("late-%d", i), fmt.Sprintf("L%d", i))
		clk.Add(time.Millisecond)
	}
	now := clk.Now()
	if op := claim(t, s, now); op.ID != early.ID {
		t.Fatalf("first claim = %s, want %s (accepted before r1 became due)", op.ID, early.ID)
	}
	if op := claim(t, s, now); op.ID != "r1" {
		t.Fatalf("second claim = %s, want r1: due for 10 minutes, before the 200 later ops", op.ID)
	}
	// The later ops follow in accept order.
	for i := range 200 {
		if op := claim(t, s, now); op.ID != fmt.Sprintf("late-%d", i) {
			t.Fatalf("claim %d = %s, want late-%d", i, op.ID, i)
		}
	}
}

// TestDoneDropsPayload (issue 15 item 7): a done op keeps its body hash
// (idempotency) but not its payload; a dead_lettered op keeps its payload
// (replay needs it).
func TestDoneDropsPayload(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	ctx := t.Context()
	req := queue.SubmitRequest{ID: "d1", Object: "o", Payload: json.RawMessage(`{"big":"` + strings.Repeat("x", 100<<10) + `"}`)}
	if _, _, err := s.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	submit(t, s, "x1", "o2")
	claim(t, s, time.Now())
	claim(t, s, time.Now())
	if err := s.Done(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetterPending(ctx, "x1", "HTTP400", "bad"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLettered(ctx, "x1", ""); err != nil {
		t.Fatal(err)
	}
	done := get(t, s, "d1")
	if len(done.Payload) != 0 || done.BodyHash == "" {
		t.Errorf("done op: payload %d bytes, body hash %q; want no payload, the hash kept", len(done.Payload), done.BodyHash)
	}
	if dl := get(t, s, "x1"); string(dl.Payload) != `{"id":"x1"}` {
		t.Errorf("dead_lettered op payload = %s, want it kept", dl.Payload)
	}
	// The same body again is still recognised; another body is a conflict.
	if op, created, err := s.Submit(ctx, req); err != nil || created || op.State != queue.Done {
		t.Errorf("resubmit of a done op = %v, created %v, state %s; want the done op, not created", err, created, op.State)
	}
	req.Payload = json.RawMessage(`{"big":"y"}`)
	if _, _, err := s.Submit(ctx, req); err == nil {
		t.Errorf("resubmit with another body accepted, want ErrConflict")
	}
}

// TestQueueFileReclaimed (issue 15 item 7): 40 done ops of 512 KiB leave
// the file small (payloads dropped at done), and a file grown by
// unfinished payloads shrinks again after they finish and the store is
// reopened (compaction at Open). Stats reports the file size.
func TestQueueFileReclaimed(t *testing.T) {
	dir := t.TempDir()
	s, err := queue.Open(dir, queue.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("<&>", (queue.MaxPayloadBytes-2)/3) + `"`)
	const n = 40
	for i := range n {
		if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: fmt.Sprintf("b%d", i), Object: fmt.Sprintf("o%d", i), Payload: big}); err != nil {
			t.Fatal(err)
		}
	}
	grown := s.Stats().FileBytes
	for range n {
		op, err := s.Claim(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Done(ctx, op.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "queue.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d × %d-byte payloads: file %d MiB while queued (Stats %d MiB)", n, len(big), fi.Size()>>20, grown>>20)
	if grown < n*int64(len(big)) {
		t.Errorf("Stats().FileBytes = %d while %d payloads of %d bytes are stored", grown, n, len(big))
	}
	s = open(t, dir, queue.Options{})
	after := s.Stats().FileBytes
	fi, err = os.Stat(filepath.Join(dir, "queue.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the ops are done and the store reopened: %d KiB (Stats %d KiB)", fi.Size()>>10, after>>10)
	if fi.Size() > 4<<20 || after != fi.Size() {
		t.Errorf("file after reopening = %d bytes (Stats %d), want under 4 MiB: payloads dropped and the file compacted", fi.Size(), after)
	}
	for i := range n {
		if op := get(t, s, fmt.Sprintf("b%d", i)); op.State != queue.Done {
			t.Fatalf("op b%d = %s after compaction, want done", i, op.State)
		}
	}
	// Compaction keeps the per-object seqs.
	if op := submit(t, s, "again", "o7"); op.Seq != 2 {
		t.Errorf("seq after compaction = %d, want 2", op.Seq)
	}
}

// TestListDLQPendingRuns: ListDLQPending returns whole runs of objects'
// dlq_pending ops, each in seq order, up to the limit.
func TestListDLQPendingRuns(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	ctx := t.Context()
	for i := range 5 {
		submit(t, s, fmt.Sprintf("a%d", i), "A")
		submit(t, s, fmt.Sprintf("b%d", i), "B")
	}
	for range 10 {
		op := claim(t, s, time.Now())
		if err := s.DeadLetterPending(ctx, op.ID, "HTTP400", "bad"); err != nil {
			t.Fatal(err)
		}
	}
	check := func(limit, want int) {
		t.Helper()
		pend, err := s.ListDLQPending(ctx, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(pend) != want {
			t.Fatalf("ListDLQPending(%d) = %d ops, want %d", limit, len(pend), want)
		}
		last := map[string]uint64{}
		for i, op := range pend {
			if i > 0 && pend[i-1].Object != op.Object && last[op.Object] != 0 {
				t.Errorf("object %s's ops are not one run: %v", op.Object, pend)
			}
			if op.Seq <= last[op.Object] {
				t.Errorf("object %s: seq %d after %d", op.Object, op.Seq, last[op.Object])
			}
			last[op.Object] = op.Seq
			if op.Seq != 1 && last[op.Object] == op.Seq && i == 0 {
				t.Errorf("first op listed has seq %d, want its object's lowest (1)", op.Seq)
			}
		}
	}
	check(0, 10)
	check(7, 7)
	check(3, 3)
}

// TestNextWhen: nothing is claimed while ready reports false; once it
// reports true the op is claimed (within the poll).
func TestNextWhen(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	submit(t, s, "n1", "o")
	var ready atomic.Bool
	got := make(chan string, 1)
	go func() {
		op, err := s.NextWhen(t.Context(), ready.Load, 10*time.Millisecond)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- op.ID
	}()
	select {
	case id := <-got:
		t.Fatalf("NextWhen returned %s while not ready", id)
	case <-time.After(200 * time.Millisecond):
	}
	if op := get(t, s, "n1"); op.State != queue.Queued {
		t.Fatalf("n1 = %s while not ready, want queued", op.State)
	}
	ready.Store(true)
	select {
	case id := <-got:
		if id != "n1" {
			t.Fatalf("NextWhen = %s, want n1", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("NextWhen did not claim within 5s of ready")
	}
}

// TestCompactWhileRunning (issue 15 item 7): after 30 payloads of 512 KiB
// are done, Compact shrinks the file while the store runs; submits, claims
// and reads racing with it all succeed and see every op.
func TestCompactWhileRunning(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	ctx := t.Context()
	big := json.RawMessage(htmlLike(queue.MaxPayloadBytes))
	for i := range 30 {
		if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: fmt.Sprintf("c%d", i), Object: fmt.Sprintf("o%d", i), Payload: big}); err != nil {
			t.Fatal(err)
		}
	}
	if did, err := s.Compact(); did || err != nil {
		t.Fatalf("Compact with the payloads live = %v, %v; want nothing done", did, err)
	}
	for range 30 {
		op := claim(t, s, time.Now())
		if err := s.Done(ctx, op.ID); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats().FileBytes
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var racing atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("r%d-%d", w, i)
				if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: id, Object: "race-" + id, Payload: json.RawMessage(`{"n":1}`)}); err != nil {
					t.Errorf("Submit during compaction: %v", err)
					return
				}
				if _, err := s.Get(id); err != nil {
					t.Errorf("Get during compaction: %v", err)
					return
				}
				racing.Add(1)
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	did, err := s.Compact()
	close(stop)
	wg.Wait()
	if !did || err != nil {
		t.Fatalf("Compact = %v, %v; want done", did, err)
	}
	after := s.Stats().FileBytes
	t.Logf("file %d KiB → %d KiB while %d submits raced", before>>10, after>>10, racing.Load())
	if after > before/4 {
		t.Errorf("file after Compact = %d bytes, before %d: want it to shrink", after, before)
	}
	for i := range 30 {
		if op := get(t, s, fmt.Sprintf("c%d", i)); op.State != queue.Done {
			t.Errorf("c%d = %s after Compact", i, op.State)
		}
	}
	n := 0
	for {
		op, err := s.Claim(ctx, time.Now())
		if err != nil {
			break
		}
		if err := s.Done(ctx, op.ID); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if int64(n) < racing.Load() {
		t.Errorf("claimed %d racing ops after Compact, %d were submitted", n, racing.Load())
	}
}

func htmlLike(n int) string { return `"` + strings.Repeat("<&>", (n-2)/3) + `"` }
