package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// zkServer is the package's shared standalone ZooKeeper.
var zkServer *testenv.ZooKeeper

func TestMain(m *testing.M) {
	if os.Getenv(envSoakChild) != "" {
		os.Exit(soakChild()) // a sidecar process of TestSoak
	}
	os.Exit(testenv.Main("ops", &zkServer, m.Run, func() error { return goleak.Find(goleak.IgnoreCurrent()) }))
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

// shortDir is a temp dir with a short path (socket paths stay < 108 bytes).
func shortDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "bo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// env is a sidecar with the dispatcher wired as `baton serve` wires it,
// a test app, and (optionally) an in-process Kafka behind a fault proxy.
type env struct {
	t     testing.TB
	cfg   props.Config
	srv   *sidecar.Server
	d     *ops.Dispatcher
	app   *opstest.App
	kafka *testenv.Kafka
	hc    *http.Client

	cancel  context.CancelFunc
	srvDone chan error
	runDone chan error
	stopped bool

	mu     sync.Mutex
	events []ops.Event
	evCh   chan struct{}
}

type envOptions struct {
	app      opstest.Options
	noKafka  bool                // kafka.brokers points at a closed port
	noApp    bool                // sidecar.app.url empty: ops disabled
	zk       []string            // zookeeper.servers; default the shared server
	config   func(*props.Config) // last word on the configuration
	deps     func(*ops.Deps)
	noWait   bool // do not wait for /readyz
	queueDir string
	hold     bool      // wire Deps.Hold to the sidecar's HoldDelivery, as baton serve does
	logs     io.Writer // also receives the sidecar's and dispatcher's logs at info and above
}

func testConfig(t testing.TB) props.Config {
	cfg := props.Defaults()
	cfg.ZKServers = zkServer.Servers()
	cfg.LockRoot = "/t/" + nonWord.ReplaceAllString(t.Name(), "_")
	cfg.ZKSessionTimeout = 4 * time.Second
	cfg.NodeID = "node-1"
	cfg.SocketPath = filepath.Join(shortDir(t), "s.sock")
	cfg.ShutdownGrace = 5 * time.Second
	cfg.AppTimeout = 5 * time.Second
	cfg.QueueDir = t.TempDir()
	cfg.QueueWorkers = 4
	cfg.BackgroundTimeout = 2 * time.Second
	cfg.RetryInitial = 50 * time.Millisecond
	cfg.RetryMax = 5 * time.Second
	cfg.RetryMultiplier = 2
	cfg.RetryRandomization = 0
	cfg.RetryCount = 3
	return cfg
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	e := &env{t: t, evCh: make(chan struct{}, 1)}
	cfg := testConfig(t)
	if o.zk != nil {
		cfg.ZKServers = o.zk
	}
	if o.queueDir != "" {
		cfg.QueueDir = o.queueDir
	}
	if !o.noApp {
		e.app = opstest.StartT(t, o.app)
		cfg.AppURL = e.app.URL()
	}
	if o.noKafka {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.KafkaBrokers = []string{l.Addr().String()}
		l.Close()
	} else {
		e.kafka = testenv.KafkaT(t, testenv.KafkaOptions{Proxy: true})
		cfg.KafkaBrokers = []string{e.kafka.Addr()}
	}
	if o.config != nil {
		o.config(&cfg)
	}
	e.cfg = cfg
	log := testLogger(t)
	if o.logs != nil {
		log = slog.New(slog.NewTextHandler(o.logs, nil))
	}

	// Wired as `baton serve` does (see the package doc).
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: log, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("sidecar.New: %v", err)
	}
	deps := ops.Deps{Engine: srv.Engine(), Registry: srv.Registry(), Logger: log, PublishTimeout: 2 * time.Second}
	if o.hold {
		deps.Hold = srv.HoldDelivery
	}
	if o.deps != nil {
		o.deps(&deps)
	}
	d, err := ops.New(cfg, deps)
	if err != nil {
		srv.Close()
		t.Fatalf("ops.New: %v", err)
	}
	ops.SetHook(d, func(ev ops.Event) {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
		select {
		case e.evCh <- struct{}{}:
		default:
		}
	})
	if err := srv.Mount(d); err != nil {
		srv.Close()
		t.Fatalf("Mount: %v", err)
	}
	e.srv, e.d = srv, d

	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.srvDone, e.runDone = make(chan error, 1), make(chan error, 1)
	go func() { e.runDone <- d.Run(ctx) }()
	go func() { e.srvDone <- srv.Run(ctx) }()
	e.hc = testenv.UnixHTTP(cfg.SocketPath)
	t.Cleanup(e.stop)
	if !o.noWait {
		waitFor(t, 20*time.Second, "sidecar ready", func() bool {
			st, _ := e.call("GET", "/readyz", "")
			return st == 200
		})
	}
	return e
}

