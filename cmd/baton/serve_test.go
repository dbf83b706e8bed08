package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
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

// TestLogSetup: log.level and log.format change live, also for loggers
// derived with With before the change.
func TestLogSetup(t *testing.T) {
	var buf bytes.Buffer
	ls := newLogSetup(&buf, slog.LevelInfo, "text")
	log := ls.logger.With("component", "x")
	log.Debug("hidden")
	log.Info("one", "k", 1)
	ls.level.Set(slog.LevelDebug)
	ls.setFormat("json")
	log.Debug("two", "k", 2)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "level=INFO msg=one component=x k=1") {
		t.Errorf("text line = %q", lines[0])
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatalf("second line is not JSON: %q: %v", lines[1], err)
	}
	if rec["msg"] != "two" || rec["level"] != "DEBUG" || rec["component"] != "x" || rec["k"] != 2.0 {
		t.Errorf("json record = %v", rec)
	}
}

// testServeReadySocketMode: the sidecar serves, /readyz 200, and the
// socket file has sidecar.socket.mode.
func testServeReadySocketMode(t *testing.T, e *env, s *sidecarProc) {
	fi, err := os.Stat(s.socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600 (sidecar.socket.mode)", fi.Mode())
	}
	if code, body := rawDo(t, s.socket, "GET", "/readyz"); code != 200 || !strings.Contains(body, `"ready":true`) {
		t.Errorf("GET /readyz = %d %s", code, body)
	}
}

