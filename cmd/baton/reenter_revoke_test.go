package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/ops/opstest"
)

// testLockReentry: `baton lock X -- baton lock X -- CMD` re-enters (the
// inner one finds BATON_LEASE_ID of the same object in its environment)
// instead of waiting on its parent until 75: exit 0, the inner CMD sees
// the same lease and token, and X is free afterwards.
func testLockReentry(t *testing.T, e *env, s *sidecarProc) {
	const obj = "reenter-1"
	p := start(t, "nested baton lock", nil, e.bin, "--config", os.DevNull, "--socket", s.socket, "lock", "--wait", "0", obj, "--",
		"sh", "-c", `echo "outer $BATON_LEASE_ID $BATON_FENCING_TOKEN"; exec "$0" --config /dev/null --socket "$1" lock --wait 0 "$BATON_OBJECT" -- sh -c 'echo "inner $BATON_LEASE_ID $BATON_FENCING_TOKEN"'`,
		e.bin, s.socket)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("nested baton lock exited %d, want 0; output:\n%s", code, p.out.String())
	}
	var outer, inner []string
	for _, ln := range strings.Split(p.out.String(), "\n") {
		f := strings.Fields(ln)
		switch {
		case len(f) == 3 && f[0] == "outer":
			outer = f[1:]
		case len(f) == 3 && f[0] == "inner":
			inner = f[1:]
		}
	}
	if outer == nil || inner == nil || outer[0] != inner[0] || outer[1] != inner[1] {
		t.Errorf("outer %v, inner %v: want the same lease and token; output:\n%s", outer, inner, p.out.String())
	}
	if h := holderOf(t, s.socket, obj); h != nil {
		t.Errorf("holder after both exited = %+v, want none", h)
	}
}

// testLockRevoked: `baton revoke X --reason R` while `baton lock X -- CMD`
// runs: CMD gets SIGTERM at once (its trap runs), baton lock exits 76
// saying "revoked: R"; baton revoke prints what it did and exits 0; a
// second revoke finds no holder once the lock is freed (exit 1).
func testLockRevoked(t *testing.T, e *env, s *sidecarProc) {
	const obj = "revoke-1"
	r := startLock(s.socket, nil, "--lease", "1m", obj, "--", "sh", "-c",
		`trap "echo got-TERM; exit 3" TERM; echo started; while :; do sleep 0.05; done`)
	r.out.waitFor(t, 0, "started", 30*time.Second)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	var out, errb bytes.Buffer
	t0 := time.Now()
	if code := runIn([]string{"--config", os.DevNull, "--socket", s.socket, "revoke", "--reason", "stuck job", obj}, nil, &out, &errb); code != 0 {
		t.Fatalf("baton revoke exited %d: %s %s", code, out.String(), errb.String())
	}
	code, at := r.wait(t, 30*time.Second)
	t.Logf("baton revoke → baton lock exited %d after %v", code, at.Sub(t0).Round(time.Millisecond))
	if code != exitLost || !strings.Contains(r.out.String(), "got-TERM") || !strings.Contains(r.err.String(), "revoked: stuck job") {
		t.Errorf("baton lock: exit %d stdout %q stderr %q; want %d, got-TERM, revoked: stuck job", code, r.out.String(), r.err.String(), exitLost)
	}
	if !strings.Contains(out.String(), `revoked "revoke-1"`) || !strings.Contains(out.String(), "revoked: stuck job") {
		t.Errorf("baton revoke printed %q", out.String())
	}
	waitCond(t, 30*time.Second, "the revoked lock freed", func() bool { return holderOf(t, s.socket, obj) == nil })
	out.Reset()
	errb.Reset()
	if code := runIn([]string{"--config", os.DevNull, "--socket", s.socket, "revoke", obj}, nil, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), "not held") {
		t.Errorf("revoke of a free object: exit %d, stderr %q; want %d, not held", code, errb.String(), exitFailure)
	}
}

