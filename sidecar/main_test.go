package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// zkServer is the package's shared standalone ZooKeeper.
var zkServer *testenv.ZooKeeper

func TestMain(m *testing.M) {
	os.Exit(testenv.Main("sidecar", &zkServer, m.Run, func() error { return goleak.Find(goleak.IgnoreCurrent()) }))
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

// testRoot is a lock root unique to the test.
func testRoot(t testing.TB) string {
	return "/t/" + nonWord.ReplaceAllString(t.Name(), "_")
}

// shortSocket returns a socket path under a short temp dir (< 108 bytes).
func shortSocket(t testing.TB) string {
	dir, err := os.MkdirTemp("", "bt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// testConfig is a configuration for a test sidecar on the shared ZooKeeper.
func testConfig(t testing.TB, root, node string) props.Config {
	cfg := props.Defaults()
	cfg.ZKServers = zkServer.Servers()
	cfg.LockRoot = root
	cfg.ZKSessionTimeout = 4 * time.Second
	cfg.ZKTickTime = testenv.DefaultTickTime
	cfg.NodeID = node
	cfg.SocketPath = shortSocket(t)
	cfg.ShutdownGrace = 10 * time.Second
	return cfg
}

// proxiedConfig is testConfig with the sidecar's ZooKeeper connection
// through a proxy of its own (faults: black holes, held bytes, resets).
func proxiedConfig(t testing.TB, root, node string) (props.Config, *testenv.Proxy) {
	p := testenv.ProxyT(t, zkServer.Addr(1))
	cfg := testConfig(t, root, node)
	cfg.ZKServers = []string{p.Addr()}
	return cfg, p
}

// sc is a running test sidecar and an HTTP client on its socket.
type sc struct {
	t      testing.TB
	srv    *sidecar.Server
	cfg    props.Config
	hc     *http.Client
	cancel context.CancelFunc
	done   chan error
}

// start runs a sidecar and waits until it is ready; it is shut down when
// the test ends (and Run must then return nil).
func start(t testing.TB, cfg props.Config, opts ...func(*sidecar.Options)) *sc {
	t.Helper()
	s := startNoWait(t, cfg, opts...)
	waitFor(t, 20*time.Second, "sidecar ready", func() bool {
		st, _ := s.call("GET", "/readyz", "")
		return st == 200
	})
	return s
}

func startNoWait(t testing.TB, cfg props.Config, opts ...func(*sidecar.Options)) *sc {
	t.Helper()
	o := sidecar.Options{Logger: testLogger(t).With("sidecar", cfg.NodeID)}
	for _, f := range opts {
		f(&o)
	}
	srv, err := sidecar.New(cfg, o)
	if err != nil {
		t.Fatalf("sidecar.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sc{t: t, srv: srv, cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	s.hc = testenv.UnixHTTP(cfg.SocketPath)
	go func() { s.done <- srv.Run(ctx) }()
	t.Cleanup(s.stop)
	waitFor(t, 10*time.Second, "socket listening", func() bool {
		c, err := net.Dial("unix", cfg.SocketPath)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return s
}

// stop cancels Run's context and checks that Run returns nil.
func (s *sc) stop() {
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Errorf("Run returned %v, want nil", err)
		}
		s.done <- err
	case <-time.After(60 * time.Second):
		s.t.Errorf("Run did not return within 60s of the cancel")
	}
	s.hc.CloseIdleConnections()
}

// call sends a request through the socket and returns the status and body.
func (s *sc) call(method, path, body string) (int, []byte) {
	return testenv.Call(context.Background(), s.hc, method, path, body)
}

// mustCall is call with a wanted status.
func (s *sc) mustCall(want int, method, path, body string) []byte {
	s.t.Helper()
	st, b := s.call(method, path, body)
	if st != want {
		s.t.Fatalf("%s %s %s = %d %s, want %d", method, path, body, st, b, want)
	}
	return b
}

// acquire takes obj and returns the lease.
func (s *sc) acquire(obj, body string) api.Lease {
	s.t.Helper()
	return decodeLease(s.t, s.mustCall(200, "POST", "/v1/locks/"+obj+"/acquire", body))
}

func (s *sc) release(id string) {
	s.t.Helper()
	s.mustCall(200, "DELETE", "/v1/leases/"+id, "")
}

func decodeLease(t testing.TB, b []byte) api.Lease {
	t.Helper()
	var l api.Lease
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil || l.LeaseID == "" {
		t.Fatalf("not a lease: %s (%v)", b, err)
	}
	return l
}

func decodeError(t testing.TB, b []byte) api.Error {
	t.Helper()
	var e api.Error
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Kind == "" || e.Message == "" {
		t.Fatalf("not an error body: %s (%v)", b, err)
	}
	return e
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, within, what, cond)
}

// rawConn is a plain go-zookeeper client for the test's own reads and faults.
func rawConn(t testing.TB) *zk.Conn { return testenv.Client(t, zkServer.Servers()) }

// nodesUnder lists every object's children under root ("obj: [kids]").
func nodesUnder(t testing.TB, conn *zk.Conn, root string) []string {
	t.Helper()
	objs, _, err := conn.Children(root)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("list %s: %v", root, err)
	}
	var out []string
	for _, o := range objs {
		kids, _, err := conn.Children(root + "/" + o)
		if err == nil && len(kids) > 0 {
			out = append(out, fmt.Sprintf("%s: %v", o, kids))
		}
	}
	return out
}

// assertNoLeftovers waits (bounded) until no object under root has children.
func assertNoLeftovers(t testing.TB, conn *zk.Conn, root string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := nodesUnder(t, conn, root)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("nodes left under %s: %s", root, strings.Join(left, "; "))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric returns the value of the sample of name whose labels include
// the given "k=v" pairs (counter, gauge, or histogram sample count), parsed
// from /metrics with the Prometheus text parser; -1 if absent.
func (s *sc) metric(name string, labels ...string) float64 {
	s.t.Helper()
	fams := s.metrics()
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

func (s *sc) metrics() map[string]*dto.MetricFamily {
	s.t.Helper()
	b := s.mustCall(200, "GET", "/metrics", "")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		s.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}
