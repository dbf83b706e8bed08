package lock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/internal/notify"
)

// session is one ZooKeeper session (one zk.Conn). It tracks the validity
// deadline from acknowledged requests and is declared lost once, after which
// the engine replaces it; a lost session is never used for a grant again.
type session struct {
	e    *Engine
	gen  uint64
	conn *zk.Conn
	log  *slog.Logger

	mu      sync.Mutex
	id      int64         // established session id, 0 before the first handshake
	timeout time.Duration // negotiated
	// base is the latest instant from which the leader is known to count the
	// session's expiry: grants are valid until base + timeout - margin. See
	// leaderAcked for how it moves.
	base    time.Time
	touches []touch // acknowledged requests of any kind, oldest first, for leaderAcked
	// leaderSent is the send time of the newest acknowledged leader-path
	// request (a write or a sync): the keeper stays quiet while these come
	// at least once per keepInterval.
	leaderSent time.Time
	state      zk.State
	// settled: go-zookeeper is done re-registering watches after the last
	// handshake (see settle); requests wait for it.
	settled   bool
	settleGen int
	// changed is notified on every change of the state, the settling, the
	// negotiated timeout, the waiters' count, and of the grant count when
	// the monitor or the keeper waits for it (monitorIdle, keeperIdle);
	// guarded by mu. The base moving later is not announced: no waiter
	// needs it (the monitor's timer, set for an earlier deadline, fires
	// early and looks again), and announcing it woke the monitor on every
	// leader-path answer, twice per lock cycle.
	changed     notify.Broadcast
	monitorIdle bool // the monitor waits with no deadline: no grants (it needs a register's wake)
	keeperIdle  bool // the keeper waits until the next change (it needs a register's wake)
	lostErr     error
	cleanups    []cleanup
	cleanWake   chan struct{}

	grants    map[*Grant]struct{} // held grants, ended when the session is lost
	waiters   int                 // slow-path acquires in progress
	syncs     atomic.Int64        // keeper syncs sent (cost metric)
	quiet     atomic.Int64        // keeper intervals skipped: leader-path writes kept the base moving
	lost      chan struct{}       // closed when the session is declared lost
	closeOnce sync.Once
	pending   atomic.Int64  // cleanups not yet done (metric)
	own       *owners       // request ids owning nodes, objects touched: for the audit
	auditWake chan struct{} // a reconnect: audit now

	doubtMu sync.Mutex
	doubts  []doubtfulDelete // audit deletes whose reply was lost (audit.go)

	creates chan struct{} // a waiter's create holds a slot until answered (bounded)

	// tcpMu guards tcp and shut: the connection go-zookeeper dialed last,
	// and whether the session was shut (no connection may be dialed after
	// it). A lock of its own: the dialer runs on go-zookeeper's loop.
	tcpMu sync.Mutex
	tcp   net.Conn
	shut  bool

	replacing bool // Engine.replace has begun opening its successor (e.mu)
}

// maxCreatesInFlight bounds the waiters' creates a session has sent and not
// yet had answered. ZooKeeper answers a session's requests in order, so
// without a bound a burst of arrivals (10,000 acquires within a second or
// two) queues every create ahead of the keeper's sync and the pings: at the
// server's write rate on a loaded machine the newest acknowledgement grew
// older than the session timeout and the engine, counting validity from
// acknowledged send times, gave the session up (the safe side, but every
// lock of the sidecar with it). With the bound, the rest of the burst waits
// in the engine and a keeper's request is behind at most this many creates
// (tens of ms). Far above what steady load needs: a create is answered in
// about a millisecond.
const maxCreatesInFlight = 64