// testOpHandlerReenters: a background-op handler that locks its own object
// with the delivery's Baton-Lease-Id re-enters the delivery's grant (same
// token, 2 holds) and the op is done on its first attempt; the same acquire
// without the id waits on the delivery itself and is refused (423), as
// every such handler was before re-entry (its op ended dead-lettered). The
// delivery's own hold cannot be released by the app (409).
func testOpHandlerReenters(t *testing.T, e *env) {
	var sock string // set before the first op is submitted
	results := make(chan error, 1)
	app := opstest.StartT(t, opstest.Options{Respond: func(ctx context.Context, d opstest.Delivery) int {
		err := func() error {
			c := client.New(sock)
			defer c.Close()
			if _, err := c.Acquire(ctx, d.Object, client.WithWait(0)); !errors.As(err, new(*client.InstanceLockError)) {
				return fmt.Errorf("acquire without the lease id = %v, want 423 (the delivery holds it)", err)
			}
			id := d.Header.Get("Baton-Lease-Id")
			l, err := c.Acquire(ctx, d.Object, client.WithReentry(id), client.WithWait(0))
			if err != nil {
				return fmt.Errorf("re-entry with Baton-Lease-Id %s: %w", id, err)
			}
			if strconv.FormatInt(l.Token(), 10) != d.Token || l.Holds() != 2 {
				return fmt.Errorf("re-entered token %d holds %d, want the delivery's token %s, 2 holds", l.Token(), l.Holds(), d.Token)
			}
			if err := l.Release(ctx); err != nil {
				return fmt.Errorf("release of the re-entered hold: %w", err)
			}
			code, body := rawDo(t, sock, "DELETE", "/v1/leases/"+id)
			if code != 409 {
				return fmt.Errorf("DELETE of the delivery's own hold = %d %s, want 409", code, body)
			}
			return nil
		}()
		select {
		case results <- err:
		default:
		}
		if err != nil {
			return 500
		}
		return 200
	}})
	s := e.startSidecar(t, "op-reenter", map[string]string{"sidecar.app.url": app.URL(), "elastic.request.retry.count": "0"})
	defer s.stop(t)
	sock = s.socket
	c := client.New(s.socket)
	defer c.Close()
	if _, err := c.Submit(context.Background(), api.OpRequest{ID: "reenter-op", Object: "article-re"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-results:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery within 60s")
	}
	var op *api.Op
	waitCond(t, 30*time.Second, "the op done", func() bool {
		var err error
		op, err = c.Op(context.Background(), "reenter-op")
		return err == nil && op.State == api.OpDone
	})
	if ds := app.ByID("reenter-op"); len(ds) != 1 || ds[0].Status != 200 || op.LastError != "" {
		t.Errorf("op = %+v after %d deliveries, want done on its first delivery", op, len(ds))
	}
	waitCond(t, 30*time.Second, "the object freed", func() bool { return holderOf(t, s.socket, "article-re") == nil })
}

// testLockPreempted: `baton lock --preempt X -- CMD2` while `baton lock
// --preemptible X -- CMD1` runs: CMD1's SIGTERM trap runs at once, its
// baton lock exits 76; the preempting one is granted and exits 0.
func testLockPreempted(t *testing.T, e *env, s *sidecarProc) {
	const obj = "preempt-1"
	r := startLock(s.socket, nil, "--type", "background", "--preemptible", "--cleanup", "3s", obj, "--", "sh", "-c",
		`trap "echo got-TERM; exit 3" TERM; echo started; while :; do sleep 0.05; done`)
	r.out.waitFor(t, 0, "started", 30*time.Second)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	t0 := time.Now()
	code, stdout, stderr := lockIn(t, s.socket, "--preempt", "--wait", "10s", obj, "--", "echo", "granted")
	took := time.Since(t0)
	if code != 0 || !strings.Contains(stdout, "granted") {
		t.Errorf("preempting baton lock: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	hcode, at := r.wait(t, 30*time.Second)
	t.Logf("preempting baton lock done in %v; the preempted one exited %d %v after the request", took.Round(time.Millisecond), hcode, at.Sub(t0).Round(time.Millisecond))
	if hcode != exitLost || !strings.Contains(r.out.String(), "got-TERM") || !strings.Contains(r.err.String(), "preempted") {
		t.Errorf("preempted baton lock: exit %d stdout %q stderr %q; want %d, got-TERM, preempted", hcode, r.out.String(), r.err.String(), exitLost)
	}
}

// testLockPreemptWithdrawn: the requester preempting `baton lock
// --preemptible X -- CMD` (forceful) goes away during CMD's cleanup window:
// its ask is withdrawn, baton lock says so and calls off the SIGKILL, CMD
// (which trapped SIGTERM and goes on) is not killed when the window ends,
// and baton lock exits with CMD's own status when CMD finishes: the lock
// was never lost.
func testLockPreemptWithdrawn(t *testing.T, e *env, s *sidecarProc) {
	const obj = "preempt-withdrawn"
	stop := t.TempDir() + "/stop"
	r := startLock(s.socket, nil, "--preemptible", "--cleanup", "2s", obj, "--", "sh", "-c",
		`trap "echo got-TERM" TERM; echo started; while [ ! -e "$0" ]; do sleep 0.05; done; echo finished`, stop)
	r.out.waitFor(t, 0, "started", 30*time.Second)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gave := make(chan error, 1)
	go func() {
		_, err := client.New(s.socket).Acquire(ctx, obj, client.WithPreempt(0, true), client.WithWait(20*time.Second))
		gave <- err
	}()
	r.out.waitFor(t, 0, "got-TERM", 30*time.Second)
	cancel() // the requester gives up
	if err := <-gave; err == nil {
		t.Fatal("the preempting acquire was granted, want it cancelled")
	}
	r.err.waitFor(t, 0, "withdrawn", 30*time.Second)
	select {
	case code := <-r.done:
		t.Fatalf("baton lock exited %d within 3s of a withdrawn preemption (cleanup 2s); stderr %q", code, r.err.String())
	case <-time.After(3 * time.Second): // past the cleanup window: not taken, CMD not killed
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _ := r.wait(t, 30*time.Second)
	if code != 0 || !strings.Contains(r.out.String(), "finished") {
		t.Errorf("baton lock after a withdrawn preemption: exit %d stdout %q stderr %q; want 0 and CMD finished", code, r.out.String(), r.err.String())
	}
}
