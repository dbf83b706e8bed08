package sidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// TestShutdownWaitsForRelease: on shutdown (a drain) acquires answer 503
// ShuttingDown, /readyz 503; leases are still renewed, state "draining",
// never valid past the end of the grace; long-polls fire once; the holder
// releases; Run then returns nil at once (not at the grace) and removes the
// socket.
func TestShutdownWaitsForRelease(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	cfg := testConfig(t, root, "sc-a")
	cfg.ShutdownGrace = 30 * time.Second
	s := start(t, cfg)
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	l := s.acquire("sd", `{"lease_ms":60000}`)
	polled := make(chan api.Lease, 1)
	go func() {
		st, raw := s.call("GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=30000", "")
		var r api.Lease
		if st != 200 || json.Unmarshal(raw, &r) != nil {
			t.Errorf("long-poll: %d %s", st, raw)
		}
		polled <- r
	}()
	waitFor(t, 10*time.Second, "the poll in progress", func() bool { return s.metric("baton_lease_polls_in_flight") == 1 })
	shut := make(chan error, 1)
	t0 := time.Now()
	go func() { shut <- s.srv.Shutdown(context.Background()) }()

	r := <-polled
	if r.State != api.StateDraining || r.DrainEndsAt == nil {
		t.Fatalf("long-poll on shutdown = %+v, want state draining with drain_ends_at", r)
	}
	end := r.DrainEndsAt.Time
	if d := end.Sub(t0); d < 29*time.Second || d > 35*time.Second { // the grace from when Shutdown ran (late under load)
		t.Errorf("drain_ends_at %v after the shutdown began, want the 30 s grace", d)
	}
	// A poll that starts while draining waits (it does not answer at once).
	pt := time.Now()
	s.mustCall(200, "GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=300", "")
	if d := time.Since(pt); d < 250*time.Millisecond {
		t.Errorf("a long-poll started while draining returned after %v, want its 300 ms timeout", d)
	}
	for range 3 {
		rn := decodeLease(t, s.mustCall(200, "POST", "/v1/leases/"+l.LeaseID+"/renew", ""))
		if rn.State != api.StateDraining || rn.ValidForMS <= 0 || rn.ValidUntil.After(end) || rn.DrainForMS <= 0 {
			t.Errorf("renew while draining = %+v, want draining, valid, not past %v", rn, end)
		}
	}
	if e := decodeError(t, s.mustCall(503, "POST", "/v1/locks/other/acquire", "")); e.Kind != api.ShuttingDown {
		t.Errorf("acquire while draining: %+v", e)
	}
	st, raw := s.call("GET", "/readyz", "")
	var h api.Health
	_ = json.Unmarshal(raw, &h)
	if st != 503 || h.Error != api.ShuttingDown || h.Status != "shutting_down" || !strings.Contains(h.Reason, "draining") {
		t.Errorf("readyz while draining: %d %s", st, raw)
	}
	s.release(l.LeaseID)
	if err := <-shut; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("shutdown took %v after the only holder released", d)
	}
	if _, err := os.Lstat(cfg.SocketPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after shutdown: %v", err)
	}
}

