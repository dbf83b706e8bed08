package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// testLeasesRelease: a holder that lost its lease id finds it with `baton
// leases` and releases it with `baton release LEASE_ID` (issue 20 item 3).
func testLeasesRelease(t *testing.T, s *sidecarProc) {
	ctx := context.Background()
	c := client.New(s.socket)
	defer c.Close()
	a, err := c.Acquire(ctx, "leases-a", client.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "leases b", client.WithInfo("nightly\tjob"), client.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	code, out, stderr := runBaton(t, "--socket", s.socket, "leases")
	if code != 0 || !strings.Contains(out, a.ID()) || !strings.Contains(out, b.ID()) || !strings.Contains(out, `"leases b"`) ||
		!strings.Contains(out, `"nightly\tjob"`) || !strings.HasPrefix(out, "LEASE") {
		t.Errorf("baton leases: exit %d, stdout:\n%s\nstderr: %s\nwant both leases, names and info quoted", code, out, stderr)
	}
	code, out, stderr = runBaton(t, "--socket", s.socket, "release", a.ID())
	if code != 0 || out != "released \"leases-a\" (token "+strconv.FormatInt(a.Token(), 10)+")\n" {
		t.Errorf("baton release: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if _, err := c.Inspect(ctx, "leases-a"); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Inspect(ctx, "leases-a"); st.Holder != nil {
		t.Errorf("leases-a still held after baton release: %+v", st.Holder)
	}
	code, out, _ = runBaton(t, "--socket", s.socket, "leases", "--json")
	if code != 0 || strings.Contains(out, a.ID()) || !strings.Contains(out, b.ID()) || !strings.Contains(out, `"all": true`) {
		t.Errorf("baton leases --json after the release: exit %d:\n%s", code, out)
	}
	code, _, stderr = runBaton(t, "--socket", s.socket, "release", a.ID())
	if code != exitFailure || !strings.Contains(stderr, "NoNode") {
		t.Errorf("baton release of a released lease: exit %d, stderr %q; want 1 NoNode", code, stderr)
	}
	code, _, stderr = runBaton(t, "--socket", s.socket, "release")
	if code != exitUsage || !strings.Contains(stderr, "missing LEASE_ID") {
		t.Errorf("baton release without an id: exit %d, stderr %q", code, stderr)
	}
	if _, err := c.ReleaseLease(ctx, "nope"); !errors.Is(err, client.ErrNoNode) {
		t.Errorf("ReleaseLease(unknown): %v, want ErrNoNode", err)
	}
}

// testLockHold: `baton lock OBJ` without a command holds the lock, printing
// the lease, until SIGTERM (released, exit 0) or its loss (exit 76).
func testLockHold(t *testing.T, e *env, s *sidecarProc) {
	ctx := context.Background()
	c := client.New(s.socket)
	defer c.Close()
	p := start(t, "lock-hold", nil, e.bin, "--socket", s.socket, "lock", "hold-1")
	line := p.out.waitFor(t, 0, "until SIGINT (Ctrl-C) or SIGTERM", 20*time.Second)
	st, err := c.Inspect(ctx, "hold-1")
	if err != nil || st.Holder == nil || !strings.Contains(line, "BATON_FENCING_TOKEN="+strconv.FormatInt(st.Holder.Token, 10)) {
		t.Fatalf("baton lock hold-1 printed %q; holder %+v (%v)", line, st.Holder, err)
	}
	ll, err := c.Leases(ctx)
	if err != nil || len(ll.Leases) == 0 || !strings.Contains(line, "BATON_LEASE_ID="+ll.Leases[0].LeaseID) {
		t.Fatalf("leases: %+v %v", ll, err)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 0 || !strings.Contains(p.out.String(), `released "hold-1"`) {
		t.Errorf("baton lock hold-1 after SIGTERM: exit %d, output %q; want 0, released", code, p.out.String())
	}
	if st, err := c.Inspect(ctx, "hold-1"); err != nil || st.Holder != nil {
		t.Errorf("hold-1 after the release: %+v %v, want free", st, err)
	}

	// Lost while held: revoked by an operator.
	p = start(t, "lock-hold-2", nil, e.bin, "--socket", s.socket, "lock", "hold-2")
	p.out.waitFor(t, 0, "until SIGINT", 20*time.Second)
	if _, err := c.Revoke(ctx, "hold-2", "test", 0); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != exitLost || !strings.Contains(p.out.String(), "revoked: test") {
		t.Errorf("baton lock hold-2 revoked: exit %d, output %q; want 76 naming the revocation", code, p.out.String())
	}
}

// testOtherUID: the CLI under another uid (a real process, uid 1001): an
// admin action is refused with exit 77 and the sidecar's message naming
// the key; its own leases are listed, root's are not; another uid's lease
// cannot be released by it.
func testOtherUID(t *testing.T, e *env) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the CLI under another uid")
	}
	if err := os.Chmod(e.dir, 0o755); err != nil { // the binary and the socket, for uid 1001
		t.Fatal(err)
	}
	s := e.startSidecar(t, "other-uid", map[string]string{"sidecar.socket.mode": "0666"})
	defer s.stop(t)
	as := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(e.bin, append([]string{"--socket", s.socket}, args...)...)
		cmd.Env = cleanProcEnv()
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	ctx := context.Background()
	c := client.New(s.socket)
	defer c.Close()
	root, err := c.Acquire(ctx, "uid-root", client.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Release(ctx)
	for _, args := range [][]string{
		{"revoke", "uid-root"},
		{"drain", "--no-wait"},
		{"lock", "--preempt", "--forceful", "--wait", "1s", "uid-root", "--", "true"},
		{"release", root.ID()},
	} {
		code, out := as(args...)
		if code != exitNoPerm || !strings.Contains(out, "Forbidden") || !strings.Contains(out, "sidecar.auth.admin.uids") {
			t.Errorf("baton %s as uid 1001: exit %d, output %q; want 77 naming sidecar.auth.admin.uids", strings.Join(args, " "), code, out)
		}
	}
	code, out := as("lock", "uid-1001", "--", e.bin, "--socket", s.socket, "leases")
	if code != 0 || !strings.Contains(out, `"uid-1001"  1001`) || strings.Contains(out, "uid-root") {
		t.Errorf("baton leases as uid 1001 under its own lock: exit %d:\n%s\nwant its lease only, with uid 1001", code, out)
	}
	if st, err := c.Inspect(ctx, "uid-root"); err != nil || st.Holder == nil {
		t.Errorf("root's lock after uid 1001's attempts: %+v %v, want held", st, err)
	}
}