// bounded runs f, a request that creates a waiter's node (its create, the
// fast paths' multis that create child and grant at once, the object
// node's create: a burst on distinct objects sends as many of these as a
// burst on one object sends creates), within the session's bound. It waits
// for a slot (or for ctx to end: nothing is sent then), and the slot is
// given back once f is answered, whatever the answer and also when the
// caller stopped waiting for it (zcall hands the answer to orphan). An f
// that zcall never started, because ctx ended first, gives its slot back at
// once and is never sent.
func bounded[T any](ctx context.Context, s *session, f func() (T, error), orphan func(T, error)) (T, error) {
	var zero T
	select {
	case s.creates <- struct{}{}:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	done := func() { <-s.creates }
	var claim atomic.Int32 // 1: f sends the create; 2: the caller gave up before it started
	p, err := zcall(ctx, func() (T, error) {
		if !claim.CompareAndSwap(0, 1) {
			return zero, errCreateNotSent
		}
		defer done()
		return f()
	}, orphan)
	if err != nil && claim.CompareAndSwap(0, 2) {
		done()
	}
	return p, err
}

// boundedMulti is bounded for a multi, sent from the caller's goroutine
// (zmulti): the slot is given back when the multi is answered, or when
// it is known never to have been sent.
func boundedMulti(ctx context.Context, s *session, ops []any, orphan func([]zk.MultiResponse, error)) ([]zk.MultiResponse, error) {
	select {
	case s.creates <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res, err := zmulti(ctx, s, ops, func(res []zk.MultiResponse, err error) {
		<-s.creates
		if orphan != nil {
			orphan(res, err)
		}
	})
	if !endedFirst(ctx, err) { // answered: the late function, which gives the slot back, is not called
		<-s.creates
	}
	return res, err
}

// errCreateNotSent is what orphan gets for a create never sent.
var errCreateNotSent = errors.New("lock: create not sent: the wait ended first")

// touch is one acknowledged request: the server it went to had touched the
// session between sent and acked.
type touch struct{ sent, acked time.Time }

func newSession(e *Engine, gen uint64, servers []string) (*session, error) {
	s := &session{
		e:         e,
		gen:       gen,
		log:       e.log.With("session_gen", gen),
		lost:      make(chan struct{}),
		cleanWake: make(chan struct{}, 1),
		state:     zk.StateDisconnected,
		grants:    make(map[*Grant]struct{}),
		own:       newOwners(e.opts.AuditInterval >= 0),
		auditWake: make(chan struct{}, 1),
		creates:   make(chan struct{}, maxCreatesInFlight),
	}
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := e.opts.Dialer(network, addr, timeout)
		if err == nil && e.opts.TLS != nil {
			c, err = tlsClient(c, addr, timeout, e.opts.TLS)
		}
		if err != nil {
			e.dialFailed(addr, err)
			return nil, err
		}
		s.tcpMu.Lock()
		defer s.tcpMu.Unlock()
		if s.shut { // shutConn ran: this session must not come back
			c.Close()
			return nil, errSessionShut
		}
		e.dialOK(addr)
		s.tcp = newTrackedConn(c, s)
		return s.tcp, nil
	}
	conn, _, err := zk.Connect(servers, e.opts.SessionTimeout,
		zk.WithDialer(dialer),
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(zkLogger{e.opts.Logger}), // its own component, not "lock" twice
		zk.WithLogInfo(false),
	)
	if err != nil {
		return nil, fmt.Errorf("lock: connect: %w", err)
	}
	s.conn = conn
	if e.opts.AuthDigest != "" {
		// go-zookeeper re-sends credentials after every reconnect.
		go func() {
			if err := conn.AddAuth("digest", []byte(e.opts.AuthDigest)); err != nil && !errors.Is(err, zk.ErrClosing) {
				s.log.Warn("zookeeper digest auth failed", "err", err)
			}
		}()
	}
	return s, nil
}

// start runs the session's own goroutines; with e.mu held, the engine not
// closed (their Adds come before Close's Wait).
func (s *session) start() {
	e := s.e
	e.wg.Go(s.monitor)
	e.wg.Go(s.cleaner)
	e.wg.Go(s.keeper)
	e.wg.Go(s.auditor)
}

// tlsClient runs the TLS handshake on c, bounded by timeout.
func tlsClient(c net.Conn, addr string, timeout time.Duration, base *tls.Config) (net.Conn, error) {
	cfg := base.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(timeout))
	}
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}

