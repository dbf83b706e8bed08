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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/testenv"
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
		`(?m)^sidecar\s+shared \(incarnation [0-9a-f]+, pid \d+\)$`,
		`(?m)^status\s+serving$`,
		`(?m)^ready\s+yes$`,
		`(?m)^zookeeper\s+connected \(servers ` + regexp.QuoteMeta(e.zk.ConnString()) + `\)$`,
		`(?m)^session\s+0x[0-9a-f]+, negotiated timeout 3s$`,
		`(?m)^lock protocol\s+plugin$`,
		`(?m)^last reload\s+none since the sidecar started$`,
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
	if code != exitUnavailable || !strings.Contains(stderr, "no sidecar answers at "+filepath.Join(e.dir, "none.sock")) {
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
		`(?m)^holder\s+A-\d{10}  type foreground  mode exclusive  sidecar shared  token ` + strconv.FormatInt(a.Token(), 10) + `  since \S+Z  info "holder-a"$`,
		`(?m)^waiters\s+1$`,
		`(?m)^\s+1\s+B-\d{10}\s+background\s+exclusive\s+shared\s+\S+Z\s+"waiter-1"$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("locks lk-a: no match for %s in\n%s", re, stdout)
		}
	}
	code, stdout, _ = runBaton(t, append(base, "--prefix", "lk-")...)
	for _, re := range []string{
		`(?m)^OBJECT\s+HOLDER\s+TYPE\s+MODE\s+SIDECAR\s+TOKEN\s+SINCE\s+WAITERS\s+INFO$`,
		`(?m)^lk-a\s+A-\d{10}\s+foreground\s+exclusive\s+shared\s+\d+\s+\S+Z\s+1\s+"holder-a"$`,
		`(?m)^lk-b\s+B-\d{10}\s+background\s+exclusive\s+shared\s+\d+\s+\S+Z\s+0\s+""$`,
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
	if code != exitUnavailable || !strings.Contains(stderr, "no sidecar answers at "+filepath.Join(e.dir, "none.sock")) {
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
	_, stdout, _ := runBaton(t, "--config", os.DevNull, "--socket", s.socket, "status")
	if re := `(?m)^last reload\s+#1 at \S+ applied: sidecar.max.waiters, log.level; kept until restart: zookeeper.session.timeout$`; !regexp.MustCompile(re).MatchString(stdout) {
		t.Errorf("status after the reload has no match for %s:\n%s", re, stdout)
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
	// The rejection keeps the restart key pending from the earlier reload.
	_, stdout, _ = runBaton(t, "--config", os.DevNull, "--socket", s.socket, "status")
	if re := `(?m)^last reload\s+#2 at \S+ rejected, nothing changed: .*zookeeper.connection.retry.*; still kept until restart: zookeeper.session.timeout$`; !regexp.MustCompile(re).MatchString(stdout) {
		t.Errorf("status after the rejected reload has no match for %s:\n%s", re, stdout)
	}
	if h, err := c.Health(ctx); err != nil || h.Reload == nil || h.Reload.Error == "" ||
		!slices.Equal(h.Reload.KeptUntilRestart, []string{"zookeeper.session.timeout"}) {
		t.Errorf("/healthz reload after the rejection = %+v (%v), want the error and kept_until_restart [zookeeper.session.timeout]", h.Reload, err)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	s.out.waitFor(t, mark, "level=DEBUG msg=\"lease granted\"", 30*time.Second)
	r.l.Release(ctx)

	// Raising sidecar.max.waiters past what the memory limit (the default
	// GOMEMLIMIT here) holds live is applied, with a warning naming the
	// GOMEMLIMIT to set.
	p3 := maps.Clone(p)
	p3["sidecar.max.waiters"] = "20000"
	writeProps(t, s.config, p3)
	mark3 := s.out.Len()
	s.signal(t, syscall.SIGHUP)
	out = s.out.waitFor(t, mark3, "configuration reloaded", 30*time.Second)
	if re := `level=WARN msg="memory limit below the waiters' need" key=sidecar.max.waiters warning="sidecar.max.waiters is 20000: .*set GOMEMLIMIT to at least 435MiB`; !regexp.MustCompile(re).MatchString(out) {
		t.Errorf("log after raising sidecar.max.waiters to 20000 has no match for %s:\n%s", re, out)
	}
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

// lockHolderScript is a CMD that prints its pid and lease id, runs a
// SIGTERM trap (printing got-TERM) and otherwise never ends.
const lockHolderScript = `trap 'echo got-TERM' TERM; echo "pid $$ lease $BATON_LEASE_ID"; while :; do sleep 0.1; done`

// startHolder runs `baton lock [flags] obj -- sh -c lockHolderScript` as a
// process against socket and returns it with CMD's pid and lease id.
func startHolder(t *testing.T, e *env, name, socket, obj string, flags ...string) (p *proc, pid int, lease string) {
	t.Helper()
	return startHolderScript(t, e, name, socket, obj, lockHolderScript, flags...)
}

// startHolderScript is startHolder with another script, which must first
// print "pid $$ lease $BATON_LEASE_ID".
func startHolderScript(t *testing.T, e *env, name, socket, obj, script string, flags ...string) (p *proc, pid int, lease string) {
	t.Helper()
	args := append(append([]string{"--socket", socket, "lock"}, flags...), obj, "--", "sh", "-c", script)
	p = start(t, name, nil, e.bin, args...)
	line := p.out.waitFor(t, 0, "\n", 30*time.Second)
	if _, err := fmt.Sscanf(line, "pid %d lease %s", &pid, &lease); err != nil {
		t.Fatalf("%s: CMD printed %q: %v", name, line, err)
	}
	return p, pid, lease
}

// leaseOf returns the lease as the sidecar at socket answers it now.
func leaseOf(t *testing.T, socket, id string) (int, api.Lease) {
	t.Helper()
	st, body := rawDo(t, socket, "GET", "/v1/leases/"+id)
	var l api.Lease
	if st == 200 {
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatalf("lease %s: %v: %s", id, err, body)
		}
	}
	return st, l
}

// testLockZooKeeperStall (issue 9, item 2): ZooKeeper is frozen (SIGSTOP)
// under `baton lock --kill-grace 2s`: the sidecar reports the lease
// suspect with a valid_until it no longer extends; CMD gets SIGTERM at
// valid_until − 2 s (its trap runs ≥ 1.5 s before SIGKILL) and SIGKILL no
// later than that valid_until; the message says ZooKeeper is unreachable;
// the other sidecar is granted the object only after that. On the old
// baton lock SIGTERM and SIGKILL came together ("SIGKILL in 0s") when the
// validity ran out, blaming the sidecar. Its own ZooKeeper: it is frozen.
func testLockZooKeeperStall(t *testing.T, e *env) {
	// 1 s ticks allow a 20 s session: the lease turns suspect when
	// go-zookeeper notices (2/3 of the session, ~13 s) and validity, counted
	// from the leader a tickTime back, lasts ~18 s, leaving ~4 s to resume
	// ZooKeeper before the short freeze's SIGTERM is due, even under load.
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{TickTime: time.Second})
	extra := map[string]string{"zookeeper.servers": z.ConnString(), "zookeeper.session.timeout": "20000", "zookeeper.tick.time": "1000"}
	a := e.startSidecar(t, "stall-a", extra)
	b := e.startSidecar(t, "stall-b", extra)

	// A short freeze: ZooKeeper answers again before the SIGTERM is due
	// (validity − 1 s): nothing is sent, the command runs to its end.
	short, _, shortLease := startHolderScript(t, e, "lock-short-stall", a.socket, "short-stall",
		`trap 'echo got-TERM' TERM; echo "pid $$ lease $BATON_LEASE_ID"; sleep 22; echo finished`, "--kill-grace", "1s")
	if err := z.Pause(1); err != nil {
		t.Fatal(err)
	}
	waitCond(t, 20*time.Second, "the lease suspect", func() bool {
		st, l := leaseOf(t, a.socket, shortLease)
		return st == 200 && l.State == api.StateSuspect
	})
	if err := z.Resume(1); err != nil {
		t.Fatal(err)
	}
	if code := short.wait(t, 30*time.Second); code != 0 || !strings.Contains(short.out.String(), "finished") ||
		strings.Contains(short.out.String(), "got-TERM") || !strings.Contains(short.out.String(), "held again") {
		t.Errorf("short freeze: baton lock exit %d, output %q; want 0, no SIGTERM, the lock held again", code, short.out.String())
	}

	const obj = "stall-obj"
	r, pid, lease := startHolder(t, e, "lock-stall", a.socket, obj, "--kill-grace", "2s")
	granted := acquireQueued(t, b.socket, obj)

	t0 := time.Now()
	if err := z.Pause(1); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = z.Resume(1)
		}
	}()
	var vu time.Time // the valid_until the sidecar tells while suspect
	waitCond(t, 20*time.Second, "the lease suspect", func() bool {
		st, l := leaseOf(t, a.socket, lease)
		if st == 200 && l.State == api.StateSuspect {
			vu = l.ValidUntil.Time
		}
		return !vu.IsZero()
	})
	suspect := time.Now()
	r.out.waitFor(t, 0, "got-TERM", 20*time.Second)
	termed := time.Now()
	waitCond(t, 20*time.Second, "CMD killed", func() bool { return !alive(pid) })
	killed := time.Now()
	if err := z.Resume(1); err != nil {
		t.Fatal(err)
	}
	resumed = true
	code := r.wait(t, 30*time.Second)
	g := <-granted
	if g.err != nil { // b's session may have expired in the freeze too: ask again
		t.Logf("queued acquire on the other sidecar: %v; acquiring again", g.err)
		c := client.New(b.socket)
		defer c.Close()
		l, err := c.Acquire(context.Background(), obj, client.WithWait(30*time.Second))
		if err != nil {
			t.Fatalf("other sidecar acquire after the freeze: %v", err)
		}
		g = grantResult{l: l, at: time.Now()}
	}
	t.Logf("zookeeper frozen: suspect after %v, told valid until %v; CMD got SIGTERM at %v, died at %v (%v before the valid_until); the other sidecar acquired at %v",
		suspect.Sub(t0).Round(time.Millisecond), vu.Sub(t0).Round(time.Millisecond), termed.Sub(t0).Round(time.Millisecond),
		killed.Sub(t0).Round(time.Millisecond), vu.Sub(killed).Round(time.Millisecond), g.at.Sub(t0).Round(time.Millisecond))
	stderr := r.out.String()
	if code != exitLost {
		t.Errorf("baton lock exit %d, want %d", code, exitLost)
	}
	if !strings.Contains(stderr, "ZooKeeper is unreachable") || strings.Contains(stderr, "SIGKILL in 0s") {
		t.Errorf("baton lock output %q, want ZooKeeper named unreachable and a kill grace", stderr)
	}
	if d := killed.Sub(termed); d < 1500*time.Millisecond {
		t.Errorf("SIGKILL %v after SIGTERM, want ≥ 1.5 s of the 2 s kill grace", d)
	}
	if killed.After(vu) {
		t.Errorf("CMD died %v after the valid_until the sidecar told", killed.Sub(vu))
	}
	if !g.at.After(killed) {
		t.Errorf("the other sidecar got the lock (%v) before CMD died (%v)", g.at.Sub(t0), killed.Sub(t0))
	}
	if err := g.l.Release(context.Background()); err != nil {
		t.Errorf("release on the other sidecar: %v", err)
	}
	a.stop(t)
	b.stop(t)
}

