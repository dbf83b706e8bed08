package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

// Options are the parts of a Server that do not come from the properties.
// A zero field means its documented default.
type Options struct {
	// Logger receives structured logs; nil discards.
	Logger *slog.Logger
	// LogLevel, if set, is set to log.level on every Reload.
	LogLevel *slog.LevelVar
	// Registry receives the server's metrics; nil makes a registry with the
	// Go and process collectors too. /metrics serves this registry.
	Registry *prometheus.Registry
	// LeanPathOff serves every request with net/http, none on the lean
	// path (lean.go): a diagnostic switch, for comparison (`baton serve`
	// sets it when BATON_LEAN_PATH=off).
	LeanPathOff bool
	// ReadTimeout bounds reading a request, body included (its header: 10
	// s); net/http lifts the deadline once the body is read, so waits and
	// long-polls last as long as they ask. Default 30s.
	ReadTimeout time.Duration
}

// Server is the sidecar: the HTTP API over the unix socket (its handlers:
// parse, decide, answer), in front of the leases it hands out (leaseTable),
// the preemptions and revocations that reach them (preemption), the
// per-uid caps (uidCaps), the shutdown's progress (drainState) and the lock
// engine that grants the locks. Create it with New, serve with Run. Its
// methods are safe for concurrent use.
type Server struct {
	opts    Options
	cfg     atomic.Pointer[props.Config]
	log     *slog.Logger
	eng     *lock.Engine
	reg     *prometheus.Registry
	m       *metrics
	inc     string
	proto   lock.Protocol // zookeeper.lock.protocol as the engine runs it (a restart key)
	handler http.Handler
	ops     mountPoint // the op dispatcher's endpoints, readiness and drain (Mount)

	lastReload atomic.Pointer[api.ReloadInfo]

	leases *leaseTable
	pre    *preemption
	auth   authz
	errs   errorWriter   // the one error writer
	caps   *uidCaps      // per-uid counts (caps.go)
	drain  *drainState   // the shutdown's progress
	sess   *sessionWatch // ZooKeeper session events

	waiters atomic.Int64 // acquires in flight
	polls   atomic.Int64 // lease long-polls in flight

	// acquires in flight by type (baton_acquires_waiting)
	waitingFG, waitingBG atomic.Int64

	// detach: from how many acquires in flight, and after how long, a
	// waiting acquire leaves net/http (detach.go)
	detach struct {
		waiters  int64
		after    time.Duration
		n        atomic.Int64 // acquires detached so far
		inflight atomic.Int64 // acquires in detachable handlers (their own goroutine's included)
	}
	closes closeWatcher // notices detached callers leaving

	// the lean path (lean.go): requests it answered, connections it handed
	// to net/http
	leanServed, leanHanded atomic.Int64

	stopReq   chan struct{} // Shutdown asks Run to stop
	stopOnce  sync.Once
	closeOnce sync.Once
	ran       atomic.Bool
	runDone   chan struct{}
	wg        sync.WaitGroup // lease watchers, pid watchers, background releases
}