// TestDrainGraceOver: a holder that keeps renewing through a drain is told
// "lost" (long-poll, 410 shutdown on renew) when the grace ends, never a
// validity past that end, and the lock is granted elsewhere only after the
// last valid_until told to it. POST /v1/drain starts the drain.
func TestDrainGraceOver(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	cfg := testConfig(t, root, "sc-a")
	cfg.ShutdownGrace = 2 * time.Second
	a := start(t, cfg)
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	l := a.acquire("dg", `{"lease_ms":60000}`)
	granted := make(chan time.Time, 1)
	var other api.Lease
	go func() {
		st, raw := b.call("POST", "/v1/locks/dg/acquire", `{"wait_ms":60000}`)
		if st != 200 || json.Unmarshal(raw, &other) != nil {
			t.Errorf("sc-b acquire: %d %s", st, raw)
		}
		granted <- time.Now()
	}()
	waitFor(t, 10*time.Second, "sc-b queued", func() bool {
		var st api.LockStatus
		_ = json.Unmarshal(b.mustCall(200, "GET", "/v1/locks/dg", ""), &st)
		return len(st.Waiters) == 1
	})
	t0 := time.Now()
	var d api.DrainResponse
	if err := json.Unmarshal(a.mustCall(202, "POST", "/v1/drain", ""), &d); err != nil || !d.Draining || d.GraceMS != 2000 {
		t.Fatalf("POST /v1/drain = %+v, %v", d, err)
	}
	var told time.Time // the latest valid_until told
	var lostAt time.Time
	for lostAt.IsZero() {
		st, raw := a.call("POST", "/v1/leases/"+l.LeaseID+"/renew", "")
		switch st {
		case 200:
			rn := decodeLease(t, raw)
			if rn.ValidUntil.After(d.EndsAt.Time) {
				t.Errorf("renewal during the drain told %v, past the end of the grace %v", rn.ValidUntil, d.EndsAt)
			}
			if rn.ValidUntil.After(told) {
				told = rn.ValidUntil.Time
			}
		case 410:
			lostAt = time.Now()
			if e := decodeError(t, raw); e.Reason != api.ReasonShutdown {
				t.Errorf("renew after the grace: %+v, want reason shutdown", e)
			}
		default:
			t.Fatalf("renew during the drain: %d %s", st, raw)
		}
		select {
		case g := <-granted:
			t.Fatalf("granted elsewhere %v after the drain began, before the holder was told lost", g.Sub(t0))
		case <-time.After(50 * time.Millisecond):
		}
	}
	tg := <-granted
	t.Logf("drain: told lost %v after it began (grace 2 s); last valid_until told %v; sc-b granted after %v",
		lostAt.Sub(t0).Round(time.Millisecond), told.Sub(t0).Round(time.Millisecond), tg.Sub(t0).Round(time.Millisecond))
	if lostAt.Sub(t0) < 1900*time.Millisecond {
		t.Errorf("told lost %v after the drain began, before the 2 s grace ended", lostAt.Sub(t0))
	}
	if tg.Before(told) {
		t.Errorf("granted elsewhere %v before the valid_until told to the holder", told.Sub(tg))
	}
	if err := a.srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after the drain: %v", err)
	}
	b.release(other.LeaseID)
}

// TestShutdownHonoursValidity: a holder that neither releases nor renews
// keeps the lock until the end of the grace (it may still renew until
// then) or the valid_until it was told, whichever is later — also when
// sidecar.shutdown.grace is shorter than that validity; then the lock is
// released and Run returns nil.
func TestShutdownHonoursValidity(t *testing.T) {
	for _, grace := range []time.Duration{3 * time.Second, 0} {
		t.Run("grace "+grace.String(), func(t *testing.T) { testShutdownHonoursValidity(t, grace) })
	}
}

func testShutdownHonoursValidity(t *testing.T, grace time.Duration) {
	root := testRoot(t)
	conn := rawConn(t)
	cfg := testConfig(t, root, "sc-a")
	cfg.ShutdownGrace = grace
	a := start(t, cfg)
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	l := a.acquire("hv", `{"lease_ms":60000}`)
	told := decodeLease(t, a.mustCall(200, "GET", "/v1/leases/"+l.LeaseID, "")).ValidUntil.Time
	granted := make(chan time.Time, 1)
	var other api.Lease
	go func() {
		st, raw := b.call("POST", "/v1/locks/hv/acquire", `{"wait_ms":60000}`)
		if st != 200 || json.Unmarshal(raw, &other) != nil {
			t.Errorf("sc-b acquire: %d %s", st, raw)
		}
		granted <- time.Now()
	}()
	waitFor(t, 10*time.Second, "sc-b queued", func() bool {
		var st api.LockStatus
		_ = json.Unmarshal(b.mustCall(200, "GET", "/v1/locks/hv", ""), &st)
		return len(st.Waiters) == 1
	})
	t0 := time.Now()
	a.cancel() // like SIGTERM
	tg := <-granted
	free := told
	if ge := t0.Add(grace); ge.After(free) {
		free = ge
	}
	t.Logf("told valid until %v after the shutdown began, grace %v; sc-b granted after %v", told.Sub(t0).Round(time.Millisecond), grace, tg.Sub(t0).Round(time.Millisecond))
	if tg.Before(free) {
		t.Errorf("granted elsewhere %v before the later of the valid_until told and the end of the grace", free.Sub(tg))
	}
	if tg.Sub(free) > 5*time.Second {
		t.Errorf("released %v after the told validity and the grace; the wait should end then", tg.Sub(free))
	}
	b.release(other.LeaseID)
}

// TestSocketInUse: a second sidecar on the socket of a running one refuses
// to start, and the first keeps serving.
func TestSocketInUse(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "sc-a")
	a := start(t, cfg)
	second, err := sidecar.New(cfg, sidecar.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = second.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "answers on") {
		t.Errorf("second Run = %v, want a refusal naming the live socket", err)
	}
	a.mustCall(200, "GET", "/healthz", "")
}

