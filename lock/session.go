package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// session is one ZooKeeper session (one zk.Conn). It tracks the validity
// deadline from acknowledged requests and is declared lost once, after which
// the engine replaces it; a lost session is never used for a grant again.
type session struct {
	e    *Engine
	gen  uint64
	conn *zk.Conn
	log  *slog.Logger

	mu        sync.Mutex
	id        int64         // established session id, 0 before the first handshake
	timeout   time.Duration // negotiated
	lastAck   time.Time     // send time of the last acknowledged request
	state     zk.State
	changed   chan struct{} // closed and replaced on every state or ack change
	lostErr   error
	cleanups  []cleanup
	cleanWake chan struct{}

	grants    map[*Grant]struct{} // held grants, ended when the session is lost
	lost      chan struct{}       // closed when the session is declared lost
	closeOnce sync.Once
	pending   atomic.Int64 // cleanups not yet done (metric)
}

type cleanup struct {
	path    string
	version int32 // -1: any
}

func newSession(e *Engine, gen uint64) (*session, error) {
	s := &session{
		e:         e,
		gen:       gen,
		log:       e.log.With("session_gen", gen),
		changed:   make(chan struct{}),
		lost:      make(chan struct{}),
		cleanWake: make(chan struct{}, 1),
		state:     zk.StateDisconnected,
		grants:    make(map[*Grant]struct{}),
	}
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := e.opts.Dialer(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &trackedConn{Conn: c, sink: s}, nil
	}
	conn, _, err := zk.Connect(e.servers, e.opts.SessionTimeout,
		zk.WithDialer(dialer),
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(zkLogger{e.log}),
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
	e.wg.Go(s.monitor)
	e.wg.Go(s.cleaner)
	return s, nil
}

// notifyLocked wakes everyone waiting on a change. s.mu must be held.
func (s *session) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *session) handshake(id int64, timeout time.Duration, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == 0 || timeout <= 0 {
		s.notifyLocked()
		go s.fail(fmt.Errorf("%w: expired by the server", ErrSessionLost))
		return
	}
	if s.id != 0 && s.id != id {
		s.notifyLocked()
		go s.fail(fmt.Errorf("%w: replaced by session 0x%x", ErrSessionLost, id))
		return
	}
	if s.id == 0 {
		s.log.Info("zookeeper session established", "session", fmt.Sprintf("0x%x", id),
			"timeout_requested", s.e.opts.SessionTimeout, "timeout_negotiated", timeout)
	}
	s.id, s.timeout = id, timeout
	if sent.After(s.lastAck) {
		s.lastAck = sent
	}
	s.notifyLocked()
}

func (s *session) acked(sent time.Time) {
	s.mu.Lock()
	if sent.After(s.lastAck) {
		s.lastAck = sent
	}
	s.mu.Unlock()
}

func (s *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	s.state = ev.State
	s.notifyLocked()
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
	if s.id == 0 || s.lastAck.IsZero() {
		return time.Time{}
	}
	return s.lastAck.Add(s.timeout - s.margin(s.timeout))
}

// connected reports whether the session is established and connected.
func (s *session) connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id != 0 && s.state == zk.StateHasSession && s.lostErr == nil
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
		ok := s.id != 0 && s.state == zk.StateHasSession
		ch := s.changed
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
		s.notifyLocked()
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
		s.e.replace(s)
		// Close sends closeSession when connected, so the server drops our
		// ephemeral nodes now; it may block for a while when it cannot.
		go s.conn.Close()
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
		ch := s.changed
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

// register adds a grant to the session; false if the session is lost.
func (s *session) register(g *Grant) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostErr != nil {
		return false
	}
	s.grants[g] = struct{}{}
	return true
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

func (s *session) cleaner() {
	for {
		select {
		case <-s.lost:
			return
		case <-s.e.closing:
			return
		case <-s.cleanWake:
		}
		for {
			s.mu.Lock()
			if len(s.cleanups) == 0 || s.lostErr != nil {
				s.mu.Unlock()
				break
			}
			c := s.cleanups[0]
			s.mu.Unlock()
			err := s.conn.Delete(c.path, c.version)
			switch {
			case err == nil, errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
			case errors.Is(err, zk.ErrClosing):
				return
			case isConnErr(err), notSent(err):
				s.log.Debug("cleanup delete failed; retrying after reconnect", "path", c.path, "err", err)
			default: // e.g. ErrNoAuth: retrying cannot help; the node goes with the session
				s.log.Error("cleanup delete failed; the node stays until the session ends", "path", c.path, "err", err)
			}
			if isConnErr(err) || notSent(err) {
				if s.connected() { // it failed but we are connected again: retry soon
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

type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "go-zookeeper")
}