// stop shuts down like SIGTERM: cancel, then Run of both return, then Close.
func (e *env) stop() {
	if e.stopped {
		return
	}
	e.stopped = true
	e.cancel()
	for name, ch := range map[string]chan error{"sidecar": e.srvDone, "dispatcher": e.runDone} {
		select {
		case err := <-ch:
			if err != nil {
				e.t.Errorf("%s Run = %v, want nil", name, err)
			}
		case <-time.After(60 * time.Second):
			e.t.Errorf("%s Run did not return within 60s", name)
		}
	}
	if err := e.d.Close(); err != nil {
		e.t.Errorf("Dispatcher.Close = %v", err)
	}
	e.hc.CloseIdleConnections()
}

func (e *env) call(method, path, body string) (int, []byte) {
	return testenv.Call(context.Background(), e.hc, method, path, body)
}

func (e *env) mustCall(want int, method, path, body string) []byte {
	e.t.Helper()
	st, b := e.call(method, path, body)
	if st != want {
		e.t.Fatalf("%s %s %.200s = %d %s, want %d", method, path, body, st, b, want)
	}
	return b
}

// submit posts an op and wants 202 {"id","state":"queued"}.
func (e *env) submit(body string) string {
	e.t.Helper()
	var ack api.OpAck
	decodeStrict(e.t, e.mustCall(202, "POST", "/v1/ops", body), &ack)
	if ack.State != api.OpQueued || ack.ID == "" {
		e.t.Fatalf("submit %s = %+v, want a queued op", body, ack)
	}
	return ack.ID
}

func (e *env) op(id string) api.Op {
	e.t.Helper()
	var op api.Op
	decodeStrict(e.t, e.mustCall(200, "GET", "/v1/ops/"+id, ""), &op)
	return op
}

// waitState waits until op id is in state.
func (e *env) waitState(id, state string, within time.Duration) api.Op {
	e.t.Helper()
	var last api.Op
	waitFor(e.t, within, "op "+id+" "+state, func() bool {
		last = e.op(id)
		return last.State == state
	})
	return last
}

// eventsOf returns the attempts of op id so far. An attempt's event is
// emitted just after its outcome is recorded: after waiting for a state,
// use waitEvents.
func (e *env) eventsOf(id string) []ops.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ops.Event
	for _, ev := range e.events {
		if ev.ID == id {
			out = append(out, ev)
		}
	}
	return out
}

// otherEngine is a second lock engine on the same tree (another sidecar).
func otherEngine(t testing.TB, cfg props.Config) *lock.Engine {
	t.Helper()
	opts, err := sidecar.EngineOptions(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	opts.Servers = zkServer.Servers()
	opts.NodeID = "other"
	eng, err := lock.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

func decodeStrict(t testing.TB, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s into %T: %v", b, v, err)
	}
}

// waitFor polls cond until it holds or within passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, within, what, cond)
}

// metric returns the value of the metric name with the given labels from
// the sidecar's registry (counter, gauge, or a histogram's count).
func (e *env) metric(name string, labels map[string]string) float64 {
	e.t.Helper()
	mfs, err := e.srv.Registry().Gather()
	if err != nil {
		e.t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	e.t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// testenvProxy is a fault proxy before the shared ZooKeeper.
func testenvProxy(t testing.TB) *testenv.Proxy { return testenv.ProxyT(t, zkServer.Addr(1)) }

// waitEvents waits until op id has at least n attempt events and returns them.
func (e *env) waitEvents(id string, n int) []ops.Event {
	e.t.Helper()
	waitFor(e.t, 10*time.Second, fmt.Sprintf("%d attempt events of %s", n, id), func() bool { return len(e.eventsOf(id)) >= n })
	return e.eventsOf(id)
}
