package sidecar_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/testenv"
)

var (
	leaseIDRE = regexp.MustCompile(`^[0-9a-f]{16}\.[0-9a-f]{32}$`)
	timeRE    = regexp.MustCompile(`^"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"$`)
	tokenRE   = regexp.MustCompile(`"token":"\d+"`)
)

// TestEndpoints walks every endpoint and success status of the API (ops:
// only 503 OpsDisabled) through the socket.
func TestEndpoints(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	t.Run("healthz", func(t *testing.T) {
		var h api.Health
		if err := json.Unmarshal(s.mustCall(200, "GET", "/healthz", ""), &h); err != nil {
			t.Fatal(err)
		}
		if h.Status != "serving" || !h.Ready || h.Sidecar != "sc-a" || !h.ZooKeeper.Connected || h.Incarnation != s.srv.Incarnation() {
			t.Errorf("healthz = %+v", h)
		}
	})
	t.Run("readyz", func(t *testing.T) { s.mustCall(200, "GET", "/readyz", "") })
	t.Run("metrics", func(t *testing.T) {
		if b := s.mustCall(200, "GET", "/metrics", ""); !strings.Contains(string(b), "baton_leases_total") {
			t.Errorf("metrics lack baton_leases_total")
		}
	})

	var l api.Lease
	t.Run("acquire", func(t *testing.T) {
		before := time.Now()
		b := s.mustCall(200, "POST", "/v1/locks/obj1/acquire", `{"info":"job 7","lease_ms":20000}`)
		l = decodeLease(t, b)
		if !leaseIDRE.MatchString(l.LeaseID) || !strings.HasPrefix(l.LeaseID, s.srv.Incarnation()+".") {
			t.Errorf("lease_id %q: want <incarnation>.<32 hex>", l.LeaseID)
		}
		if !tokenRE.Match(b) || l.Token <= 0 {
			t.Errorf("token not a JSON string of a positive int64: %s", b)
		}
		if !regexp.MustCompile(`^A-\d{10}$`).MatchString(l.Node) {
			t.Errorf("node = %q, want A-<10 digits>", l.Node)
		}
		if l.Object != "obj1" || l.Type != "foreground" || l.Info != "job 7" || l.State != "held" {
			t.Errorf("lease = %+v", l)
		}
		if l.ValidForMS <= 0 || l.ValidForMS > 4000 {
			t.Errorf("valid_for_ms = %d, want within the 4 s session timeout", l.ValidForMS)
		}
		if got := l.LeaseExpiresAt.Sub(before); got < 19*time.Second || got > 21*time.Second {
			t.Errorf("lease_expires_at is %v after the request, want ~20s", got)
		}
		if l.ValidUntil.After(l.LeaseExpiresAt.Time) {
			t.Errorf("valid_until %v after lease_expires_at %v", l.ValidUntil, l.LeaseExpiresAt)
		}
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(b, &raw)
		for _, k := range []string{"acquired_at", "lease_expires_at", "valid_until"} {
			if !timeRE.Match(raw[k]) {
				t.Errorf("%s = %s, want RFC 3339 UTC with milliseconds", k, raw[k])
			}
		}
		for _, k := range []string{"lease_id", "object", "type", "info", "token", "node", "acquired_at", "lease_expires_at", "valid_until", "valid_for_ms", "state", "waited_ms"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("lease body lacks %q: %s", k, b)
			}
		}
	})

	t.Run("acquire 423", func(t *testing.T) {
		b := s.mustCall(423, "POST", "/v1/locks/obj1/acquire", `{"wait_ms":0}`)
		e := decodeError(t, b)
		if e.Kind != api.InstanceLockException || e.Object != "obj1" || e.Type != "foreground" || e.WaitedMS == nil || e.Position == nil || *e.Position != 1 {
			t.Errorf("423 = %s", b)
		}
		if e.Holder == nil || e.Holder.Node != l.Node || e.Holder.Token != l.Token || e.Holder.Sidecar != "sc-a" || e.Holder.Info != "job 7" {
			t.Errorf("423 holder = %+v, want node %s token %d", e.Holder, l.Node, l.Token)
		}
		b = s.mustCall(423, "POST", "/v1/locks/obj1/acquire", `{"wait_ms":150,"type":"background"}`)
		if e := decodeError(t, b); e.Type != "background" || *e.WaitedMS < 150 {
			t.Errorf("423 after a wait = %s", b)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		var st api.LockStatus
		b := s.mustCall(200, "GET", "/v1/locks/obj1", "")
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		if st.Object != "obj1" || st.Holder == nil || st.Holder.Token != l.Token || st.Holder.Node != l.Node ||
			st.Holder.Type != "foreground" || st.Holder.Sidecar != "sc-a" || st.Holder.Mode != api.ModeExclusive || len(st.Holders) != 1 ||
			st.Holders[0] != *st.Holder || st.Waiters == nil || len(st.Waiters) != 0 {
			t.Errorf("inspect = %s", b)
		}
		b = s.mustCall(200, "GET", "/v1/locks/free-object", "")
		if string(b) != "{\"object\":\"free-object\",\"holder\":null,\"holders\":[],\"waiters\":[]}\n" {
			t.Errorf("inspect of a free object = %s", b)
		}
	})

	t.Run("renew", func(t *testing.T) {
		b := s.mustCall(200, "POST", "/v1/leases/"+l.LeaseID+"/renew", `{"lease_ms":60000}`)
		r := decodeLease(t, b)
		if d := r.LeaseExpiresAt.Sub(l.LeaseExpiresAt.Time); d < 35*time.Second {
			t.Errorf("renew moved lease_expires_at by %v, want ~40s", d)
		}
		if r.Token != l.Token || r.State != "held" || r.ValidForMS <= 0 {
			t.Errorf("renewed lease = %+v", r)
		}
		s.mustCall(200, "POST", "/v1/leases/"+l.LeaseID+"/renew", "") // empty body = {}
	})

	t.Run("get lease", func(t *testing.T) {
		r := decodeLease(t, s.mustCall(200, "GET", "/v1/leases/"+l.LeaseID, ""))
		if r.LeaseID != l.LeaseID || r.State != "held" {
			t.Errorf("GET lease = %+v", r)
		}
		t0 := time.Now()
		r = decodeLease(t, s.mustCall(200, "GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=200", ""))
		if d := time.Since(t0); d < 200*time.Millisecond || r.State != "held" {
			t.Errorf("long-poll returned after %v with state %s, want ≥ 200ms and held", d, r.State)
		}
	})

	t.Run("list", func(t *testing.T) {
		l2 := s.acquire("obj2", "")
		l3 := s.acquire("obj3", "")
		defer s.release(l2.LeaseID)
		defer s.release(l3.LeaseID)
		var ls api.LockList
		b := s.mustCall(200, "GET", "/v1/locks?prefix=obj&limit=2", "")
		if err := json.Unmarshal(b, &ls); err != nil {
			t.Fatal(err)
		}
		if len(ls.Locks) != 2 || ls.Locks[0].Object != "obj1" || ls.Locks[1].Object != "obj2" || ls.Next != "obj2" ||
			ls.Locks[0].Holder == nil || ls.Locks[0].Holder.Token != l.Token {
			t.Fatalf("page 1 = %s", b)
		}
		b = s.mustCall(200, "GET", "/v1/locks?prefix=obj&limit=2&after=obj2", "")
		ls = api.LockList{}
		if err := json.Unmarshal(b, &ls); err != nil {
			t.Fatal(err)
		}
		if len(ls.Locks) != 1 || ls.Locks[0].Object != "obj3" || ls.Next != "" {
			t.Errorf("page 2 = %s", b)
		}
	})

	t.Run("release", func(t *testing.T) {
		b := s.mustCall(200, "DELETE", "/v1/leases/"+l.LeaseID, "")
		var rr api.ReleaseResponse
		if err := json.Unmarshal(b, &rr); err != nil || !rr.Released || rr.Object != "obj1" || rr.Token != l.Token || !tokenRE.Match(b) {
			t.Errorf("release = %s", b)
		}
		for _, c := range []struct{ method, path string }{
			{"DELETE", "/v1/leases/" + l.LeaseID},
			{"GET", "/v1/leases/" + l.LeaseID},
			{"POST", "/v1/leases/" + l.LeaseID + "/renew"},
		} {
			if e := decodeError(t, s.mustCall(404, c.method, c.path, "")); e.Kind != api.NoNode {
				t.Errorf("%s %s after release: %s, want NoNode", c.method, c.path, e.Kind)
			}
		}
	})

	t.Run("earlier incarnation", func(t *testing.T) {
		old := "00000000000a0000.0123456789abcdef0123456789abcdef"
		for _, m := range []string{"GET", "DELETE"} {
			e := decodeError(t, s.mustCall(410, m, "/v1/leases/"+old, ""))
			if e.Kind != api.LockLost || e.Reason != api.ReasonSidecarRestarted {
				t.Errorf("%s lease of an earlier incarnation = %+v", m, e)
			}
		}
	})

	t.Run("odd object names", func(t *testing.T) {
		for _, c := range []struct{ path, obj string }{
			{"a%2Fb", "a/b"}, {"%2E%2E", ".."}, {"zookeeper", "zookeeper"}, {"%C3%BC%20x", "ü x"}, {"acquire", "acquire"},
		} {
			r := s.acquire(c.path, `{"type":"background"}`)
			if r.Object != c.obj || r.Type != "background" {
				t.Errorf("acquire %s: object %q type %s, want %q", c.path, r.Object, r.Type, c.obj)
			}
			var st api.LockStatus
			_ = json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/"+c.path, ""), &st)
			if st.Object != c.obj || st.Holder == nil || st.Holder.Token != r.Token {
				t.Errorf("inspect %s = %+v", c.path, st)
			}
			s.release(r.LeaseID)
		}
	})

	t.Run("ops disabled", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"POST", "/v1/ops"}, {"GET", "/v1/ops/x1"}, {"POST", "/v1/ops/x1/replay"}, {"POST", "/v1/ops/x1/discard"},
		} {
			if e := decodeError(t, s.mustCall(503, c.method, c.path, `{}`)); e.Kind != api.OpsDisabled {
				t.Errorf("%s %s = %s, want OpsDisabled", c.method, c.path, e.Kind)
			}
		}
	})

	t.Run("not found and method not allowed", func(t *testing.T) {
		if e := decodeError(t, s.mustCall(404, "GET", "/v2/locks", "")); e.Kind != api.NotFound {
			t.Errorf("unknown path: %s", e.Kind)
		}
		req, _ := http.NewRequest("PUT", "http://sidecar/v1/leases/x", nil)
		resp, err := s.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "DELETE, GET" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("PUT lease: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})
}

// TestLongPollWakesOnRelease: a long-poll returns (state released) as soon
// as the holder releases.
func TestLongPollWakesOnRelease(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "sc-a"))
	l := s.acquire("o", "")
	got := make(chan api.Lease, 1)
	go func() {
		st, b := s.call("GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=20000", "")
		var r api.Lease
		if st != 200 || json.Unmarshal(b, &r) != nil {
			t.Errorf("long-poll = %d %s", st, b)
		}
		got <- r
	}()
	waitFor(t, 10*time.Second, "the poll in progress", func() bool { return s.metric("baton_lease_polls_in_flight") == 1 })
	t0 := time.Now()
	s.release(l.LeaseID)
	r := <-got
	if r.State != api.StateReleased || time.Since(t0) > 10*time.Second { // at the release, not at the poll's 20 s timeout
		t.Errorf("long-poll after release: state %s after %v", r.State, time.Since(t0))
	}
}