// testServeDrain (issue 9, item 3): SIGTERM of a sidecar with a 10 s grace
// while holders run: it drains. /readyz 503 and a new acquire 503
// ShuttingDown at once; leases say "draining" with the end of the grace;
// `baton lock -- sleep 3` completes, exit 0; a `baton lock --kill-grace 2s`
// whose CMD does not finish gets SIGTERM 2 s before the end of the grace
// and SIGKILL before it (exit 76, naming the drain); a Go client holder
// that never releases is told lost (reason shutdown) at the end of the
// grace; the other sidecar gets each lock only after that; the sidecar
// exits 0. On the old sidecar every holder was told "lost" at once.
func testServeDrain(t *testing.T, e *env, shared *sidecarProc) {
	ctx := context.Background()
	const grace = 10 * time.Second
	s := e.startSidecar(t, "drain", map[string]string{"sidecar.shutdown.grace": strconv.Itoa(int(grace.Milliseconds()))})
	a := start(t, "lock-drain-a", nil, e.bin, "--socket", s.socket, "lock", "drain-a", "--", "sh", "-c", "echo started; sleep 3; echo finished")
	a.out.waitFor(t, 0, "started", 30*time.Second)
	b, pidB, leaseB := startHolder(t, e, "lock-drain-b", s.socket, "drain-b", "--kill-grace", "2s")
	c := client.New(s.socket)
	defer c.Close()
	lc, err := c.Acquire(ctx, "drain-c")
	if err != nil {
		t.Fatal(err)
	}
	grantedB := acquireQueuedWatching(t, shared.socket, "drain-b", pidB)
	grantedC := acquireQueued(t, shared.socket, "drain-c")
	// the last validity the Go client holder was told (ValidUntil is zero
	// once lost): the lock must not be granted elsewhere before it
	var validC atomic.Int64
	go func() {
		for {
			if v := lc.ValidUntil(); !v.IsZero() && v.UnixNano() > validC.Load() {
				validC.Store(v.UnixNano())
			}
			select {
			case <-lc.Lost():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	t0 := time.Now()
	s.signal(t, syscall.SIGTERM)
	waitCond(t, 5*time.Second, "/readyz 503", func() bool {
		st, _ := rawDo(t, s.socket, "GET", "/readyz")
		return st == 503
	})
	if _, err := c.Acquire(ctx, "drain-new", client.WithWait(0)); err == nil {
		t.Errorf("acquire during the drain granted")
	} else if ae, ok := errors.AsType[*client.APIError](err); !ok || ae.Kind != api.ShuttingDown || ae.Status != 503 {
		t.Errorf("acquire during the drain: %v, want 503 ShuttingDown", err)
	}
	waitCond(t, 5*time.Second, "the Go client sees draining", func() bool { return lc.State() == api.StateDraining })
	if du := lc.DrainUntil(); du.After(t0.Add(grace)) || du.Before(t0.Add(grace-time.Second)) {
		t.Errorf("DrainUntil %v after SIGTERM, want just under the %v grace", du.Sub(t0), grace)
	}
	if st, l := leaseOf(t, s.socket, leaseB); st != 200 || l.State != api.StateDraining || l.DrainEndsAt == nil ||
		l.ValidUntil.After(l.DrainEndsAt.Time) {
		t.Errorf("lease of baton lock during the drain: %d %+v", st, l)
	}

	if code := a.wait(t, 30*time.Second); code != 0 || !strings.Contains(a.out.String(), "finished") {
		t.Errorf("baton lock -- sleep 3 during the drain: exit %d, output %q; want 0, finished", code, a.out.String())
	}
	finishedA := time.Now()
	b.out.waitFor(t, 0, "got-TERM", 30*time.Second)
	termedB := time.Now()
	waitCond(t, 20*time.Second, "CMD of B killed", func() bool { return !alive(pidB) })
	killedB := time.Now()
	select {
	case <-lc.Lost():
	case <-time.After(30 * time.Second):
		t.Fatalf("the Go client holder was not told lost")
	}
	lostC := time.Now()
	gB, gC := <-grantedB, <-grantedC
	for _, g := range []grantResult{gB, gC} {
		if g.err != nil {
			t.Fatalf("shared sidecar acquire: %v", g.err)
		}
		defer g.l.Release(ctx)
	}
	codeB := b.wait(t, 30*time.Second)
	if code := s.wait(t, 30*time.Second); code != 0 {
		t.Errorf("sidecar exit %d after the drain, want 0", code)
	}
	since := func(x time.Time) time.Duration { return x.Sub(t0).Round(time.Millisecond) }
	t.Logf("drain (grace %v): A finished at %v; B got SIGTERM at %v, died at %v, taken over at %v; C told lost at %v, taken over at %v",
		grace, since(finishedA), since(termedB), since(killedB), since(gB.at), since(lostC), since(gC.at))
	if codeB != exitLost || !strings.Contains(b.out.String(), "draining") {
		t.Errorf("baton lock B: exit %d, output %q; want 76 naming the drain", codeB, b.out.String())
	}
	if d := termedB.Sub(t0); d < grace-2*time.Second-time.Second {
		t.Errorf("B got SIGTERM %v after the drain began, want about the grace minus its 2 s kill grace", d)
	}
	if d := killedB.Sub(termedB); d < 1500*time.Millisecond {
		t.Errorf("B: SIGKILL %v after SIGTERM, want ≥ 1.5 s", d)
	}
	if killedB.After(t0.Add(grace)) {
		t.Errorf("B's CMD died %v after the end of the grace", killedB.Sub(t0.Add(grace)))
	}
	if gB.pidAlive { // killedB is when a poll noticed the death: an upper bound, not comparable
		t.Errorf("drain-b granted elsewhere (%v) while B's CMD was still alive", since(gB.at))
	}
	if err := lc.Err(); !errors.Is(err, client.ErrLockLost) || !strings.Contains(err.Error(), api.ReasonShutdown) {
		t.Errorf("Go client holder: %v, want lost (shutdown)", err)
	}
	if lostC.Before(t0.Add(grace - 500*time.Millisecond)) {
		t.Errorf("Go client holder told lost %v after the drain began, before the end of the grace", since(lostC))
	}
	// (lostC is when this goroutine saw Lost closed, late under load: it
	// once came 2 ms after the grant elsewhere. The holder's validity is
	// what it stops by.)
	if vc := time.Unix(0, validC.Load()); validC.Load() == 0 || !gC.at.After(vc) {
		t.Errorf("drain-c granted elsewhere (%v) before the end of the validity its holder was told (%v)", since(gC.at), since(vc))
	}
}

// testDrainCommand: `baton drain` starts the drain (POST /v1/drain): the
// holder sees "draining", /readyz is 503; baton drain waits while a lease
// is held and exits 0 once the holder released and the sidecar stopped
// (exit 0).
func testDrainCommand(t *testing.T, e *env, shared *sidecarProc) {
	ctx := context.Background()
	s := e.startSidecar(t, "drain-cmd", map[string]string{"sidecar.shutdown.grace": "30000"})
	c := client.New(s.socket)
	defer c.Close()
	l, err := c.Acquire(ctx, "drain-cmd-1")
	if err != nil {
		t.Fatal(err)
	}
	d := start(t, "baton-drain", nil, e.bin, "--socket", s.socket, "drain")
	d.out.waitFor(t, 0, "draining: 1 leases held", 10*time.Second)
	waitCond(t, 5*time.Second, "the holder sees draining", func() bool { return l.State() == api.StateDraining })
	if err := c.Ready(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("/readyz during the drain: %v, want 503", err)
	}
	time.Sleep(500 * time.Millisecond)
	if d.done() {
		t.Fatalf("baton drain exited while a lease is held: %s", d.out.String())
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("release during the drain: %v", err)
	}
	if code := d.wait(t, 30*time.Second); code != 0 || !strings.Contains(d.out.String(), "sidecar stopped") {
		t.Errorf("baton drain: exit %d, output %q", code, d.out.String())
	}
	// Drained through the API, not stopped by its owner: status 3, which
	// deploy/baton.service restarts on (deploy TestUnitRestartsAfterAPIDrain).
	if code := s.wait(t, 30*time.Second); code != exitDrained || !strings.Contains(s.out.String(), "drained through the API; exit status 3") {
		t.Errorf("sidecar exit %d after baton drain, want %d (restarted by the unit); output:\n%s", code, exitDrained, s.out.String())
	}
	code, _, stderr := runBaton(t, "--socket", s.socket, "drain")
	if code != exitUnavailable {
		t.Errorf("baton drain without a sidecar: exit %d (%s), want %d", code, stderr, exitUnavailable)
	}
}

// grantResult is the outcome of a background acquire, with when it returned.
type grantResult struct {
	l        *client.Lease
	err      error
	at       time.Time
	pidAlive bool // the watched process was still alive when the grant returned (acquireQueuedWatching)
}

// acquireQueued starts an acquire of obj (60 s wait) through the sidecar at
// socket and returns once it is queued behind the current holder.
func acquireQueued(t *testing.T, socket, obj string) <-chan grantResult {
	t.Helper()
	return acquireQueuedWatching(t, socket, obj, 0)
}

// acquireQueuedWatching is acquireQueued that also records whether process
// pid (if not 0) was alive at the instant the grant returned: a direct check
// that the lock was not granted while the old holder's command still ran.
func acquireQueuedWatching(t *testing.T, socket, obj string, pid int) <-chan grantResult {
	t.Helper()
	c := client.New(socket)
	t.Cleanup(func() { c.Close() })
	granted := make(chan grantResult, 1)
	go func() {
		l, err := c.Acquire(context.Background(), obj, client.WithWait(60*time.Second))
		at := time.Now()
		granted <- grantResult{l, err, at, pid != 0 && alive(pid)}
	}()
	waitCond(t, 30*time.Second, "waiting for "+obj, func() bool { return waitersOf(t, socket, obj) == 1 })
	return granted
}
