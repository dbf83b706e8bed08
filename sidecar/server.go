package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	// Ops serves /v1/ops, /v1/ops/{id} and /v1/ops/{id}/replay (the path
	// value "id" is set); nil answers 503 OpsDisabled. It can also be set
	// with SetOps before Run.
	Ops http.Handler
	// OpsReady, if set, is part of /readyz: an error makes it 503 with the
	// error as the reason (e.g. the queue is not open).
	OpsReady func() error
	// OpsDrain, if set, is called when shutdown begins, concurrently with
	// the wait for lease holders; the engine is closed only after it returns
	// (so deliveries can finish or re-queue while they still hold their
	// locks). Its ctx ends at the shutdown grace.
	OpsDrain func(ctx context.Context)
}

// Server is the sidecar: the HTTP API over the unix socket, the leases, and
// the lock engine they are granted by. Create it with New, serve with Run.
// Its methods are safe for concurrent use.
type Server struct {
	opts    Options
	cfg     atomic.Pointer[props.Config]
	log     *slog.Logger
	eng     *lock.Engine
	reg     *prometheus.Registry
	m       *metrics
	inc     string
	started time.Time
	handler http.Handler
	opsH    atomic.Pointer[http.Handler]

	lastReload atomic.Pointer[api.ReloadInfo]

	mu         sync.Mutex
	leases     map[string]*lease
	tombs      map[string]tomb
	tombQ      []tombRef
	pids       map[int32]*pidWatch
	leaseEnded chan struct{} // closed and replaced whenever a lease ends
	closed     bool

	waiters atomic.Int64 // acquires in flight
	polls   atomic.Int64 // lease long-polls in flight

	stopCtx    context.Context // cancelled when shutdown begins: nothing more is granted or renewed
	stopCancel context.CancelFunc
	stopReq    chan struct{} // Shutdown asks Run to stop
	stopOnce   sync.Once
	hurry      chan struct{} // cut the grace short
	hurryOnce  sync.Once
	closing    chan struct{} // teardown has begun
	closeOnce  sync.Once
	ran        atomic.Bool
	runDone    chan struct{}
	wg         sync.WaitGroup // lease watchers, pid watchers, background releases

	sessMu    sync.Mutex
	sessCh    chan struct{} // closed and replaced on every session event
	discSince time.Time     // zero while connected
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
	stopCtx, stopCancel := context.WithCancel(context.Background())
	s := &Server{
		opts:       opts,
		log:        opts.Logger.With("component", "sidecar"),
		m:          newMetrics(),
		inc:        newIncarnation(now),
		started:    now,
		leases:     map[string]*lease{},
		tombs:      map[string]tomb{},
		pids:       map[int32]*pidWatch{},
		leaseEnded: make(chan struct{}),
		stopCtx:    stopCtx,
		stopCancel: stopCancel,
		stopReq:    make(chan struct{}),
		hurry:      make(chan struct{}),
		closing:    make(chan struct{}),
		runDone:    make(chan struct{}),
		sessCh:     make(chan struct{}),
		discSince:  now,
	}
	c := cfg
	s.cfg.Store(&c)
	if opts.Ops != nil {
		s.SetOps(opts.Ops)
	}
	eo, err := EngineOptions(cfg, opts.Logger)
	if err != nil {
		stopCancel()
		return nil, err
	}
	eo.Observer = observer{s}
	s.eng, err = lock.New(eo)
	if err != nil {
		stopCancel()
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	s.reg = opts.Registry
	own := s.reg == nil
	if own {
		s.reg = prometheus.NewRegistry()
	}
	if err := s.registerMetrics(s.reg, own); err != nil {
		stopCancel()
		s.eng.Close()
		return nil, fmt.Errorf("sidecar: metrics: %w", err)
	}
	s.handler = s.routes()
	return s, nil
}

// Engine returns the lock engine, e.g. for the op dispatcher's background
// locks. The server closes it when Run returns (or on Close).
func (s *Server) Engine() *lock.Engine { return s.eng }

// Registry returns the registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Handler returns the HTTP API (what Run serves on the socket). Requests
// that do not come through the socket have no caller pid: their leases
// rely on expiry alone.
func (s *Server) Handler() http.Handler { return s.handler }

// Incarnation returns the id of this run of the sidecar; every lease id
// starts with it.
func (s *Server) Incarnation() string { return s.inc }

// SetOps installs the handler of the /v1/ops endpoints (see Options.Ops).
func (s *Server) SetOps(h http.Handler) {
	if h == nil {
		s.opsH.Store(nil)
		return
	}
	s.opsH.Store(&h)
}

func (s *Server) config() *props.Config { return s.cfg.Load() }

func (s *Server) stopping() bool { return s.stopCtx.Err() != nil }

// RecordReload stores the outcome of a reload for /healthz (and so for
// `baton reload`), numbering it.
func (s *Server) RecordReload(applied, kept []string, rejected error) {
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
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pid := peerPID(c); pid > 0 {
				return context.WithValue(ctx, pidKey{}, pid)
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	s.log.Info("sidecar serving", "socket", cfg.SocketPath, "incarnation", s.inc, "node_id", cfg.NodeID)

	var serveErr error
	select {
	case <-ctx.Done():
	case <-s.stopReq:
	case serveErr = <-served:
		served <- serveErr
	}
	s.drain()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = hs.Shutdown(sctx) // closes the listener (removing the socket file)
	cancel()
	_ = hs.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) && serveErr == nil {
		serveErr = err
	}
	s.teardown()
	_ = ln.Close() // unlinks the socket file, if Shutdown has not already
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("sidecar: serve %s: %w", cfg.SocketPath, serveErr)
	}
	s.log.Info("sidecar stopped")
	return nil
}