// TestUnavailable: without ZooKeeper, acquires, inspection and lists answer
// 503 ZooKeeperUnavailable and /readyz 503 with a reason.
func TestUnavailable(t *testing.T) {
	ports, err := testenv.ReservePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ports[0].Release()
	cfg := testConfig(t, testRoot(t), "sc-x")
	cfg.ZKServers = []string{ports[0].Addr()} // nothing listens there
	cfg.ZKConnectionRetry, cfg.ZKConnectionDelay = 1, 100*time.Millisecond
	s := startNoWait(t, cfg)

	var wg sync.WaitGroup
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/locks/o/acquire", `{"wait_ms":300}`},
		{"POST", "/v1/locks/o/acquire", `{"wait_ms":0}`},
		{"GET", "/v1/locks/o", ""},
		{"GET", "/v1/locks", ""},
	} {
		wg.Go(func() {
			st, b := s.call(c.method, c.path, c.body)
			if st != 503 || decodeError(t, b).Kind != api.ZooKeeperUnavailable {
				t.Errorf("%s %s without zookeeper = %d %s, want 503 ZooKeeperUnavailable", c.method, c.path, st, b)
			}
		})
	}
	wg.Wait()
	st, b := s.call("GET", "/readyz", "")
	var h api.Health
	_ = json.Unmarshal(b, &h)
	if st != 503 || h.Ready || h.Error != api.ZooKeeperUnavailable || !strings.Contains(h.Reason, "unreachable") {
		t.Errorf("readyz = %d %s", st, b)
	}
	if st, _ := s.call("GET", "/healthz", ""); st != 200 {
		t.Errorf("healthz = %d, want 200 (serving)", st)
	}
}

// TestTooManyWaiters: beyond sidecar.max.waiters acquires answer 503; a
// reload raising the limit applies at once.
func TestTooManyWaiters(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "sc-a")
	cfg.MaxWaiters = 1
	s := start(t, cfg)
	l := s.acquire("o", "")
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan int, 1)
	go func() {
		st, _ := testenv.Call(ctx, s.hc, "POST", "/v1/locks/o/acquire", `{"wait_ms":30000}`)
		waiting <- st
	}()
	waitFor(t, 10*time.Second, "one waiter", func() bool {
		var st api.LockStatus
		_ = json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/o", ""), &st)
		return len(st.Waiters) == 1
	})
	e := decodeError(t, s.mustCall(503, "POST", "/v1/locks/p/acquire", ""))
	if e.Kind != api.TooManyWaiters {
		t.Errorf("second acquire = %s, want TooManyWaiters", e.Kind)
	}
	cancel()
	<-waiting
	s.release(l.LeaseID)
}
