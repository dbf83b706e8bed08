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
	// ReadTimeout bounds reading a request, body included (its header: 10
	// s); net/http lifts the deadline once the body is read, so waits and
	// long-polls last as long as they ask. Default 30s.
	ReadTimeout time.Duration
	// OpsQueue, if set, summarises the op queue for /healthz (nil: ops
	// disabled).
	OpsQueue func() *api.QueueInfo
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
	revokes *prometheus.CounterVec // baton_revocations_total (revoke.go)
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
	revoked    map[*lease]time.Time // revoked leases whose grant is freed after the valid_until told (revoke.go)
	deliveries int                  // op deliveries among leases (reentry.go): not API leases
	leaseEnded chan struct{}        // closed and replaced whenever a lease ends
	closed     bool

	caps    *uidCaps     // per-uid counts (caps.go)
	waiters atomic.Int64 // acquires in flight
	polls   atomic.Int64 // lease long-polls in flight

	// acquires in flight by type (baton_acquires_waiting)
	waitingFG, waitingBG atomic.Int64

	stopCtx    context.Context // cancelled when the drain begins: nothing more is granted
	stopCancel context.CancelFunc
	drainOnce  sync.Once
	drainAsked atomic.Bool   // Drain was called (POST /v1/drain): see DrainRequested
	drainEnd   time.Time     // set before stopCtx is cancelled: no validity is told past it
	drainGrace time.Duration // sidecar.shutdown.grace when the drain began
	over       chan struct{} // closed at the end of the grace: leases left are told lost
	overOnce   sync.Once
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
		caps:       newUIDCaps(),
		revokes:    newRevokeMetric(),
		revoked:    map[*lease]time.Time{},
		inc:        newIncarnation(now),
		started:    now,
		leases:     map[string]*lease{},
		tombs:      map[string]tomb{},
		pids:       map[int32]*pidWatch{},
		leaseEnded: make(chan struct{}),
		stopCtx:    stopCtx,
		stopCancel: stopCancel,
		stopReq:    make(chan struct{}),
		over:       make(chan struct{}),
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
	s.handler = newRouter(s.routes(), s.authorize, s.writeError)
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

// SetOps installs the handler of the /v1/ops endpoints (see Options.Ops).
func (s *Server) SetOps(h http.Handler) {
	if h == nil {
		s.opsH.Store(nil)
		return
	}
	s.opsH.Store(&h)
}

func (s *Server) config() *props.Config { return s.cfg.Load() }

// stopping reports whether the drain has begun: nothing more is granted.
func (s *Server) stopping() bool { return s.stopCtx.Err() != nil }

// graceOver reports whether the drain's grace has ended: the leases left
// are told lost and no more renewed.
func (s *Server) graceOver() bool {
	select {
	case <-s.over:
		return true
	default:
		return false
	}
}

// beginDrain starts the drain once and returns the end of its grace: from
// now on nothing is granted, and no lease is told a validity past the end.
func (s *Server) beginDrain() time.Time {
	s.drainOnce.Do(func() {
		s.drainGrace = s.config().ShutdownGrace
		s.drainEnd = time.Now().Add(s.drainGrace)
		s.stopCancel()
	})
	return s.drainEnd
}

// endGrace tells the leases left that they are lost (reason "shutdown").
func (s *Server) endGrace() { s.overOnce.Do(func() { close(s.over) }) }

// Drain starts the drain that SIGTERM starts (see Shutdown) without
// waiting for it, and reports it; Run returns when it is over. It is what
// POST /v1/drain (`baton drain`, a Kubernetes preStop hook) calls. Calling
// it again reports the drain under way.
func (s *Server) Drain() api.DrainResponse {
	s.drainAsked.Store(true)
	end := s.beginDrain()
	s.stopOnce.Do(func() { close(s.stopReq) })
	now := time.Now()
	return api.DrainResponse{
		Draining: true, GraceMS: s.drainGrace.Milliseconds(), EndsAt: api.NewTime(end),
		EndsInMS: msUntil(end, now), Leases: s.activeLeases(),
	}
}

// DrainRequested reports whether Drain (POST /v1/drain) was called: the
// sidecar stops because it was asked to through its API, not by a signal
// or its owner. `baton serve` then exits with status 3, which the shipped
// systemd unit restarts on, so that no app can leave its node without a
// sidecar.
func (s *Server) DrainRequested() bool { return s.drainAsked.Load() }

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
		ReadTimeout:       s.readTimeout(), // net/http lifts it once the body is read
		IdleTimeout:       2 * time.Minute,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerCred(c))
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(&capListener{Listener: ln, s: s}) }()
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

// drain runs the drain (see Shutdown). Only Close, or a Shutdown whose ctx
// ends, cuts it short.
func (s *Server) drain() {
	end := s.beginDrain()
	s.log.Info("draining: no new grants; leases are renewed until the grace ends", "leases", s.activeLeases(),
		"grace", s.drainGrace)
	var opsDone chan struct{}
	if s.opts.OpsDrain != nil {
		opsDone = make(chan struct{})
		octx, cancel := context.WithDeadline(context.Background(), end)
		go func() {
			defer close(opsDone)
			defer cancel()
			s.opts.OpsDrain(octx)
		}()
	}
	if n := s.waitLeases(func(time.Time) time.Time { return end }); n > 0 {
		s.endGrace()
		s.log.Warn("shutdown grace over: the holders left are told their lock is lost; each is released after the validity told to it",
			"leases", n, "grace", s.drainGrace)
		s.waitLeases(func(last time.Time) time.Time { return last })
	}
	s.endGrace()
	s.waitRevoked()
	s.endAll()
	if opsDone != nil {
		<-opsDone
	}
}

// waitLeases waits until no lease is left, the instant until returns
// (given the latest valid_until told to a holder) has passed, or the
// drain is cut short. It returns the number of leases left.
func (s *Server) waitLeases(until func(lastTold time.Time) time.Time) int {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
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
			return 0
		}
		d := time.Until(until(last))
		if d <= 0 {
			return n
		}
		t.Reset(d)
		select {
		case <-ended:
		case <-t.C:
		case <-s.hurry:
			return n
		}
		t.Stop()
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
		if s.finishLease(l, api.StateLost, api.ReasonShutdown, "the sidecar shut down", nil) && !l.external {
			s.releaseGrant(l.g) // an op delivery's grant is the dispatcher's to release
		}
	}
}

// teardown releases what is left, closes the engine and waits for the
// server's goroutines.
func (s *Server) teardown() {
	s.closeOnce.Do(func() {
		s.beginDrain()
		s.endGrace()
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