func (s *session) handshake(id int64, timeout time.Duration, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == 0 || timeout <= 0 {
		s.changed.Notify()
		go s.fail(fmt.Errorf("%w: expired by the server", ErrSessionLost))
		return
	}
	if s.id != 0 && s.id != id {
		s.changed.Notify()
		go s.fail(fmt.Errorf("%w: replaced by session 0x%x", ErrSessionLost, id))
		return
	}
	if s.id == 0 {
		s.log.Info("zookeeper session established", "session", fmt.Sprintf("0x%x", id),
			"timeout_requested", s.e.opts.SessionTimeout, "timeout_negotiated", timeout)
	}
	// A handshake is answered only after the leader saw the session: a new
	// session is created by the leader, and a follower revalidates an
	// existing one with the leader, which touches it, before it answers.
	// So the leader counts the expiry from a moment after sent.
	old := s.deadlineLocked()
	first := s.id == 0
	s.id, s.timeout = id, timeout
	// go-zookeeper v1.0.4 re-registers watches after a reconnect while its
	// receive loop runs, reading lastZxid unguarded (a data race whenever a
	// reply arrives meanwhile: upstream go-zookeeper/zk#35). It builds all
	// setWatches requests before sending the first, and builds none (and
	// reads nothing) without watches. So requests wait until a setWatches
	// is written on this connection, or 100 ms. A fresh connection of a new
	// zk.Conn has no watches.
	s.settleGen++
	s.settled = first
	if !first {
		g := s.settleGen
		time.AfterFunc(100*time.Millisecond, func() { s.settle(g) })
	}
	if usable := timeout - s.margin(timeout) - s.e.opts.TickTime - 2*s.keepInterval(timeout); first && usable <= 0 {
		s.log.Error("the negotiated session timeout leaves no validity for grants: "+
			"raise zookeeper.session.timeout (and the servers' maxSessionTimeout), or check zookeeper.tick.time",
			"timeout_negotiated", timeout, "tick_time", s.e.opts.TickTime)
	}
	if sent.After(s.base) {
		s.base = sent
	}
	s.touches = s.touches[:0]
	if !old.IsZero() && s.deadlineLocked().Before(old) {
		// The server shortened the session timeout on a reconnect: a
		// valid_until already told could outlast the server's expiry.
		s.changed.Notify()
		go s.fail(fmt.Errorf("%w: negotiated session timeout shrank to %v on reconnect", ErrSessionLost, timeout))
		return
	}
	s.changed.Notify()
}

// settle marks the connection of handshake gen settled (see handshake).
func (s *session) settle(gen int) {
	s.mu.Lock()
	if s.settleGen == gen && !s.settled {
		s.settled = true
		s.changed.Notify()
	}
	s.mu.Unlock()
}

func (s *session) setWatchesSent() {
	s.mu.Lock()
	g := s.settleGen
	s.mu.Unlock()
	s.settle(g)
}