// TestStaleSocketReplaced: a socket file left by a crashed run is replaced;
// the socket has sidecar.socket.mode; it is removed on exit. A path that is
// not a socket is never removed.
func TestStaleSocketReplaced(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "sc-a")
	cfg.SocketMode = 0o600
	ln, err := net.Listen("unix", cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody answers: like a crash
	if _, err := os.Lstat(cfg.SocketPath); err != nil {
		t.Fatalf("stale socket file: %v", err)
	}
	s := start(t, cfg)
	fi, err := os.Stat(cfg.SocketPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	s.stop()
	if _, err := os.Lstat(cfg.SocketPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file after Run returned: %v", err)
	}

	cfg2 := testConfig(t, testRoot(t), "sc-b")
	if err := os.WriteFile(cfg2.SocketPath, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := sidecar.New(cfg2, sidecar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Run over a regular file = %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(cfg2.SocketPath); string(b) != "precious" {
		t.Errorf("the regular file was touched")
	}
}

// TestReload: live keys apply at once, next keys to later requests, and
// restart keys are reported and kept.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/baton.properties"
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t, testRoot(t), "sc-a")
	base := "zookeeper.servers=" + strings.Join(cfg.ZKServers, ",") + "\nzookeeper.lock.root=" + cfg.LockRoot +
		"\nsidecar.socket.path=" + cfg.SocketPath + "\nsidecar.node.id=sc-a\nzookeeper.session.timeout=4000\n"
	write(base + "sidecar.lease.default=500\nsidecar.lease.max=1000\n")
	cur, err := props.Load(props.LoadOptions{File: file})
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, cur.Config)
	if e := decodeError(t, s.mustCall(400, "POST", "/v1/locks/o/acquire", `{"lease_ms":2000}`)); e.Field != "lease_ms" {
		t.Errorf("lease over the max: %+v", e)
	}
	write(base + "sidecar.lease.default=500\nsidecar.lease.max=5000\nzookeeper.session.timeout=6000\n")
	next, changes, err := props.Reload(cur, props.LoadOptions{File: file})
	if err != nil {
		t.Fatal(err)
	}
	kept := s.srv.Reload(next, changes)
	if len(kept) != 1 || kept[0].Key != "zookeeper.session.timeout" {
		t.Errorf("restart keys reported: %v, want zookeeper.session.timeout", kept)
	}
	l := s.acquire("o", `{"lease_ms":2000}`)
	s.release(l.LeaseID)
}