// New checks the configuration and starts the lock engine, which connects
// to ZooKeeper in the background. Call Run to serve; a Server that is never
// Run must be closed with Close.
func New(cfg props.Config, opts Options) (*Server, error) {
	if cfg.SocketPath == "" {
		return nil, errors.New("sidecar: sidecar.socket.path: empty")
	}
	if cfg.LeaseMax <= 0 || cfg.LeaseDefault <= 0 || cfg.LeaseDefault > cfg.LeaseMax {
		return nil, fmt.Errorf("sidecar: sidecar.lease.default (%v) must be positive and at most sidecar.lease.max (%v)", cfg.LeaseDefault, cfg.LeaseMax)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	now := time.Now()
	s := &Server{
		opts:    opts,
		log:     opts.Logger.With("component", "sidecar"),
		m:       newMetrics(),
		inc:     newIncarnation(now),
		drain:   newDrainState(),
		sess:    newSessionWatch(now),
		stopReq: make(chan struct{}),
		runDone: make(chan struct{}),
	}
	s.detach.waiters, s.detach.after = detachWaiters, detachAfter
	c := cfg
	s.cfg.Store(&c)
	s.auth = authz{cfg: s.config, log: s.log}
	s.caps = newUIDCaps(s.config, s.log)
	s.errs = errorWriter{log: s.log, drain: s.drain}
	s.leases = newLeaseTable(s)
	eo, err := EngineOptions(cfg, opts.Logger)
	if err != nil {
		s.drain.cancel()
		return nil, err
	}
	eo.Observer = observer{s}
	s.proto = eo.Protocol
	s.eng, err = lock.New(eo)
	if err != nil {
		s.drain.cancel()
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	s.pre = &preemption{eng: s.eng, leases: s.leases, log: s.log}
	s.reg = opts.Registry
	own := s.reg == nil
	if own {
		s.reg = prometheus.NewRegistry()
	}
	if err := s.m.register(s, own); err != nil {
		s.drain.cancel()
		s.eng.Close()
		return nil, fmt.Errorf("sidecar: metrics: %w", err)
	}
	rt := newRouter(s.routes(), s.auth.authorize, s.errs.write)
	rt.stamps = newDebugStamps()
	s.handler = rt
	return s, nil
}

// Engine returns the lock engine, e.g. for the op dispatcher's background
// locks. The server closes it when Run returns (or on Close).
func (s *Server) Engine() *lock.Engine { return s.eng }

// Registry returns the registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Handler returns the HTTP API (what Run serves on the socket). Requests
// that do not come through the socket count as the sidecar's own process:
// its uid (an admin), no pid (their leases rely on expiry alone).
func (s *Server) Handler() http.Handler { return s.handler }

// Incarnation returns the id of this run of the sidecar; every lease id
// starts with it.
func (s *Server) Incarnation() string { return s.inc }

func (s *Server) config() *props.Config { return s.cfg.Load() }

// Drain starts the drain that SIGTERM starts (see Shutdown) without
// waiting for it, and reports it; Run returns when it is over. It is what
// POST /v1/drain (`baton drain`, a Kubernetes preStop hook) calls. Calling
// it again reports the drain under way.
func (s *Server) Drain() api.DrainResponse {
	s.drain.asked.Store(true)
	end := s.drain.begin(s.config().ShutdownGrace)
	s.stopOnce.Do(func() { close(s.stopReq) })
	now := time.Now()
	return api.DrainResponse{
		Draining: true, GraceMS: s.drain.grace.Milliseconds(), EndsAt: api.NewTime(end),
		EndsInMS: msUntil(end, now), Leases: s.leases.active(),
	}
}

// DrainRequested reports whether Drain (POST /v1/drain) was called: the
// sidecar stops because it was asked to through its API, not by a signal
// or its owner. `baton serve` then exits with status 3, which the shipped
// systemd unit restarts on, so that no app can leave its node without a
// sidecar.
func (s *Server) DrainRequested() bool { return s.drain.asked.Load() }

// RecordReload stores the outcome of a reload for /healthz (and so for
// `baton reload` and `baton status`), numbering it. A rejected reload
// changes nothing, so the restart keys an earlier reload kept stay listed
// in KeptUntilRestart.
func (s *Server) RecordReload(applied, kept []string, rejected error) {
	if prev := s.lastReload.Load(); rejected != nil && prev != nil {
		kept = slices.Clone(prev.KeptUntilRestart)
	}
	info := &api.ReloadInfo{At: api.NewTime(time.Now()), Applied: applied, KeptUntilRestart: kept}
	if info.Applied == nil {
		info.Applied = []string{}
	}
	if info.KeptUntilRestart == nil {
		info.KeptUntilRestart = []string{}
	}
	if rejected != nil {
		info.Error = rejected.Error()
	}
	if prev := s.lastReload.Load(); prev != nil {
		info.Generation = prev.Generation + 1
	} else {
		info.Generation = 1
	}
	s.lastReload.Store(info)
}

// Reload applies a configuration reloaded with props.Reload: live keys
// (sidecar.max.waiters, sidecar.shutdown.grace, zookeeper.connection.*,
// log.level through Options.LogLevel) at once, next keys (lease default and
// max, type timeouts) to acquires and renewals that start afterwards. It
// returns the changes that need a restart (props.Reload already kept their
// old values in next); each change is logged.
func (s *Server) Reload(next *props.Loaded, changes []props.Change) []props.Change {
	if next == nil {
		return nil
	}
	c := next.Config
	s.cfg.Store(&c)
	if s.opts.LogLevel != nil {
		s.opts.LogLevel.Set(c.LogLevel)
	}
	var kept []props.Change
	for _, ch := range changes {
		if !ch.Applied {
			kept = append(kept, ch)
			s.log.Warn("configuration change needs a restart; the old value stays in effect", "key", ch.Key, "old", ch.Old, "new", ch.New)
			continue
		}
		s.log.Info("configuration changed", "key", ch.Key, "old", ch.Old, "new", ch.New, "class", ch.Class.String())
	}
	return kept
}

// Run listens on sidecar.socket.path and serves until ctx ends or Shutdown
// is called, then shuts down (see Shutdown) and returns nil. It refuses to
// start, with an error, when another process answers on the socket; a
// stale socket file from a crashed run is replaced. The socket file is
// removed and the engine closed when Run returns, also on error. Run may be
// called once.
func (s *Server) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("sidecar: Run called twice, or after Close")
	}
	defer close(s.runDone)
	cfg := s.config()
	ln, err := listenUnix(cfg.SocketPath, cfg.SocketMode)
	if err != nil {
		s.teardown()
		return err
	}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       s.opts.readTimeout(), // net/http lifts it once the body is read
		IdleTimeout:       2 * time.Minute,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*peerConn); ok {
				ctx = context.WithValue(ctx, connKey{}, pc)
			}
			return context.WithValue(ctx, peerKey{}, peerCred(c))
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	// Connections start on the lean path, which hands net/http those it
	// does not serve (lean.go).
	ls := newLeanServer(s, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- ls.serve(&capListener{Listener: ln, s: s}) }()
	httpDone := make(chan struct{})
	go func() { defer close(httpDone); _ = hs.Serve(ls.ln) }()
	s.log.Info("sidecar serving", "socket", cfg.SocketPath, "incarnation", s.inc, "node_id", cfg.NodeID)

	var serveErr error
	select {
	case <-ctx.Done():
	case <-s.stopReq:
	case serveErr = <-served:
		served <- serveErr
	}
	s.drainAll()
	_ = ln.Close() // no more connections; unlinks the socket file
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = ls.shutdown(sctx)
	_ = hs.Shutdown(sctx)
	cancel()
	ls.close()
	_ = hs.Close()
	<-httpDone
	if err := <-served; !errors.Is(err, net.ErrClosed) && serveErr == nil {
		serveErr = err
	}
	s.teardown()
	if serveErr != nil && !errors.Is(serveErr, net.ErrClosed) {
		return fmt.Errorf("sidecar: serve %s: %w", cfg.SocketPath, serveErr)
	}
	s.log.Info("sidecar stopped")
	return nil
}