// acked records an acknowledged request and, for one answered through the
// leader, moves the validity base.
//
// How the leader learns that a session lives (ZooKeeper 3.8: Leader.lead,
// LearnerHandler, Learner.ping): a follower touches the session locally
// on every request and ping; the leader pings each follower every
// tickTime/2 and the follower's reply carries the sessions touched since
// the last one; only then does the leader push the session's expiry to
// (now + timeout). Requests a follower forwards (writes, sync) are checked
// by the leader but do not touch the session there. So a follower cut off
// from its leader keeps answering pings while the leader expires the
// session, and even a write answered through the leader proves only that
// the session was alive, not that its expiry moved.
//
// What a leader-path answer does prove: the follower forwarded the request
// after every ping reply the leader processed before it, over one ordered
// channel. The leader pings every tickTime/2; allowing tickTime (twice
// that) for a ping to reach the follower, a touch that the server had made
// tickTime before our leader-path request was sent has been carried to the
// leader in a ping reply the leader processed before answering. A request
// acknowledged at acked was touched no later than acked; so the base moves
// to the send time of the newest request acknowledged at least tickTime
// before the leader-path request's send.
func (s *session) acked(sent, at time.Time, leader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touches = append(s.touches, touch{sent, at})
	tick := s.e.opts.TickTime
	if leader {
		if sent.After(s.leaderSent) {
			s.leaderSent = sent
		}
		if k := leadingAckedBy(s.touches, sent.Add(-tick)); k >= 0 {
			if b := s.touches[k].sent; b.After(s.base) {
				s.base = b // later only: not announced (see changed)
			}
			// Drop the older ones by reslicing, not by copying the rest
			// down: the rest is every request acknowledged in the last
			// tickTime (thousands on a busy session), and its copy on
			// every leader-path answer was 5 % of the sidecar's CPU in
			// W1. The dropped front is reclaimed when append next grows
			// the slice (copying the live part once per growth).
			s.touches = s.touches[k:]
		}
	}
	// A server answers a session's requests in order, so every later answer
	// is of a request sent no earlier than this one: its cut is no earlier
	// than sent - tickTime, and touches acknowledged by then count only
	// through the newest of them. So the others go, on every answer,
	// whatever its path, if also acknowledged by at - 2×tickTime (the
	// earlier bound when answers come within a tick: it keeps a little
	// more, room for sends out of order by a little, which one connection
	// does not make). The bound is never later than sent - tickTime:
	// answers slower than tickTime (a loaded server, a fsync stall) come
	// more than tickTime after their send, and at - 2×tickTime alone then
	// dropped the very touches their cuts needed: the base stopped. (A cap
	// of 4,096 that kept the newest 1,024 on a read's answer, before that,
	// kept less than tickTime of them on a session answering a few thousand
	// requests a second: no cut found a touch, the base stopped, and the
	// session gave itself up as lost after its timeout, in the middle of W3
	// on one baton serve.)
	if k := leadingAckedBy(s.touches, earliest(sent.Add(-tick), at.Add(-2*tick))); k > 0 {
		s.touches = s.touches[k:]
	}
	if len(s.touches) > maxTouches {
		s.touches = thinTouches(s.touches, tick)
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// maxTouches bounds a session's touches where what they span (twice
// tickTime, or tickTime and the answers' delay when that is longer) holds
// more answers than this (about 16,000 a second at the default tickTime).
const maxTouches = 1 << 16

// leadingAckedBy returns the index of the last touch of ts's leading run
// acknowledged no later than cut, or -1. (Touches are appended as answers
// are read: in acknowledgement order.)
func leadingAckedBy(ts []touch, cut time.Time) int {
	k := -1
	for i, t := range ts {
		if t.acked.After(cut) {
			break
		}
		k = i
	}
	return k
}

// thinTouches keeps, of the touches acknowledged within one grain of a
// time grid, only the newest: a grain of tickTime/8,192 (two ticks, what
// the touches span unless answers are slower than tickTime, fit in
// maxTouches/4 of them), doubled until at most maxTouches/2 are left. Any
// subset only ever makes a later base older, never newer: a cut that would
// have found a dropped touch finds a kept one acknowledged before it, sent
// no later. And by no more than a grain or two: the touch kept in the
// grain before the cut's (if it has any). The grid is fixed (grains of
// powers of two times the finest, from touchEpoch, each the union of two
// of the next finer), so thinning the kept touches again on it keeps them:
// the gaps do not grow however often a touch is thinned.
// (Halving the older half by count, its predecessor, thinned the oldest
// touches again on every pass: on a session whose tickTime held a few
// times maxTouches answers, none older than a part of the tick was left,
// no cut found one, and the base stopped.) It is O(len) per doubling (one
// unless answers are slower than tickTime) and leaves at most maxTouches/2:
// amortized constant per answer.
func thinTouches(ts []touch, tick time.Duration) []touch {
	g := max(tick/8192, time.Microsecond)
	for {
		w := 0
		for i, t := range ts {
			if i+1 < len(ts) && grain(ts[i+1].acked, g) == grain(t.acked, g) {
				continue
			}
			ts[w] = t
			w++
		}
		ts = ts[:w]
		if len(ts) <= maxTouches/2 {
			return ts
		}
		g *= 2
	}
}

// touchEpoch anchors thinTouches' grid.
var touchEpoch = time.Now()

// grain is the index of the grain of g that holds t.
func grain(t time.Time, g time.Duration) int64 {
	d := t.Sub(touchEpoch)
	q := d / g
	if d < 0 && d%g != 0 {
		q--
	}
	return int64(q)
}

func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	s.state = ev.State
	s.changed.Notify()
	s.mu.Unlock()
	s.e.observe(func(o Observer) { o.SessionState(ev.State.String()) })
	switch ev.State {
	case zk.StateExpired:
		go s.fail(fmt.Errorf("%w: expired by the server", ErrSessionLost))
	case zk.StateHasSession:
		select {
		case s.cleanWake <- struct{}{}:
		default:
		}
		select {
		case s.auditWake <- struct{}{}:
		default:
		}
	case zk.StateAuthFailed:
		go s.fail(fmt.Errorf("%w: authentication failed", ErrSessionLost))
	}
}

// margin is subtracted from the session timeout: at least 2% + 50 ms.
func (s *session) margin(timeout time.Duration) time.Duration {
	return max(s.e.opts.SafetyMargin, timeout/50+50*time.Millisecond)
}

// deadline is when grants of this session stop being valid; zero before the
// session exists.
func (s *session) deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadlineLocked()
}

