package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// watchLineRE is the form of a `baton watch` line.
var watchLineRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ldr/1 (held token=(\d+) node=A-\d{10} sidecar=shared type=foreground mode=exclusive since=\S+ info="([^"]*)"|free) waiters=(\d+)( queue=(A-\d{10}@shared))? version=[0-9.a-z]+$`)

// testWatch: `baton watch OBJECT` (a process) prints one line per change of
// the holder and the queue: free, a holder with its token and info, a
// `baton lock --wait forever` waiting behind it (queueing again after
// each wait the sidecar gives up on: here 1 s instead of 10 minutes), the
// handoff to it, free again; it exits 0 on SIGTERM. --json --count 1
// prints the API's answer and exits; a bad object is 64, no sidecar 69.
func testWatch(t *testing.T, e *env, s *sidecarProc) {
	ctx := context.Background()
	c := client.New(s.socket)
	defer c.Close()
	const obj = "ldr/1"
	w := start(t, "watch", nil, e.bin, "--socket", s.socket, "watch", obj)
	w.out.waitFor(t, 0, " free waiters=0 ", 20*time.Second)

	l1, err := c.Acquire(ctx, obj, client.WithInfo("leader-1"), client.WithoutRenewal(), client.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	w.out.waitFor(t, 0, "held token="+strconv.FormatInt(l1.Token(), 10)+" ", 20*time.Second)

	defer func(d time.Duration) { foreverAttempt = d }(foreverAttempt)
	foreverAttempt = time.Second
	// The elected command writes its token to a file and holds until the
	// test has seen the watcher print it: a holder shorter than a
	// ZooKeeper round trip may be missed (WaitChange says so), and under
	// a loaded CI machine an `echo` was.
	dir := t.TempDir()
	tokFile, goFile := filepath.Join(dir, "token"), filepath.Join(dir, "go")
	var lockOut, lockErr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runIn([]string{"--socket", s.socket, "lock", "--wait", "forever", "--info", "leader-2", obj, "--", "sh", "-c",
			`echo "$BATON_FENCING_TOKEN" >"$1.tmp" && mv "$1.tmp" "$1" && while [ ! -e "$2" ]; do sleep 0.05; done; echo "elected with token $BATON_FENCING_TOKEN"`, "sh", tokFile, goFile}, nil, &lockOut, &lockErr)
	}()
	// Two attempts of the forever waiter seen in the queue: it asked again.
	queued := func() map[string]bool {
		q := map[string]bool{}
		for _, m := range regexp.MustCompile(` queue=(\S+)`).FindAllStringSubmatch(w.out.String(), -1) {
			q[m[1]] = true
		}
		return q
	}
	waitCond(t, 30*time.Second, "the forever waiter queued twice", func() bool { return len(queued()) >= 2 })
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var held string
	waitCond(t, 60*time.Second, "the forever waiter elected", func() bool {
		b, err := os.ReadFile(tokFile)
		held = strings.TrimSpace(string(b))
		return err == nil
	})
	w.out.waitFor(t, 0, "held token="+held+" ", 20*time.Second)
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(lockOut.String(), "elected with token ") {
			t.Fatalf("baton lock --wait forever: exit %d, stdout %q, stderr %q", code, lockOut.String(), lockErr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("baton lock --wait forever not done 60s after the holder's release")
	}
	tok2 := strings.TrimSpace(strings.TrimPrefix(lockOut.String(), "elected with token "))
	if tok2 != held {
		t.Fatalf("the elected command saw token %q, then %q", held, tok2)
	}
	mark := strings.Index(w.out.String(), "held token="+tok2+" ")
	w.out.waitFor(t, mark, " free waiters=0 ", 20*time.Second)
	w.signal(t, syscall.SIGTERM)
	if code := w.wait(t, 20*time.Second); code != 0 {
		t.Errorf("baton watch after SIGTERM: exit %d; output:\n%s", code, w.out.String())
	}

	t.Logf("baton watch printed:\n%s", w.out.String())
	// Every line has the form; holders in order: leader-1, then leader-2.
	var holders []string
	for _, line := range strings.Split(strings.TrimSpace(w.out.String()), "\n") {
		m := watchLineRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("baton watch line %q is not of the form %s", line, watchLineRE)
			continue
		}
		if h := m[2] + " " + m[3]; m[2] != "" && (len(holders) == 0 || holders[len(holders)-1] != h) {
			holders = append(holders, h)
		}
	}
	if want := []string{strconv.FormatInt(l1.Token(), 10) + " leader-1", tok2 + " leader-2"}; strings.Join(holders, ",") != strings.Join(want, ",") {
		t.Errorf("holders printed %q, want %q; output:\n%s", holders, want, w.out.String())
	}

	code, out, stderr := runBaton(t, "--socket", s.socket, "watch", "--json", "--count", "1", obj)
	var v api.LockWatch
	if code != 0 || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &v) != nil || v.Holder != nil || v.Version == "" || !v.Changed {
		t.Errorf("baton watch --json --count 1: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if code, _, stderr := runBaton(t, "--socket", s.socket, "watch", ""); code != exitUsage || !strings.Contains(stderr, "object") {
		t.Errorf("baton watch with an empty object: exit %d, stderr %q; want 64", code, stderr)
	}
	if code, _, stderr := runBaton(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "watch", obj); code != exitUnavailable {
		t.Errorf("baton watch against no sidecar: exit %d, stderr %q; want 69", code, stderr)
	}
	if code, _, stderr := runBaton(t, "--socket", s.socket, "lock", "--wait", "ever", obj); code != exitUsage || !strings.Contains(stderr, `"forever"`) {
		t.Errorf("baton lock --wait ever: exit %d, stderr %q; want 64 naming forever", code, stderr)
	}
}