// Shutdown is what SIGTERM does, a drain: stop granting (503
// ShuttingDown) and answer /readyz 503; keep renewing the leases, but tell
// no validity past the end of sidecar.shutdown.grace, with lease state
// "draining" (long-polls fire once); wait for the holders to release. At
// the end of the grace the leases left are told lost (410 reason
// "shutdown", long-polls fire) and each is released after the last
// valid_until told to its holder (at most a session timeout later, as no
// renewal extends it any more: a grace shorter than that never cuts a
// validity already told). Then the engine is closed and the socket
// removed. Shutdown returns when Run has returned, or ctx's error if ctx
// ends first (the grace is then cut short and Run still finishes). A server
// that was never run is closed.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.ran.CompareAndSwap(false, true) {
		s.teardown()
		close(s.runDone)
		return nil
	}
	s.stopOnce.Do(func() { close(s.stopReq) })
	select {
	case <-s.runDone:
		return nil
	case <-ctx.Done():
		s.drain.cutShort()
		return ctx.Err()
	}
}

// Close shuts down without waiting for holders: every lease is released at
// once, even before the valid_until told to its holder (use Shutdown for
// that guarantee). It is idempotent.
func (s *Server) Close() error {
	s.drain.cutShort()
	return s.Shutdown(context.Background())
}

// drain runs the drain (see Shutdown): the op dispatcher's drain beside
// the leases' (leaseTable.drainOut). Only Close, or a Shutdown whose ctx
// ends, cuts it short.
func (s *Server) drainAll() {
	end := s.drain.begin(s.config().ShutdownGrace)
	s.log.Info("draining: no new grants; leases are renewed until the grace ends", "leases", s.leases.active(),
		"grace", s.drain.grace)
	var opsDone chan struct{}
	if m := s.ops.get(); m != nil {
		opsDone = make(chan struct{})
		octx, cancel := context.WithDeadline(context.Background(), end)
		go func() {
			defer close(opsDone)
			defer cancel()
			m.Drain(octx)
		}()
	}
	s.leases.drainOut(end)
	if opsDone != nil {
		<-opsDone
	}
}

// teardown releases what is left, closes the engine and waits for the
// server's goroutines.
func (s *Server) teardown() {
	s.closeOnce.Do(func() {
		s.drain.begin(s.config().ShutdownGrace)
		s.drain.endGrace()
		s.leases.close()
		close(s.drain.closing)
		s.eng.Close()
		s.wg.Wait()
		s.closes.stop()
		if rt, ok := s.handler.(*router); ok {
			rt.stamps.write()
		}
	})
}