func (s *session) deadlineLocked() time.Time {
	if s.id == 0 || s.base.IsZero() {
		return time.Time{}
	}
	return s.base.Add(s.timeout - s.margin(s.timeout))
}

// connected reports whether the session is established and connected.
func (s *session) connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id != 0 && s.state == zk.StateHasSession && s.settled && s.lostErr == nil
}

func (s *session) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

func (s *session) sessionID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// waitConnected blocks until the session is connected, lost, or ctx ends.
func (s *session) waitConnected(ctx context.Context) error {
	for {
		s.mu.Lock()
		// A lost session may still be connected (a stalled one, pinging):
		// never ready.
		ok := s.id != 0 && s.state == zk.StateHasSession && s.settled && s.lostErr == nil
		ch := s.changed.Wait()
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-s.lost:
			return s.lostCause()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *session) lostCause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostErr == nil {
		return ErrSessionLost
	}
	return s.lostErr
}

// fail declares the session lost (once): every grant and wait of it ends,
// its connection is closed, and the engine opens a new session.
func (s *session) fail(cause error) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.lostErr = cause
		s.cleanups = nil
		s.pending.Store(0)
		s.changed.Notify()
		grants := make([]*Grant, 0, len(s.grants))
		for g := range s.grants {
			grants = append(grants, g)
		}
		s.mu.Unlock()
		close(s.lost)
		for _, g := range grants { // told now, before anything else happens
			g.lose(cause)
		}
		if errors.Is(cause, ErrClosed) {
			s.log.Info("zookeeper session closed")
		} else {
			s.log.Warn("zookeeper session lost", "cause", cause)
		}
		// Engine.Close waits for closeConn; once it has begun, it shuts
		// its current session itself (and openSession a new one).
		s.e.track(s.closeConn)
		if testHookBeforeReplace != nil {
			testHookBeforeReplace()
		}
		s.e.replace(s)
	})
}

// monitor declares the session lost when its deadline passes without a newer
// acknowledgement, whatever go-zookeeper believes about the connection.
func (s *session) monitor() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		d := s.deadlineLocked()
		if len(s.grants) == 0 {
			// Nothing to protect: an idle session's base moves only when
			// a request goes through the leader, so its deadline passing
			// says nothing about the session. The next grant is a
			// leader-path request and moves it first.
			d = time.Time{}
		}
		// Idle, the next grant must wake it (register). Armed, a grant
		// need not: the deadline only moves later within a session (the
		// base moves later; a reconnect whose shorter timeout would move
		// the deadline earlier fails the session: handshake), so the
		// timer, set for this deadline or an earlier one, fires no later
		// than the session's deadline, and the loop looks again then.
		s.monitorIdle = d.IsZero()
		ch := s.changed.Wait()
		s.mu.Unlock()
		if !d.IsZero() {
			wait := time.Until(d)
			if wait <= 0 {
				s.fail(fmt.Errorf("%w: no acknowledgement from zookeeper within the session timeout", ErrSessionLost))
				return
			}
			timer.Reset(wait)
		}
		select {
		case <-s.lost:
			return
		case <-s.e.closing:
			return
		case <-ch:
		case <-timer.C:
		}
	}
}

// errNoValidity: a grant answered after the session's deadline.
var errNoValidity = fmt.Errorf("%w: granted with no validity left "+
	"(is the negotiated session timeout longer than zookeeper.tick.time plus the margin?)", ErrSessionLost)

