// Command baton-bench runs the workloads of the peers harness
// (../shared/peers: W1 uncontended, W2 contention, W3 many objects, W4
// handoff, W5 herd) against Baton, so that Baton can be compared with
// Curator, kazoo and go-zookeeper's lock on the same ZooKeeper in one run.
//
//	baton-bench WORKLOAD --zk HOST:PORT --root /bench/RUNID [--clients N] [--ops M]
//	            [--objects K] [--waiters W] [--warmup U] [--impl IMPL] [--baton PATH]
//	baton-bench probe   [--zk HOST:PORT] [--waiters 1000] [--objects 1000] [--baton PATH]
//	baton-bench reqcost [--zk HOST:PORT] [--n 5000] [--baton PATH]
//	baton-bench cost    [--zk HOST:PORT] [--cycles 2000] [--env KEY=VALUE] [--baton PATH]
//	baton-bench wire    --zk-port P -- COMMAND [ARGS...]
//	baton-bench w3floor --gozk LOCKBENCH [--zk HOST:PORT] [--rounds 3] [--baton PATH]
//
// Implementations (--impl):
//
//   - baton (default): every client is an application connection to its
//     own sidecar (an in-process sidecar.Server with its own ZooKeeper
//     session and unix socket), through the Go client.
//   - baton-engine: the lock engine directly, one engine (session) per client.
//   - baton-http: Baton as deployed: one `baton serve` process per client,
//     driven by Go's stock net/http client over the unix socket.
//   - baton-client: one `baton serve` process per client, driven by Baton's
//     Go client (package client).
//   - baton-shared: one `baton serve` process (one ZooKeeper session) for all
//     clients, each client a Go client of its own (many threads on one node).
//   - gozk-http, gozk-shared: the control. The peer's lock (go-zookeeper's
//     zk.NewLock) deployed as Baton is: a `baton-bench peer-sidecar` process
//     per client (or one for all), a plain net/http server on a unix
//     socket, driven by the stock net/http client (peersidecar.go).
//
// The clients always live in this process, so the overlap detector sees
// every holder; only the sidecars of the process impls are processes. The
// processes get zookeeper.session.timeout=15000, zookeeper.tick.time = the
// server's tickTime (conf four-letter word, else $ZK_TICK, else 2000) and no
// sidecar.app.url. It prints one JSON line.
//
// probe is the 10,000-waiter probe, reqcost the per-request sidecar
// latency against a raw echo server and cost the sidecar's CPU and context
// switches per W1 cycle and per request against the same echo (see
// probe.go, reqcost.go, cost.go); without --zk they start their own
// ZooKeeper (testenv, Debian's zookeeper). wire counts the ZooKeeper
// requests a command's sessions send, per opcode (wirecount.go).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
)

const sessionTimeout = 15 * time.Second

type config struct {
	impl, workload, zkAddr, root, baton    string
	clients, ops, objects, waiters, warmup int
	protocol                               string // zookeeper.lock.protocol: plugin or native ("": plugin)
	settle                                 time.Duration
	releaseWait                            bool // false: the process impls release with DELETE ?wait=false (SPEC §5's mode)
	explain                                bool // W5: capture the wire and say what the window's requests were (w5Explain)
}

// proto is the lock protocol, plugin unless given.
func (c config) proto() string {
	if c.protocol == "" {
		return "plugin"
	}
	return c.protocol
}