// Shutdown is what SIGTERM does: stop granting (503 ShuttingDown), refuse
// renewals (410 reason "shutdown"), answer long-polls; wait until every
// lease is released or past the last valid_until told to its holder (no
// renewal extends it any more, so this is at most a session timeout; a
// sidecar.shutdown.grace shorter than that does not cut a validity already
// told); then release everything, close the engine and remove the socket. It returns when Run has returned, or ctx's error if ctx
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
		s.hurryOnce.Do(func() { close(s.hurry) })
		return ctx.Err()
	}
}

// Close shuts down without waiting for holders: every lease is released at
// once, even before the valid_until told to its holder (use Shutdown for
// that guarantee). It is idempotent.
func (s *Server) Close() error {
	s.hurryOnce.Do(func() { close(s.hurry) })
	return s.Shutdown(context.Background())
}

// drain stops granting and waits until every lease is released or past
// the last valid_until told to its holder. sidecar.shutdown.grace bounds
// the wait for holders to release, but never cuts a validity already told:
// a lease whose valid_until lies beyond the grace is released at that
// valid_until (at most a session timeout later, since no renewal extends
// it any more). Only Close, or a Shutdown whose ctx ends, cuts it short.
func (s *Server) drain() {
	s.stopCancel()
	grace := s.config().ShutdownGrace
	deadline := time.Now().Add(grace)
	s.log.Info("shutting down: waiting for lease holders", "leases", s.activeLeases(), "grace", grace)
	var opsDone chan struct{}
	if s.opts.OpsDrain != nil {
		opsDone = make(chan struct{})
		octx, cancel := context.WithDeadline(context.Background(), deadline)
		go func() {
			defer close(opsDone)
			defer cancel()
			s.opts.OpsDrain(octx)
		}()
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	warned := false
wait:
	for {
		s.mu.Lock()
		n := len(s.leases)
		var last time.Time
		for _, l := range s.leases {
			l.mu.Lock()
			if l.told.After(last) {
				last = l.told
			}
			l.mu.Unlock()
		}
		ended := s.leaseEnded
		s.mu.Unlock()
		if n == 0 {
			break
		}
		d := time.Until(last)
		if d <= 0 {
			break
		}
		if !warned && last.After(deadline) {
			warned = true
			s.log.Warn("shutdown grace ends before the validity told to a holder; waiting for that validity", "grace", grace, "wait", d.Round(time.Millisecond))
		}
		t.Reset(d)
		select {
		case <-ended:
		case <-t.C:
		case <-s.hurry:
			break wait
		}
		t.Stop()
	}
	s.endAll()
	if opsDone != nil {
		<-opsDone
	}
}

// endAll releases every lease left (reason "shutdown").
func (s *Server) endAll() {
	s.mu.Lock()
	ls := make([]*lease, 0, len(s.leases))
	for _, l := range s.leases {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		if s.finishLease(l, api.StateLost, api.ReasonShutdown, "the sidecar shut down", nil) {
			s.releaseGrant(l.g)
		}
	}
}

// teardown releases what is left, closes the engine and waits for the
// server's goroutines.
func (s *Server) teardown() {
	s.closeOnce.Do(func() {
		s.stopCancel()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.endAll()
		s.mu.Lock()
		s.stopPIDsLocked()
		s.mu.Unlock()
		close(s.closing)
		s.eng.Close()
		s.wg.Wait()
	})
}

// onSession tracks ZooKeeper session events (from the engine's observer).
func (s *Server) onSession(state string) {
	s.m.setSession(state)
	s.sessMu.Lock()
	if state == "has_session" {
		s.discSince = time.Time{}
	} else if s.discSince.IsZero() {
		s.discSince = time.Now()
	}
	close(s.sessCh)
	s.sessCh = make(chan struct{})
	s.sessMu.Unlock()
}

// sessionChanged returns a channel closed at the next session event.
func (s *Server) sessionChanged() <-chan struct{} {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	return s.sessCh
}

func (s *Server) disconnectedFor() time.Duration {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.discSince.IsZero() {
		return 0
	}
	return time.Since(s.discSince)
}