// testStatus: `baton status` against a ready, an unready and no sidecar.
func testStatus(t *testing.T, e *env, s *sidecarProc) {
	c := client.New(s.socket)
	defer c.Close()
	l, err := c.Acquire(context.Background(), "st-1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	code, stdout, stderr := runBaton(t, "--config", os.DevNull, "--socket", s.socket, "status")
	if code != 0 {
		t.Errorf("status: exit %d, stderr %q", code, stderr)
	}
	for _, re := range []string{
		`(?m)^sidecar\s+shared \(incarnation [0-9a-f]+\)$`,
		`(?m)^status\s+serving$`,
		`(?m)^ready\s+yes$`,
		`(?m)^zookeeper\s+connected, session 0x[0-9a-f]+, timeout 3s$`,
		`(?m)^locks held\s+1$`,
		`(?m)^waiters\s+0$`,
		`(?m)^cleanup pending\s+0$`,
		`(?m)^leases\s+1$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("status output has no match for %s:\n%s", re, stdout)
		}
	}
	code, stdout, _ = runBaton(t, "--config", os.DevNull, "--socket", s.socket, "status", "--json")
	var h api.Health
	if err := json.Unmarshal([]byte(stdout), &h); err != nil || code != 0 {
		t.Fatalf("status --json: exit %d, %v: %q", code, err, stdout)
	}
	if !h.Ready || h.Sidecar != "shared" || h.ZooKeeper.TimeoutMS != 3000 || h.ZooKeeper.LocksHeld != 1 {
		t.Errorf("status --json = %+v", h)
	}

	code, _, stderr = runBaton(t, "--config", os.DevNull, "--socket", filepath.Join(e.dir, "none.sock"), "status")
	if code != exitUnavailable || !strings.Contains(stderr, "unreachable") {
		t.Errorf("status without a sidecar: exit %d, stderr %q; want 69", code, stderr)
	}

	// A sidecar whose ZooKeeper cannot be reached serves, but is not ready.
	nz := e.spawnSidecar(t, "nozk", map[string]string{"zookeeper.servers": "127.0.0.1:1"})
	nc := client.New(nz.socket)
	defer nc.Close()
	waitCond(t, 60*time.Second, "the sidecar without ZooKeeper to serve", func() bool {
		_, err := nc.Health(context.Background())
		return err == nil
	})
	code, stdout, stderr = runBaton(t, "--config", os.DevNull, "--socket", nz.socket, "status")
	if code != exitUnavailable || !regexp.MustCompile(`(?m)^ready\s+no: zookeeper`).MatchString(stdout) || !strings.Contains(stderr, "not ready") {
		t.Errorf("status of an unready sidecar: exit %d, stdout %q, stderr %q; want 69", code, stdout, stderr)
	}
	code, _, stderr = lockIn(t, nz.socket, "--wait", "1s", "nozk-1", "--", "echo", "ran")
	if code != exitUnavailable || !strings.Contains(stderr, api.ZooKeeperUnavailable) {
		t.Errorf("baton lock without ZooKeeper: exit %d, stderr %q; want 69", code, stderr)
	}
	nz.stop(t)
}

// testLocks: `baton locks` lists holders and waiter counts; `baton locks
// OBJECT` shows the holder and the waiters in grant order.
func testLocks(t *testing.T, e *env, s *sidecarProc) {
	ctx := context.Background()
	c := client.New(s.socket)
	defer c.Close()
	a, err := c.Acquire(ctx, "lk-a", client.WithInfo("holder-a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "lk-b", client.WithType(client.Background))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	type result struct {
		l   *client.Lease
		err error
	}
	waited := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "lk-a", client.WithWait(30*time.Second), client.WithInfo("waiter-1"), client.WithType(client.Background))
		waited <- result{l, err}
	}()
	waitCond(t, 30*time.Second, "a waiter on lk-a", func() bool { return waitersOf(t, s.socket, "lk-a") == 1 })

	base := []string{"--config", os.DevNull, "--socket", s.socket, "locks"}
	code, stdout, stderr := runBaton(t, append(base, "lk-a")...)
	if code != 0 {
		t.Errorf("locks lk-a: exit %d, stderr %q", code, stderr)
	}
	for _, re := range []string{
		`(?m)^object\s+lk-a$`,
		`(?m)^holder\s+A-\d{10}  type foreground  sidecar shared  token ` + strconv.FormatInt(a.Token(), 10) + `  since \S+Z  info "holder-a"$`,
		`(?m)^waiters\s+1$`,
		`(?m)^\s+1\s+B-\d{10}\s+background\s+shared\s+\S+Z\s+"waiter-1"$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("locks lk-a: no match for %s in\n%s", re, stdout)
		}
	}
	code, stdout, _ = runBaton(t, append(base, "--prefix", "lk-")...)
	for _, re := range []string{
		`(?m)^OBJECT\s+HOLDER\s+TYPE\s+SIDECAR\s+TOKEN\s+SINCE\s+WAITERS\s+INFO$`,
		`(?m)^lk-a\s+A-\d{10}\s+foreground\s+shared\s+\d+\s+\S+Z\s+1\s+"holder-a"$`,
		`(?m)^lk-b\s+B-\d{10}\s+background\s+shared\s+\d+\s+\S+Z\s+0\s+""$`,
	} {
		if code != 0 || !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("locks --prefix lk-: exit %d, no match for %s in\n%s", code, re, stdout)
		}
	}
	code, stdout, _ = runBaton(t, append(base, "--json", "lk-a")...)
	var st api.LockStatus
	if err := json.Unmarshal([]byte(stdout), &st); err != nil || code != 0 {
		t.Fatalf("locks --json lk-a: exit %d, %v: %q", code, err, stdout)
	}
	if st.Holder == nil || st.Holder.Token != a.Token() || len(st.Waiters) != 1 || st.Waiters[0].Info != "waiter-1" {
		t.Errorf("locks --json lk-a = %+v", st)
	}
	code, stdout, _ = runBaton(t, append(base, "--json", "--prefix", "lk-")...)
	var ll api.LockList
	if err := json.Unmarshal([]byte(stdout), &ll); err != nil || code != 0 || len(ll.Locks) != 2 || ll.Locks[0].Waiters != 1 {
		t.Errorf("locks --json --prefix lk-: exit %d, %v: %+v", code, err, ll)
	}
	if code, _, stderr := runBaton(t, append(base, "bad\x01name")...); code != exitUsage || !strings.Contains(stderr, "BadRequest") {
		t.Errorf("locks with a bad name: exit %d, stderr %q; want 64", code, stderr)
	}
	if code, _, _ := runBaton(t, "--config", os.DevNull, "--socket", filepath.Join(e.dir, "none.sock"), "locks"); code != exitUnavailable {
		t.Errorf("locks without a sidecar: exit %d, want 69", code)
	}

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-waited
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	r.l.Release(ctx)
}

// testReloadCommand: `baton reload` finds the sidecar's pid through the
// socket and sends it SIGHUP.
func testReloadCommand(t *testing.T, e *env, s *sidecarProc) {
	mark := s.out.Len()
	code, stdout, stderr := runBaton(t, "--config", os.DevNull, "--socket", s.socket, "reload")
	if want := fmt.Sprintf("pid %d, node shared", s.cmd.Process.Pid); code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("reload: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
	if !regexp.MustCompile(`reload \d+ applied: changed \(none\); kept until restart \(none\)`).MatchString(stdout) {
		t.Errorf("reload printed %q, want the applied outcome", stdout)
	}
	s.out.waitFor(t, mark, "SIGHUP: reloading the configuration", 30*time.Second)
	s.out.waitFor(t, mark, "configuration reloaded", 30*time.Second)

	// an invalid file: exit 1 with the reason, the sidecar keeps serving
	bad := maps.Clone(s.props)
	bad["zookeeper.session.timeout"] = "5s"
	writeProps(t, s.config, bad)
	code, _, stderr = runBaton(t, "--config", os.DevNull, "--socket", s.socket, "reload")
	writeProps(t, s.config, s.props)
	if code != exitFailure || !strings.Contains(stderr, "reload rejected") || !strings.Contains(stderr, "zookeeper.session.timeout") {
		t.Errorf("reload of an invalid file: exit %d, stderr %q; want 1 naming the key", code, stderr)
	}
	if code, stdout, _ = runBaton(t, "--config", os.DevNull, "--socket", s.socket, "reload"); code != 0 || !strings.Contains(stdout, "applied") {
		t.Errorf("reload after fixing the file: exit %d, stdout %q", code, stdout)
	}
	code, _, stderr = runBaton(t, "--config", os.DevNull, "--socket", filepath.Join(e.dir, "none.sock"), "reload")
	if code != exitUnavailable || !strings.Contains(stderr, "unreachable") {
		t.Errorf("reload without a sidecar: exit %d, stderr %q; want 69", code, stderr)
	}
}

// testKill9Takeover: a `baton lock` holds an object through sidecar k9,
// which is killed with SIGKILL. The command is stopped before the end of
// the lock's last validity (the sidecar is unreachable), and the shared
// sidecar acquires the object within k9's session timeout plus a margin,
// after the command was stopped.
func testKill9Takeover(t *testing.T, e *env, shared *sidecarProc) {
	const session = 2 * time.Second
	k9 := e.startSidecar(t, "k9", map[string]string{"zookeeper.session.timeout": strconv.Itoa(int(session.Milliseconds()))})
	const obj = "k9-obj"
	r := startLock(k9.socket, nil, "--kill-grace", "1s", obj, "--", "sh", "-c",
		`trap "echo got-TERM; exit 5" TERM; echo started; while :; do sleep 0.1; done`)
	r.out.waitFor(t, 0, "started", 30*time.Second)
	mark := r.out.Len()

	granted := acquireQueued(t, shared.socket, obj)

	t0 := time.Now()
	k9.kill9(t)
	termAt := time.Now()
	if _, ok := r.out.await(mark, "got-TERM", 30*time.Second); ok {
		termAt = time.Now()
	} else {
		t.Errorf("CMD got no SIGTERM within 30s of the sidecar's death; stdout %q", r.out.String())
	}
	code, _ := r.wait(t, 30*time.Second)
	g := <-granted
	if g.err != nil {
		t.Fatalf("shared sidecar acquire after kill -9: %v", g.err)
	}
	defer g.l.Release(context.Background())
	takeover, stopped := g.at.Sub(t0), termAt.Sub(t0)
	t.Logf("kill -9 of the holder's sidecar (session timeout %v): CMD got SIGTERM after %v; the other sidecar acquired after %v",
		session, stopped.Round(time.Millisecond), takeover.Round(time.Millisecond))
	if code != exitLost {
		t.Errorf("baton lock exit %d, want %d; stderr %q", code, exitLost, r.err.String())
	}
	if !strings.Contains(r.err.String(), "unreachable") {
		t.Errorf("baton lock stderr %q, want the sidecar named unreachable", r.err.String())
	}
	if !termAt.Before(g.at) {
		t.Errorf("CMD was stopped (%v) after the other sidecar got the lock (%v)", stopped, takeover)
	}
	if margin := 2 * time.Second; takeover > session+margin {
		t.Errorf("takeover after %v, want within the session timeout %v + %v", takeover, session, margin)
	}
}

// testServeSIGTERM: SIGTERM with leases held: no new grants (503
// ShuttingDown), renewals refused (410 reason shutdown), a released lock is
// free at once, the sidecar exits 0 once the last lease's validity told to
// its holder has passed (not before), and the lock is then free.
func testServeSIGTERM(t *testing.T, e *env, shared *sidecarProc) {
	ctx := context.Background()
	s := e.startSidecar(t, "term", map[string]string{"sidecar.shutdown.grace": "30000"})
	c := client.New(s.socket)
	defer c.Close()
	l1, err := c.Acquire(ctx, "term-1", client.WithoutRenewal(), client.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, "term-2", client.WithoutRenewal(), client.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	vu2 := l2.ValidUntil()
	t0 := time.Now()
	s.signal(t, syscall.SIGTERM)
	var renewErr error
	waitCond(t, 10*time.Second, "renewals refused", func() bool {
		renewErr = l1.Renew(ctx)
		return renewErr != nil
	})
	if ae, ok := errors.AsType[*client.APIError](renewErr); !ok || ae.Status != 410 || ae.Reason != api.ReasonShutdown {
		t.Errorf("renew during shutdown: %v, want 410 LockLost reason shutdown", renewErr)
	}
	_, err = c.Acquire(ctx, "term-3", client.WithWait(0))
	if ae, ok := errors.AsType[*client.APIError](err); !ok || ae.Kind != api.ShuttingDown {
		t.Errorf("acquire during shutdown: %v, want 503 ShuttingDown", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Errorf("release during shutdown: %v", err)
	}
	if h := holderOf(t, shared.socket, "term-1"); h != nil {
		t.Errorf("term-1 released during shutdown but still held: %+v", h)
	}
	if h := holderOf(t, shared.socket, "term-2"); h == nil {
		t.Errorf("term-2 freed before its validity ended")
	}
	code := s.wait(t, 60*time.Second)
	exited := time.Now()
	t.Logf("SIGTERM → exit %d after %v; the unreleased lease's validity ended %v after SIGTERM",
		code, exited.Sub(t0).Round(time.Millisecond), vu2.Sub(t0).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	if exited.Before(vu2) {
		t.Errorf("exited %v before the validity told to the holder ended", vu2.Sub(exited))
	}
	if late := exited.Sub(vu2); late > 5*time.Second {
		t.Errorf("exited %v after the last validity ended, want promptly", late)
	}
	waitCond(t, 10*time.Second, "term-2 free after the exit", func() bool { return holderOf(t, shared.socket, "term-2") == nil })
	if !strings.Contains(s.out.String(), "baton serve stopped") {
		t.Errorf("no clean stop in the log:\n%s", s.out.String())
	}
}

// testServeRefuses: `baton serve` exits 1 with a message naming the cause
// when queue.dir is locked by another sidecar, when a sidecar answers on
// its socket, and when the configuration is invalid.
func testServeRefuses(t *testing.T, e *env) {
	app := map[string]string{"sidecar.app.url": "http://127.0.0.1:9/ops"} // ops enabled: queue.dir is opened
	s1 := e.startSidecar(t, "q1", app)
	qdir := s1.props["queue.dir"]
	for _, tc := range []struct {
		name  string
		extra map[string]string
		want  []string
	}{
		{"same queue.dir", map[string]string{"queue.dir": qdir}, []string{"queue.dir " + qdir + " is locked by another sidecar"}},
		{"same socket", map[string]string{"sidecar.socket.path": s1.socket}, []string{"answers on " + s1.socket}},
		{"invalid configuration", map[string]string{"zookeeper.session.timeout": "5s"},
			[]string{`zookeeper.session.timeout: "5s" is not a whole number of milliseconds`, "invalid configuration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra := maps.Clone(app)
			maps.Copy(extra, tc.extra)
			s2 := e.spawnSidecar(t, "q2-"+strings.ReplaceAll(tc.name, " ", "-"), extra)
			if code := s2.wait(t, 60*time.Second); code != exitFailure {
				t.Errorf("second sidecar: exit %d, want 1", code)
			}
			for _, want := range tc.want {
				if !strings.Contains(s2.out.String(), want) {
					t.Errorf("second sidecar output has no %q:\n%s", want, s2.out.String())
				}
			}
		})
	}
	if code, body := rawDo(t, s1.socket, "GET", "/readyz"); code != 200 {
		t.Errorf("first sidecar not ready after the refusals: %d %s", code, body)
	}
	s1.stop(t)
}

// testServeReload: SIGHUP applies a live key at once (sidecar.max.waiters
// → a second concurrent acquire gets 503 TooManyWaiters; log.level →
// debug lines), reports a restart key as kept, and rejects an invalid file
// without changing anything.
func testServeReload(t *testing.T, e *env) {
	ctx := context.Background()
	s := e.startSidecar(t, "rl", map[string]string{"sidecar.max.waiters": "10000", "log.level": "info"})
	c := client.New(s.socket)
	defer c.Close()
	holder, err := c.Acquire(ctx, "rl-1", client.WithInfo("holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	// A valid change of a live, a live and a restart key, through `baton reload`.
	p := maps.Clone(s.props)
	p["sidecar.max.waiters"], p["log.level"], p["zookeeper.session.timeout"] = "1", "debug", "4000"
	writeProps(t, s.config, p)
	mark := s.out.Len()
	if code, stdout, stderr := runBaton(t, "--config", os.DevNull, "--socket", s.socket, "reload"); code != 0 {
		t.Fatalf("reload: exit %d, %q %q", code, stdout, stderr)
	}
	out := s.out.waitFor(t, mark, "configuration reloaded", 30*time.Second)
	for _, re := range []string{
		`msg="configuration change needs a restart; the old value stays in effect" component=sidecar key=zookeeper.session.timeout old=3000 new=4000`,
		`msg="configuration changed" component=sidecar key=sidecar.max.waiters old=10000 new=1 class=live`,
		`msg="configuration reloaded" applied=sidecar.max.waiters,log.level kept_until_restart=zookeeper.session.timeout`,
	} {
		if !strings.Contains(out, re) {
			t.Errorf("log after the reload has no %q:\n%s", re, out)
		}
	}
	if h, err := c.Health(ctx); err != nil || h.ZooKeeper.TimeoutMS != 3000 {
		t.Errorf("session timeout after the reload: %+v %v, want 3000 kept until restart", h, err)
	}

	type result struct {
		l   *client.Lease
		err error
	}
	first := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "rl-1", client.WithWait(30*time.Second), client.WithInfo("waiter"))
		first <- result{l, err}
	}()
	waitCond(t, 30*time.Second, "one waiter", func() bool { return waitersOf(t, s.socket, "rl-1") == 1 })
	tooMany := func(when string) {
		t.Helper()
		_, err := c.Acquire(ctx, "rl-1", client.WithWait(5*time.Second))
		if ae, ok := errors.AsType[*client.APIError](err); !ok || ae.Kind != api.TooManyWaiters {
			t.Errorf("%s: second concurrent acquire: %v, want 503 TooManyWaiters", when, err)
		}
	}
	tooMany("after the reload")

	// An invalid file (which would also raise max.waiters) changes nothing.
	p2 := maps.Clone(p)
	p2["sidecar.max.waiters"], p2["zookeeper.connection.retry"] = "10000", "many"
	writeProps(t, s.config, p2)
	mark2 := s.out.Len()
	s.signal(t, syscall.SIGHUP)
	out = s.out.waitFor(t, mark2, "reload rejected", 30*time.Second)
	if want := `zookeeper.connection.retry: \"many\"`; !strings.Contains(out, want) || !strings.Contains(out, filepath.Base(s.config)+":") {
		t.Errorf("rejection does not name the file, line and key: %s", out)
	}
	tooMany("after the rejected reload")

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	s.out.waitFor(t, mark, "level=DEBUG msg=\"lease granted\"", 30*time.Second)
	r.l.Release(ctx)
	s.stop(t)
}

// testLockSidecarFrozen: the sidecar of a `baton lock` is frozen (SIGSTOP):
// CMD, which ignores SIGTERM, is killed by the end of the lock's last
// validity, before another sidecar can be granted the object; the frozen
// sidecar, thawed, shuts down cleanly.
func testLockSidecarFrozen(t *testing.T, e *env, shared *sidecarProc) {
	fz := e.startSidecar(t, "frozen", map[string]string{"zookeeper.session.timeout": "2000"})
	const obj = "frozen-obj"
	r := startLock(fz.socket, nil, obj, "--", "sh", "-c", `trap "" TERM; echo "pid $$"; exec sleep 60`) // default kill grace 5s
	var pid int
	if _, err := fmt.Sscanf(r.out.waitFor(t, 0, "\n", 30*time.Second), "pid %d", &pid); err != nil {
		t.Fatal(err)
	}
	granted := acquireQueued(t, shared.socket, obj)

	t0 := time.Now()
	fz.signal(t, syscall.SIGSTOP)
	waitCond(t, 30*time.Second, "CMD killed", func() bool { return !alive(pid) })
	killed := time.Now()
	g := <-granted
	fz.signal(t, syscall.SIGCONT)
	if g.err != nil {
		t.Fatalf("shared sidecar acquire: %v", g.err)
	}
	defer g.l.Release(context.Background())
	code, _ := r.wait(t, 30*time.Second)
	t.Logf("sidecar frozen: CMD (ignoring SIGTERM) dead after %v; the other sidecar acquired after %v",
		killed.Sub(t0).Round(time.Millisecond), g.at.Sub(t0).Round(time.Millisecond))
	if code != exitLost {
		t.Errorf("baton lock exit %d, want %d; stderr %q", code, exitLost, r.err.String())
	}
	if !killed.Before(g.at) {
		t.Errorf("CMD still ran when the other sidecar got the lock")
	}
	fz.stop(t)
}

// testLockSidecarSIGTERM: the sidecar of a `baton lock` shuts down: the
// long-poll reports the lease lost (reason shutdown), CMD gets SIGTERM at
// once and, ignoring it, SIGKILL before the end of the validity the
// sidecar told, so the lease is released by baton lock and not freed by the
// sidecar at that end; the sidecar exits 0.
func testLockSidecarSIGTERM(t *testing.T, e *env, shared *sidecarProc) {
	st := e.startSidecar(t, "lterm", nil)
	const obj = "lterm-obj"
	r := startLock(st.socket, nil, obj, "--", "sh", "-c", `trap "echo got-TERM" TERM; echo "pid $$"; while :; do sleep 0.1; done`)
	var pid int
	if _, err := fmt.Sscanf(r.out.waitFor(t, 0, "\n", 30*time.Second), "pid %d", &pid); err != nil {
		t.Fatal(err)
	}
	granted := acquireQueued(t, shared.socket, obj)

	t0 := time.Now()
	st.signal(t, syscall.SIGTERM)
	r.out.waitFor(t, 0, "got-TERM", 10*time.Second)
	termed := time.Now()
	waitCond(t, 30*time.Second, "CMD killed", func() bool { return !alive(pid) })
	killed := time.Now()
	g := <-granted
	if g.err != nil {
		t.Fatalf("shared sidecar acquire: %v", g.err)
	}
	defer g.l.Release(context.Background())
	code, _ := r.wait(t, 30*time.Second)
	if sc := st.wait(t, 30*time.Second); sc != 0 {
		t.Errorf("sidecar exit %d after SIGTERM, want 0", sc)
	}
	t.Logf("sidecar SIGTERM: CMD got SIGTERM after %v, SIGKILL (dead) after %v; the other sidecar acquired after %v",
		termed.Sub(t0).Round(time.Millisecond), killed.Sub(t0).Round(time.Millisecond), g.at.Sub(t0).Round(time.Millisecond))
	if code != exitLost || !strings.Contains(r.err.String(), "shutdown") {
		t.Errorf("baton lock exit %d, stderr %q; want 76 naming the shutdown", code, r.err.String())
	}
	if termed.Sub(t0) > 2*time.Second {
		t.Errorf("CMD got SIGTERM %v after the sidecar's, want at once", termed.Sub(t0))
	}
	// CMD was killed before the validity ended, so baton lock released the
	// lease (after CMD died); the sidecar did not have to free it at the
	// end of the validity, as it does for a holder that never releases.
	if regexp.MustCompile(`msg="lease ended".*object=` + obj + `.*reason=shutdown`).MatchString(st.out.String()) {
		t.Errorf("the sidecar freed the lock at the end of its validity: CMD was not stopped before:\n%s", st.out.String())
	}
}

// grantResult is the outcome of a background acquire, with when it returned.
type grantResult struct {
	l   *client.Lease
	err error
	at  time.Time
}

// acquireQueued starts an acquire of obj (60 s wait) through the sidecar at
// socket and returns once it is queued behind the current holder.
func acquireQueued(t *testing.T, socket, obj string) <-chan grantResult {
	t.Helper()
	c := client.New(socket)
	t.Cleanup(func() { c.Close() })
	granted := make(chan grantResult, 1)
	go func() {
		l, err := c.Acquire(context.Background(), obj, client.WithWait(60*time.Second))
		granted <- grantResult{l, err, time.Now()}
	}()
	waitCond(t, 30*time.Second, "waiting for "+obj, func() bool { return waitersOf(t, socket, obj) == 1 })
	return granted
}
