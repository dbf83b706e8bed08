package sidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
	"github.com/batonhq/baton/queue"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// fakeMount is a Mount with one endpoint, GET /v1/ops/{id}.
type fakeMount struct {
	routes  []httpapi.Route
	ready   atomic.Pointer[error]
	drained chan time.Time // the drain's deadline
}

func (f *fakeMount) Routes() []httpapi.Route { return f.routes }
func (f *fakeMount) Ready() error {
	if p := f.ready.Load(); p != nil {
		return *p
	}
	return nil
}
func (f *fakeMount) Drain(ctx context.Context) {
	dl, _ := ctx.Deadline()
	f.drained <- dl
}
func (f *fakeMount) QueueInfo() *api.QueueInfo { return &api.QueueInfo{Queued: 7} }

// TestMount: /v1/ops is routed once, by the sidecar's table: a mount's
// route must be one of the table's mounted endpoints; its handler gets the
// path value (an id with %2F whole) and the caller, and its errors are
// answered by the sidecar's one error writer (the queue's refusals mapped,
// any other error a 503 QueueUnavailable); an endpoint the mount does not
// serve answers 503 OpsDisabled; its readiness is part of /readyz, its
// queue of /healthz, and its drain runs at shutdown with the grace's end.
func TestMount(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "sc-mount")
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	get := func(w http.ResponseWriter, r *http.Request) error {
		switch id := r.PathValue("id"); id {
		case "gone":
			return queue.ErrNotFound
		case "broken":
			return errors.New("disk on fire")
		default:
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(id + " " + httpapi.Caller(r.Context())))
			return nil
		}
	}
	for _, bad := range []httpapi.Route{{Method: "PUT", Pattern: "/v1/ops"}, {Method: "GET", Pattern: "/v1/ops/{id}/x"}} {
		if err := srv.Mount(&fakeMount{routes: []httpapi.Route{bad}}); err == nil || !strings.Contains(err.Error(), "not a mounted endpoint") {
			t.Errorf("Mount(%s %s) = %v, want refused", bad.Method, bad.Pattern, err)
		}
	}
	m := &fakeMount{routes: []httpapi.Route{{Method: "GET", Pattern: "/v1/ops/{id}", Handle: get}}, drained: make(chan time.Time, 1)}
	if err := srv.Mount(m); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	if err := srv.Mount(m); err == nil {
		t.Error("a second Mount succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	hc := testenv.UnixHTTP(cfg.SocketPath)
	defer hc.CloseIdleConnections()
	s := &sc{t: t, srv: srv, cfg: cfg, hc: hc}
	waitFor(t, 20*time.Second, "sidecar ready", func() bool { st, _ := s.call("GET", "/readyz", ""); return st == 200 })

	if b := string(s.mustCall(200, "GET", "/v1/ops/a%2Fb", "")); !strings.HasPrefix(b, "a/b uid=") {
		t.Errorf("GET /v1/ops/a%%2Fb = %q, want the id a/b and the caller", b)
	}
	for _, c := range []struct {
		method, path string
		status       int
		kind         string
	}{
		{"GET", "/v1/ops/gone", 404, api.NotFound},
		{"GET", "/v1/ops/broken", 503, api.QueueUnavailable},
		{"POST", "/v1/ops", 503, api.OpsDisabled},
		{"POST", "/v1/ops/x/replay", 503, api.OpsDisabled},
		{"DELETE", "/v1/ops/x", 405, api.MethodNotAllowed},
	} {
		if e := decodeError(t, s.mustCall(c.status, c.method, c.path, "")); e.Kind != c.kind {
			t.Errorf("%s %s = %s, want %s", c.method, c.path, e.Kind, c.kind)
		}
	}
	var h api.Health
	if err := json.Unmarshal(s.mustCall(200, "GET", "/healthz", ""), &h); err != nil {
		t.Fatal(err)
	}
	if h.Queue == nil || h.Queue.Queued != 7 {
		t.Errorf("/healthz queue = %+v, want the mount's", h.Queue)
	}
	notReady := errors.New("queue.dir not open")
	m.ready.Store(&notReady)
	var nr api.Health
	if err := json.Unmarshal(s.mustCall(503, "GET", "/readyz", ""), &nr); err != nil {
		t.Fatal(err)
	}
	if nr.Error != api.QueueUnavailable || nr.Reason != "queue: queue.dir not open" {
		t.Errorf("/readyz with the mount not ready: %s %q", nr.Error, nr.Reason)
	}

	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	select {
	case dl := <-m.drained:
		if dl.Before(start) || dl.After(time.Now().Add(cfg.ShutdownGrace)) {
			t.Errorf("drain deadline %v, want the grace's end (%v after %v)", dl, cfg.ShutdownGrace, start)
		}
	default:
		t.Error("the mount was not drained at shutdown")
	}
}