// register adds a grant to the session, unless the session is lost or its
// deadline has passed (then the grant would be valid for no time at all).
func (s *session) register(g *Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostErr != nil {
		return s.lostErr
	}
	if d := s.deadlineLocked(); d.IsZero() || !time.Now().Before(d) {
		return errNoValidity
	}
	s.grants[g] = struct{}{}
	if s.monitorIdle || s.keeperIdle { // waiting for a grant (see changed)
		s.changed.Notify()
	}
	return nil
}

func (s *session) unregister(g *Grant) {
	s.mu.Lock()
	delete(s.grants, g)
	s.mu.Unlock()
}

// addCleanup queues deletes that must happen while the session lives: they
// are retried after every reconnect until done or the session ends.
func (s *session) addCleanup(cs ...cleanup) {
	s.mu.Lock()
	if s.lostErr != nil {
		s.mu.Unlock()
		return // ephemeral nodes die with the session
	}
	s.cleanups = append(s.cleanups, cs...)
	s.pending.Add(int64(len(cs)))
	s.mu.Unlock()
	select {
	case s.cleanWake <- struct{}{}:
	default:
	}
}

// woken waits for wake or tick (nil: never) and reports true, or false
// once the session is over (lost, or the engine closing): the wait of the
// session's background loops.
func (s *session) woken(wake <-chan struct{}, tick <-chan time.Time) bool {
	select {
	case <-s.lost:
		return false
	case <-s.e.closing:
		return false
	case <-wake:
		return true
	case <-tick:
		return true
	}
}

func (s *session) cleaner() {
	for s.woken(s.cleanWake, nil) {
		// Like every request, wait until the connection is settled
		// (see handshake): the cleaner is woken at the reconnect, before
		// go-zookeeper has written its setWatches.
		if err := s.waitConnected(s.e.ctx); err != nil {
			return // the session is lost or the engine closing
		}
		for {
			s.mu.Lock()
			if len(s.cleanups) == 0 || s.lostErr != nil {
				s.mu.Unlock()
				break
			}
			c := s.cleanups[0]
			s.mu.Unlock()
			err := c.run(s)
			switch {
			case err == nil:
			case errors.Is(err, zk.ErrClosing):
				return
			case isConnErr(err), notSent(err), errors.Is(err, errContended):
				s.log.Debug("cleanup failed; retrying after reconnect", "cleanup", c.String(), "err", err)
			default: // e.g. ErrNoAuth: retrying cannot help; the node goes with the session
				s.log.Error("cleanup failed; the node stays until the session ends", "cleanup", c.String(), "err", err)
			}
			if isConnErr(err) || notSent(err) || errors.Is(err, errContended) {
				if s.connected() { // it failed but we are connected (again): retry soon
					time.Sleep(50 * time.Millisecond)
					continue
				}
				break // wait for the next HasSession (cleanWake) or the end of the session
			}
			s.mu.Lock()
			if len(s.cleanups) > 0 && s.cleanups[0] == c {
				s.cleanups = s.cleanups[1:]
				s.pending.Add(-1)
			}
			s.mu.Unlock()
		}
	}
}

// keepInterval is how often the keeper sends a sync while the session has
// grants or waiters: often enough that the validity base trails the present
// by about tickTime plus this interval.
func (s *session) keepInterval(timeout time.Duration) time.Duration {
	return max(20*time.Millisecond, min(timeout/8, s.e.opts.TickTime/2))
}