type result struct {
	Impl       string  `json:"impl"`
	Workload   string  `json:"workload"`
	Clients    int     `json:"clients"`
	Ops        int     `json:"ops"`
	Objects    int     `json:"objects,omitempty"`
	Waiters    int     `json:"waiters,omitempty"`
	Warmup     int     `json:"warmup"`
	ElapsedS   float64 `json:"elapsed_s"`
	OpsPerS    float64 `json:"ops_per_s"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	MaxUs      float64 `json:"max_us"`
	Overlaps   int64   `json:"overlaps"`
	Errors     int64   `json:"errors"`
	Handoffs   int     `json:"handoffs,omitempty"`
	TotalMs    float64 `json:"total_ms,omitempty"`
	PktsWindow int64   `json:"pkts_window,omitempty"`
	// W5 --explain: the window's requests by opcode, as captured, and how
	// many waiters were still queueing (sent a create, a listing or the
	// watch's exists) after the gate's release.
	WindowOps   map[string]int `json:"window_ops,omitempty"`
	LateWaiters *int           `json:"late_waiters,omitempty"`
	Error       string         `json:"error,omitempty"`
}

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: baton-bench W1|W2|W3|W4|W5 --zk HOST:PORT --root PATH [flags]; baton-bench probe|reqcost|cost|ab|floor|w3floor|wire|cpu [flags]")
		os.Exit(64)
	}
	switch os.Args[1] {
	case "probe":
		os.Exit(probeMain(os.Args[2:]))
	case "reqcost":
		os.Exit(reqcostMain(os.Args[2:]))
	case "cost":
		os.Exit(costMain(os.Args[2:]))
	case "floor":
		os.Exit(floorMain(os.Args[2:]))
	case "echo-server":
		os.Exit(echoServerMain(os.Args[2:]))
	case "wire":
		os.Exit(wireMain(os.Args[2:]))
	case "cpu":
		os.Exit(cpuMain(os.Args[2:]))
	case "peer-sidecar":
		os.Exit(peerSidecarMain(os.Args[2:]))
	case "zk-cycles":
		os.Exit(zkCyclesMain(os.Args[2:]))
	case "ab":
		os.Exit(abMain(os.Args[2:]))
	case "w3floor":
		os.Exit(w3floorMain(os.Args[2:]))
	}
	cfg := config{workload: os.Args[1]}
	fs := flag.NewFlagSet("baton-bench", flag.ExitOnError)
	fs.StringVar(&cfg.impl, "impl", "baton", "baton, baton-engine, baton-http, baton-client or baton-shared (see the package doc)")
	fs.StringVar(&cfg.baton, "baton", "", "the baton executable for the process impls (default $BATON_BIN, ./baton beside this executable, PATH)")
	fs.StringVar(&cfg.zkAddr, "zk", "127.0.0.1:2181", "ZooKeeper address")
	fs.StringVar(&cfg.root, "root", "/bench", "lock root for this run")
	fs.StringVar(&cfg.protocol, "protocol", "plugin", "lock protocol: plugin or native (the impl is reported as <impl>-native)")
	fs.IntVar(&cfg.clients, "clients", 8, "clients for W2/W3")
	fs.IntVar(&cfg.ops, "ops", 2000, "measured operations")
	fs.IntVar(&cfg.objects, "objects", 1000, "objects for W3")
	fs.IntVar(&cfg.waiters, "waiters", 64, "waiters for W5")
	fs.IntVar(&cfg.warmup, "warmup", 0, "unmeasured operations first")
	fs.BoolVar(&cfg.releaseWait, "release-wait", true, "process impls: false releases with DELETE ?wait=false, answered before the release's ZooKeeper write lands (the impl is reported as <impl>-nowait)")
	fs.BoolVar(&cfg.explain, "explain", false, "W5, diagnosis: capture ZooKeeper's packets on lo (needs CAP_NET_RAW) and report the measured window's requests by opcode (window_ops) and the waiters still queueing after the gate's release (late_waiters)")
	fs.DurationVar(&cfg.settle, "settle", 0, "W4, not the harness's contract (diagnosis): the holder waits this long after the other is queued before t0 and its release")
	_ = fs.Parse(os.Args[2:])
	if f := os.Getenv("BATON_BENCH_TRACE"); f != "" { // execution trace for latency work
		out, err := os.Create(f)
		if err == nil && trace.Start(out) == nil {
			defer trace.Stop()
		}
	}
	res, err := run(cfg)
	res.Impl, res.Workload, res.Warmup = cfg.impl, cfg.workload, cfg.warmup
	if cfg.protocol == "native" {
		res.Impl += "-native"
	}
	if !cfg.releaseWait {
		res.Impl += "-nowait"
	}
	if err != nil {
		res.Error = err.Error()
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if err != nil {
		trace.Stop()
		os.Exit(1)
	}
}

// locker is one client's handle on one object.
type locker interface {
	Lock() error
	Unlock() error
}

// session is one client: its own ZooKeeper session (and, for baton, its own
// sidecar and socket).
type session interface {
	locker(object string) locker
	close()
}

type env struct {
	cfg  config
	dir  string
	bin  string // baton executable (process impls)
	tick int    // ZooKeeper tickTime in ms (process impls)
	sharedState
}

// processImpl says whether impl runs `baton serve` processes.
func processImpl(impl string) bool {
	return impl == "baton-http" || impl == "baton-client" || impl == "baton-shared" ||
		impl == "gozk-http" || impl == "gozk-shared"
}

func (e *env) newSessions(n int) ([]session, error) {
	ss := make([]session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ss[i], errs[i] = e.newSession(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range ss {
			if s != nil {
				s.close()
			}
		}
		return nil, err
	}
	return ss, nil
}

var sessionSeq atomic.Int64

func (e *env) newSession(int) (session, error) {
	i := sessionSeq.Add(1)
	if processImpl(e.cfg.impl) {
		return e.newProcSession(i)
	}
	lo := lock.Options{Servers: []string{e.cfg.zkAddr}, Root: e.cfg.root, SessionTimeout: sessionTimeout,
		NodeID: "bench-" + strconv.FormatInt(i, 10), ForegroundWait: time.Minute}
	var err error
	if lo.Protocol, err = lock.ParseProtocol(e.cfg.proto()); err != nil {
		return nil, err
	}
	if e.cfg.impl == "baton-engine" {
		eng, err := lock.New(lo)
		if err != nil {
			return nil, err
		}
		if err := waitConnected(eng); err != nil {
			eng.Close()
			return nil, err
		}
		return &engineSession{eng}, nil
	}
	cfg := props.Defaults()
	cfg.ZKServers, cfg.LockRoot, cfg.ZKSessionTimeout = []string{e.cfg.zkAddr}, e.cfg.root, sessionTimeout
	cfg.NodeID = lo.NodeID
	cfg.LockProtocol = e.cfg.proto()
	cfg.SocketPath = filepath.Join(e.dir, "s"+strconv.FormatInt(i, 10)+".sock")
	cfg.SocketMode = 0o600
	cfg.MaxWaiters = 1 << 20
	cfg.ShutdownGrace = 0
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	s := &sidecarSession{srv: srv, cancel: cancel, done: done, c: client.New(cfg.SocketPath)}
	if err := waitConnected(srv.Engine()); err != nil {
		s.close()
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.c.Ready(context.Background()) != nil {
		if time.Now().After(deadline) {
			s.close()
			return nil, errors.New("sidecar not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s, nil
}

func waitConnected(e *lock.Engine) error {
	deadline := time.Now().Add(20 * time.Second)
	for !e.Health().Connected {
		if time.Now().After(deadline) {
			return errors.New("no zookeeper session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

type engineSession struct{ e *lock.Engine }

func (s *engineSession) locker(obj string) locker { return &engineLocker{e: s.e, obj: obj} }
func (s *engineSession) close()                   { s.e.Close() }

type engineLocker struct {
	e   *lock.Engine
	obj string
	g   *lock.Grant
}

func (l *engineLocker) Lock() (err error) {
	l.g, err = l.e.Acquire(context.Background(), l.obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	return err
}
func (l *engineLocker) Unlock() error { return l.g.Release(context.Background()) }

type sidecarSession struct {
	srv    *sidecar.Server
	cancel context.CancelFunc
	done   chan error
	c      *client.Client
}

func (s *sidecarSession) locker(obj string) locker { return &clientLocker{c: s.c, obj: obj} }
func (s *sidecarSession) close() {
	s.c.Close()
	s.cancel()
	<-s.done
}

type clientLocker struct {
	c      *client.Client
	obj    string
	l      *client.Lease
	noWait bool
}

// Lock acquires through the socket. Renewal is off: the hold is ~0, so the
// lease (sidecar.lease.default) cannot run out; the cycle is acquire+release.
func (l *clientLocker) Lock() (err error) {
	l.l, err = l.c.Acquire(context.Background(), l.obj, client.WithWait(time.Minute), client.WithoutRenewal())
	return err
}
func (l *clientLocker) Unlock() error {
	if l.noWait {
		return l.l.ReleaseNoWait(context.Background())
	}
	return l.l.Release(context.Background())
}

func run(cfg config) (result, error) {
	if cfg.impl != "baton" && cfg.impl != "baton-engine" && !processImpl(cfg.impl) {
		return result{}, fmt.Errorf("unknown --impl %q", cfg.impl)
	}
	if strings.HasPrefix(cfg.impl, "gozk-") && (!cfg.releaseWait || cfg.protocol == "native") {
		return result{}, fmt.Errorf("--impl %s is the peer's lock (the control): --release-wait=false and --protocol native are Baton's", cfg.impl)
	}
	dir, err := os.MkdirTemp("", "bb")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	e := &env{cfg: cfg, dir: dir}
	if processImpl(cfg.impl) {
		if e.bin, err = batonBin(cfg.baton); err != nil {
			return result{}, err
		}
		e.tick = tickTime(cfg.zkAddr)
		defer func() {
			if e.shared != nil {
				e.shared.stop()
			}
		}()
	}
	switch cfg.workload {
	case "W1":
		return e.w1()
	case "W2":
		return e.contention(1)
	case "W3":
		return e.contention(cfg.objects)
	case "W4":
		return e.w4()
	case "W5":
		return e.w5()
	}
	return result{}, fmt.Errorf("unknown workload %q", cfg.workload)
}

func (e *env) w1() (result, error) {
	res := result{Clients: 1, Ops: e.cfg.ops}
	ss, err := e.newSessions(1)
	if err != nil {
		return res, err
	}
	defer ss[0].close()
	l := ss[0].locker("lock")
	var holders atomic.Int64
	cycle := func() (time.Duration, error) {
		t0 := time.Now()
		if err := l.Lock(); err != nil {
			return 0, err
		}
		if holders.Add(1) != 1 {
			res.Overlaps++
		}
		holders.Add(-1)
		if err := l.Unlock(); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	for range e.cfg.warmup {
		if _, err := cycle(); err != nil {
			return res, err
		}
	}
	lat := make([]time.Duration, 0, e.cfg.ops)
	start := time.Now()
	for range e.cfg.ops {
		d, err := cycle()
		if err != nil {
			return res, err
		}
		lat = append(lat, d)
	}
	fill(&res, lat, time.Since(start), e.cfg.ops)
	return res, nil
}

// contention: clients take ops acquisitions in total from a shared ticket
// counter; latency is the acquire call (the wait).
func (e *env) contention(objects int) (result, error) {
	res := result{Clients: e.cfg.clients, Ops: e.cfg.ops}
	if objects > 1 {
		res.Objects = objects
	}
	ss, err := e.newSessions(e.cfg.clients)
	if err != nil {
		return res, err
	}
	defer closeAll(ss)
	holders := make([]atomic.Int64, objects)
	var tickets, overlaps, errs atomic.Int64
	total := int64(e.cfg.warmup + e.cfg.ops)
	lats := make([][]time.Duration, len(ss))
	var firstErr atomic.Value
	var measureStart atomic.Int64
	base := time.Now()
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			locks := map[int]locker{}
			for {
				t := tickets.Add(1)
				if t > total {
					return
				}
				if t == int64(e.cfg.warmup)+1 {
					measureStart.Store(int64(time.Since(base)))
				}
				obj, name := 0, "lock"
				if objects > 1 {
					obj = rand.IntN(objects)
					name = "obj/" + strconv.Itoa(obj)
				}
				l, ok := locks[obj]
				if !ok {
					l = s.locker(name)
					locks[obj] = l
				}
				t0 := time.Now()
				if err := l.Lock(); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				if t > int64(e.cfg.warmup) {
					lats[i] = append(lats[i], time.Since(t0))
				}
				if holders[obj].Add(1) != 1 {
					overlaps.Add(1)
				}
				holders[obj].Add(-1)
				if err := l.Unlock(); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(base) - time.Duration(measureStart.Load())
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	fill(&res, all, elapsed, len(all))
	res.Overlaps, res.Errors = overlaps.Load(), errs.Load()
	if v := firstErr.Load(); v != nil {
		return res, errors.New(v.(string))
	}
	return res, nil
}

// holderNodes is how many children the holder has under the object: its
// node and privateLock (Baton), or its node alone (the peer's zk.Lock).
func (e *env) holderNodes() int {
	if strings.HasPrefix(e.cfg.impl, "gozk-") {
		return 1
	}
	return 2
}

// watchedSessions starts n sessions and a raw client to watch their queue
// (W4, W5); the returned func closes them all.
func (e *env) watchedSessions(n int) (ss []session, raw *zk.Conn, closeFn func(), err error) {
	ss, err = e.newSessions(n)
	if err != nil {
		return nil, nil, nil, err
	}
	raw, err = rawZK(e.cfg.zkAddr)
	if err != nil {
		closeAll(ss)
		return nil, nil, nil, err
	}
	return ss, raw, func() { raw.Close(); closeAll(ss) }, nil
}

// rawZK is a plain client to watch the queue (W4, W5).
func rawZK(addr string) (*zk.Conn, error) { return rawZKDial(addr, nil) }

// rawZKDial is rawZK through dial (nil: go-zookeeper's own).
func rawZKDial(addr string, dial zk.Dialer) (*zk.Conn, error) {
	if dial == nil {
		dial = net.DialTimeout
	}
	c, ev, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}), zk.WithDialer(dial))
	if err != nil {
		return nil, err
	}
	deadline := time.After(20 * time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-ev:
		case <-deadline:
			c.Close()
			return nil, errors.New("raw zookeeper client: no session")
		}
	}
	return c, nil
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// waitQueued polls the object node until it has n children. Baton's object
// node holds privateLock beside the contenders, so n counts it too.
func waitQueued(c *zk.Conn, path string, n int, poll time.Duration) error {
	return pollQueued(func() (int, error) { return countChildren(c, path) }, path, n, poll)
}

func countChildren(c *zk.Conn, path string) (int, error) {
	ch, _, err := c.Children(path)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return 0, err
	}
	return len(ch), nil
}

// waitQueued is waitQueued counting the requests parked on the shared
// sidecar too (baton-shared, native protocol): queued behind a holder of
// that sidecar, in it and not yet in ZooKeeper (its /healthz says how
// many).
func (e *env) waitQueued(c *zk.Conn, path string, n int, poll time.Duration) error {
	if e.cfg.impl != "baton-shared" || e.shared == nil {
		return waitQueued(c, path, n, poll)
	}
	hc := unixHTTPClient(e.shared.socket)
	defer hc.CloseIdleConnections()
	return pollQueued(func() (int, error) {
		kids, err := countChildren(c, path)
		if err != nil {
			return 0, err
		}
		var h api.Health
		if err := httpDo(hc, http.MethodGet, "/healthz", nil, &h); err != nil {
			return 0, err
		}
		return kids + h.ZooKeeper.Parked, nil
	}, path, n, poll)
}

func pollQueued(count func() (int, error), path string, n int, poll time.Duration) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		have, err := count()
		if err != nil {
			return err
		}
		if have >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timeout waiting for %d children of %s (have %d)", n, path, have)
		}
		time.Sleep(poll)
	}
}

// w4: two clients ping-pong; the holder waits until the other is queued,
// stamps t0 and releases; the waiter stamps t1 when its acquire returns.
func (e *env) w4() (result, error) {
	res := result{Clients: 2, Ops: e.cfg.ops}
	ss, raw, closeSessions, err := e.watchedSessions(2)
	if err != nil {
		return res, err
	}
	defer closeSessions()
	path := e.cfg.root + "/lock"
	locks := []locker{ss[0].locker("lock"), ss[1].locker("lock")}
	if err := locks[0].Lock(); err != nil {
		return res, err
	}
	var holders atomic.Int64
	holders.Store(1)
	var releaseAt, releaseWall atomic.Int64
	base := time.Now()
	lat := make([]time.Duration, 0, e.cfg.ops)
	var stamps [][2]int64 // wall-clock t0, t1 of each measured handoff (BATON_BENCH_STAMPS)
	holder := 0
	for i := range e.cfg.warmup + e.cfg.ops {
		waiter := 1 - holder
		done := make(chan error, 1)
		go func() {
			err := locks[waiter].Lock()
			if err == nil {
				t1 := time.Since(base)
				if holders.Add(1) != 1 {
					res.Overlaps++
				}
				if i >= e.cfg.warmup {
					lat = append(lat, t1-time.Duration(releaseAt.Load()))
					stamps = append(stamps, [2]int64{releaseWall.Load(), time.Now().UnixNano()})
				}
			}
			done <- err
		}()
		// holder's node + privateLock + the waiter's node
		if err := e.waitQueued(raw, path, 1+e.holderNodes(), 500*time.Microsecond); err != nil {
			return res, err
		}
		time.Sleep(e.cfg.settle)
		holders.Add(-1)
		releaseWall.Store(time.Now().UnixNano())
		releaseAt.Store(int64(time.Since(base)))
		if err := locks[holder].Unlock(); err != nil {
			return res, err
		}
		if err := <-done; err != nil {
			return res, err
		}
		holder = waiter
		if i == e.cfg.warmup-1 {
			base = time.Now()
		}
	}
	elapsed := time.Since(base)
	_ = locks[holder].Unlock()
	fill(&res, lat, elapsed, len(lat))
	res.Handoffs = len(lat)
	if f := os.Getenv("BATON_BENCH_STAMPS"); f != "" { // for floor's breakdown
		var b strings.Builder
		for _, s := range stamps {
			fmt.Fprintf(&b, "%d %d\n", s[0], s[1])
		}
		if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
			return res, err
		}
	}
	return res, nil
}

// w5: a gate holds the object while waiters queue; then the gate releases
// and each waiter acquires and releases in turn.
func (e *env) w5() (result, error) {
	res := result{Clients: e.cfg.waiters + 1, Ops: e.cfg.waiters, Waiters: e.cfg.waiters}
	ss, raw, closeSessions, err := e.watchedSessions(e.cfg.waiters + 1)
	if err != nil {
		return res, err
	}
	defer closeSessions()
	gate, waiters := ss[0], ss[1:]
	path := e.cfg.root + "/lock"
	var holders, overlaps, errs atomic.Int64
	for round := 0; round <= e.cfg.warmup; round++ {
		measured := round == e.cfg.warmup
		gl := gate.locker("lock")
		if err := gl.Lock(); err != nil {
			return res, err
		}
		var wg sync.WaitGroup
		for _, s := range waiters {
			wg.Go(func() {
				l := s.locker("lock")
				if err := l.Lock(); err != nil {
					errs.Add(1)
					return
				}
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				holders.Add(-1)
				if err := l.Unlock(); err != nil {
					errs.Add(1)
				}
			})
		}
		// gate's node + privateLock + every waiter's node
		if err := e.waitQueued(raw, path, len(waiters)+e.holderNodes(), 20*time.Millisecond); err != nil {
			return res, err
		}
		var p0, w0 int64
		var perr error
		var wc *wireCapture
		if measured {
			if e.cfg.explain {
				if wc, err = startCapture(zkPort(e.cfg.zkAddr)); err != nil {
					return res, err
				}
				defer wc.stop()
			}
			w0 = time.Now().UnixNano()
			p0, perr = packetsReceived(e.cfg.zkAddr)
		}
		start := time.Now()
		if err := gl.Unlock(); err != nil {
			return res, err
		}
		wg.Wait()
		total := time.Since(start)
		if measured {
			p1, perr2 := packetsReceived(e.cfg.zkAddr)
			if perr == nil && perr2 == nil {
				res.PktsWindow = p1 - p0
			}
			if wc != nil {
				time.Sleep(20 * time.Millisecond) // the capture's reader catches up
				res.WindowOps, res.LateWaiters = w5Explain(wc.take(), w0, time.Now().UnixNano()-int64(20*time.Millisecond))
			}
			res.TotalMs = float64(total.Microseconds()) / 1000
			res.ElapsedS = total.Seconds()
			res.OpsPerS = float64(len(waiters)) / total.Seconds()
		}
		if errs.Load() > 0 {
			break
		}
	}
	res.Handoffs = len(waiters)
	res.Overlaps, res.Errors = overlaps.Load(), errs.Load()
	if errs.Load() > 0 {
		return res, fmt.Errorf("%d waiter errors", errs.Load())
	}
	return res, nil
}

// w5Explain sorts the requests of pkts sent between w0 and w1 (the
// measured window, as the mntr samples bound it) by opcode, and counts the
// sessions that sent one of a queueing waiter's writes or its watch's
// exists in it: the
// harness's gate releases once every waiter's node is listed, and a waiter
// still reading the queue or setting its watch then adds those requests to
// the window (about three each).
func w5Explain(pkts []zkPkt, w0, w1 int64) (map[string]int, *int) {
	ops := map[string]int{}
	late := map[int]bool{}
	for _, p := range pkts {
		if !p.req || p.ts < w0 || p.ts > w1 {
			continue
		}
		name := zkOpName(p.op)
		if p.xid == -2 {
			name = "ping"
		}
		ops[name]++
		switch p.op {
		case 1, 3, 15: // create, exists (a waiter's watch), create2
			late[p.conn] = true
		}
	}
	n := len(late)
	return ops, &n
}

// zkPort is the port of a host:port address (0 if none).
func zkPort(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

func closeAll(ss []session) {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(s.close)
	}
	wg.Wait()
}

// packetsReceived reads zk_packets_received with the mntr four-letter word.
func packetsReceived(addr string) (int64, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "mntr"); err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "zk_packets_received" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, errors.New("no zk_packets_received in mntr")
}

// report prints res as one JSON line, err recorded in it (errField: its
// Error), and returns the probe's exit status.
func report(res any, err error, errField *string) int {
	if err != nil {
		*errField = err.Error()
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if err != nil {
		return 1
	}
	return 0
}

// fill sets elapsed, rate and nearest-rank quantiles.
func fill(res *result, lat []time.Duration, elapsed time.Duration, n int) {
	res.ElapsedS = elapsed.Seconds()
	if elapsed > 0 {
		res.OpsPerS = float64(n) / elapsed.Seconds()
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		i := min(max(int(p*float64(len(lat))+0.5)-1, 0), len(lat)-1)
		return float64(lat[i].Nanoseconds()) / 1000
	}
	res.P50us, res.P99us, res.MaxUs = q(0.50), q(0.99), q(1)
}