// TestEngineOptions: the one mapping from properties to engine options.
func TestEngineOptions(t *testing.T) {
	cfg := props.Defaults()
	cfg.ZKServers = []string{"h1:2181", "h2:2181"}
	cfg.ZKChroot = "/baton"
	cfg.LockRoot = "/locks"
	cfg.ZKSessionTimeout = 7 * time.Second
	cfg.ForegroundPrefix, cfg.BackgroundPrefix = "F", "G"
	cfg.ForegroundTimeout, cfg.BackgroundTimeout = 3*time.Second, 4*time.Second
	cfg.AuthDigest = "u:p"
	cfg.NodeID = "n1"
	for _, c := range []struct {
		node    string
		want    string
		wantErr bool
	}{
		{"container", "container", false},
		{"persistent", "persistent", false},
		{"", "container", false},
		{"ephemeral", "", true},
	} {
		cfg.ObjectNode = c.node
		o, err := sidecar.EngineOptions(cfg, nil)
		if (err != nil) != c.wantErr {
			t.Errorf("EngineOptions(object.node=%q) error = %v, want error %v", c.node, err, c.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if o.ObjectNode.String() != c.want || strings.Join(o.Servers, ",") != "h1:2181,h2:2181" || o.Chroot != "/baton" ||
			o.Root != "/locks" || o.SessionTimeout != 7*time.Second || o.ForegroundPrefix != "F" || o.BackgroundPrefix != "G" ||
			o.ForegroundWait != 3*time.Second || o.BackgroundWait != 4*time.Second || o.AuthDigest != "u:p" || o.NodeID != "n1" {
			t.Errorf("EngineOptions(object.node=%q) = %+v", c.node, o)
		}
	}
	cfg.ObjectNode = "container"
	for _, c := range []struct {
		proto   string
		want    lock.Protocol
		wantErr bool
	}{
		{"", lock.Plugin, false}, {"plugin", lock.Plugin, false}, {"native", lock.Native, false}, {"curator", 0, true},
	} {
		cfg.LockProtocol = c.proto
		o, err := sidecar.EngineOptions(cfg, nil)
		switch {
		case (err != nil) != c.wantErr:
			t.Errorf("EngineOptions(lock.protocol=%q) error = %v, want error %v", c.proto, err, c.wantErr)
		case err != nil && !strings.Contains(err.Error(), "zookeeper.lock.protocol"):
			t.Errorf("EngineOptions(lock.protocol=%q) error = %v, want it to name zookeeper.lock.protocol", c.proto, err)
		case err == nil && o.Protocol != c.want:
			t.Errorf("EngineOptions(lock.protocol=%q).Protocol = %v, want %v", c.proto, o.Protocol, c.want)
		}
	}
	cfg.LockProtocol, cfg.ZKServers = "plugin", nil
	if _, err := sidecar.EngineOptions(cfg, nil); err == nil {
		t.Errorf("EngineOptions without servers: no error")
	}
}

// TestMetrics: /metrics parses with the Prometheus text parser and counts
// what happened.
func TestMetrics(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "sc-a"))
	l1 := s.acquire("m1", "")
	l2 := s.acquire("m2", `{"type":"background","lease_ms":200}`)
	s.mustCall(423, "POST", "/v1/locks/m1/acquire", `{"wait_ms":0}`)
	s.release(l1.LeaseID)
	waitFor(t, 10*time.Second, "the short lease expired", func() bool {
		st, _ := s.call("GET", "/v1/leases/"+l2.LeaseID, "")
		return st == 410
	})
	fams := s.metrics()
	for _, name := range []string{"go_goroutines", "process_open_fds", "baton_lock_waiters", "baton_cleanup_pending", "baton_fastpath_total"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"baton_leases_total", []string{"result=granted"}, 2},
		{"baton_leases_total", []string{"result=released"}, 1},
		{"baton_leases_total", []string{"result=expired"}, 1},
		{"baton_leases_total", []string{"result=lost"}, 0},
		{"baton_lock_acquire_seconds", []string{"type=foreground", "result=granted"}, 1},
		{"baton_lock_acquire_seconds", []string{"type=background", "result=granted"}, 1},
		{"baton_lock_acquire_seconds", []string{"type=foreground", "result=not_granted"}, 1},
		{"baton_locks_held", nil, 0},
		{"baton_leases_active", nil, 0},
		{"baton_zk_session_state", []string{"state=connected"}, 1},
		{"baton_zk_session_state", []string{"state=disconnected"}, 0},
		{"baton_zk_connected", nil, 1},
	} {
		if got := s.metric(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if hit, miss := s.metric("baton_fastpath_total", "result=hit"), s.metric("baton_fastpath_total", "result=miss"); hit < 0 || miss < 0 {
		t.Errorf("fastpath counters: hit %v miss %v", hit, miss)
	}
}

// A lease long-poll that starts after the lease left the state its caller
// last saw (a drain began between two polls) answers at once when the
// caller says that state (state=held), instead of waiting for the next
// change: without state= the poll, begun while draining, would wait out
// its whole timeout_ms (60 s here) and the holder would learn of the drain
// only at its next renewal. A bad state= is a 400 naming it.
func TestLeasePollKnownState(t *testing.T) {
	root := testRoot(t)
	cfg := testConfig(t, root, "sc-a")
	cfg.ShutdownGrace = 30 * time.Second
	a := start(t, cfg)
	l := a.acquire("kp", `{"lease_ms":60000}`)
	for _, q := range []string{"state=held", "wait=lost&state=lost", "wait=lost&state=HELD"} {
		if e := decodeError(t, a.mustCall(400, "GET", "/v1/leases/"+l.LeaseID+"?"+q, "")); e.Field != "state" {
			t.Errorf("?%s: %+v, want a 400 naming state", q, e)
		}
	}
	a.mustCall(202, "POST", "/v1/drain", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, raw := testenv.Call(ctx, a.hc, "GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=60000&state=held", "")
	if st != 200 {
		t.Fatalf("long-poll with state=held during a drain: %d %s (it waited instead of answering the change)", st, raw)
	}
	if v := decodeLease(t, raw); v.State != api.StateDraining {
		t.Errorf("long-poll answered state %q, want %q", v.State, api.StateDraining)
	}
	a.mustCall(200, "DELETE", "/v1/leases/"+l.LeaseID, "")
}