// keeper sends a sync (answered through the leader) every keepInterval while
// this session has grants or waiting acquires, so that their validity keeps
// moving; pings, which a follower answers alone, no longer move it. An idle
// session costs nothing, and a busy one whose own writes (acquires,
// releases) reach the leader at least once per interval sends no sync: each
// acknowledged write moves the base exactly as a sync sent then would.
func (s *session) keeper() {
	for {
		s.mu.Lock()
		ok := s.id != 0 && s.state == zk.StateHasSession && s.settled && s.lostErr == nil
		busy := len(s.grants) > 0 || s.waiters > 0
		ch := s.changed.Wait()
		wait := s.keepInterval(s.timeout)
		quiet := wait - time.Since(s.leaderSent)
		s.keeperIdle = !(ok && busy) // the default case below: until the next change
		s.mu.Unlock()
		switch {
		case ok && busy && quiet > 0:
			// The session's own writes went through the leader within the
			// interval: their acknowledgements move the base as a sync
			// would. Look again an interval after the newest one.
			wait, ch = quiet, nil
			s.quiet.Add(1)
		case ok && busy:
			if _, err := s.conn.Sync("/"); errors.Is(err, zk.ErrClosing) {
				return
			}
			s.syncs.Add(1)
			ch = nil // sleep the interval, not until the next change
		default:
			wait = time.Minute // idle: woken by the next change
		}
		t := time.NewTimer(wait)
		select {
		case <-s.lost:
			t.Stop()
			return
		case <-s.e.closing:
			t.Stop()
			return
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// addWaiter counts a slow-path acquire of this session (for the keeper).
func (s *session) addWaiter(d int) {
	s.mu.Lock()
	s.waiters += d
	if d > 0 {
		s.changed.Notify()
	}
	s.mu.Unlock()
}

// closeConn closes an abandoned session's connection so that the server
// drops its nodes now. go-zookeeper sends closeSession only while connected;
// a session given up while disconnected would keep its nodes (and block
// every object it touched) until the server expires it. So it waits for
// go-zookeeper's reconnect (which revives the session) and closes then,
// bounded by two session timeouts, after which the server has expired it.
func (s *session) closeConn() {
	s.awaitState(2*s.timeoutBound(), func(st zk.State, settled bool) bool {
		return st == zk.StateHasSession && settled || st == zk.StateExpired
	})
	s.shutConn()
}

// timeoutBound is the longer of the negotiated and the requested session
// timeouts.
func (s *session) timeoutBound() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.timeout, s.e.opts.SessionTimeout)
}

// awaitState waits until done holds for the session's go-zookeeper state
// (and whether it is settled), for at most within, and no longer once the
// engine is closing.
func (s *session) awaitState(within time.Duration, done func(st zk.State, settled bool) bool) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		s.mu.Lock()
		st, settled, ch := s.state, s.settled, s.changed.Wait()
		s.mu.Unlock()
		if done(st, settled) {
			return
		}
		select {
		case <-ch:
		case <-s.e.closing:
			return
		case <-t.C:
			return
		}
	}
}

// testHookBeforeReplace, if set (tests), runs in fail between telling the
// grants and replacing the session: it widens that window.
var testHookBeforeReplace func()

// errSessionShut is the dialer's answer once the session was shut.
var errSessionShut = errors.New("lock: session shut")

// shutConn ends the session for good: go-zookeeper's Close sends
// closeSession (the server deletes the session's nodes at once) and waits
// up to a second for its answer; once the connection has gone (the server
// closes it after answering), or one session timeout after the close (at
// once when the engine is closing: Engine.Close waits for this), the TCP
// connection is closed and no other is dialed. Without that last step a
// closeSession that was lost (a server that answers pings and nothing else:
// a stalled request pipeline, a proxy, the review's swallowing dialer) left
// go-zookeeper's send and receive loops running, for they end only on that
// answer or a connection error: the connection stayed open and pinging, and
// the server kept the given-up session and its nodes, blocking every object
// it touched, for as long as the process lived. Closed, the server expires
// the session one session timeout after its last ping.
func (s *session) shutConn() {
	start, bound := time.Now(), s.timeoutBound()
	s.conn.Close()
	s.awaitState(bound-time.Since(start), func(st zk.State, _ bool) bool {
		return st != zk.StateHasSession && st != zk.StateConnected
	})
	s.tcpMu.Lock()
	s.shut = true
	c := s.tcp
	s.tcpMu.Unlock()
	if c != nil {
		c.Close()
	}
}

type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "go-zookeeper")
}

// get reads the node at path (zk.ErrNoNode when there is none), giving up
// when ctx ends.
func (s *session) get(ctx context.Context, path string) (nodeRead, error) {
	return zcall(ctx, func() (nodeRead, error) {
		d, st, err := s.conn.Get(path)
		return nodeRead{d, st, err}, err
	}, nil)
}

// children lists the node at path, giving up when ctx ends.
func (s *session) children(ctx context.Context, path string) ([]string, error) {
	return zcall(ctx, func() ([]string, error) {
		c, _, err := s.conn.Children(path)
		return c, err
	}, nil)
}
