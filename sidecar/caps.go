package sidecar

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/rawio"
	"github.com/batonhq/baton/props"
)

// Caps per caller uid (SPEC §7, so that one app cannot starve the others):
// waiting acquires, leases held, long-polls, lock listings and connections,
// each with its key. A refusal is a 429 TooManyRequests naming the cap and
// the key that raises it; nothing was started. The sidecar-wide
// sidecar.max.waiters keeps its 503 TooManyWaiters.

// capKind is one per-uid cap.
type capKind int

const (
	capWaiters capKind = iota
	capLeases
	capPolls
	capLists
	capConns
	numCaps
)

// capInfo: the key of each cap and what it counts.
var capInfo = [numCaps]struct{ key, what string }{
	capWaiters: {"sidecar.max.waiters.per.uid", "waiting acquires"},
	capLeases:  {"sidecar.max.leases.per.uid", "leases"},
	capPolls:   {"sidecar.max.polls.per.uid", "long-polls"},
	capLists:   {"sidecar.max.lists.per.uid", "lock listings in progress"},
	capConns:   {"sidecar.max.connections.per.uid", "open connections"},
}

// keyMaxConns is the sidecar-wide connection cap.
const keyMaxConns = "sidecar.max.connections"

func capLimit(cfg *props.Config, k capKind) int {
	switch k {
	case capWaiters:
		return cfg.MaxWaitersPerUID
	case capLeases:
		return cfg.MaxLeasesPerUID
	case capPolls:
		return cfg.MaxPollsPerUID
	case capLists:
		return cfg.MaxListsPerUID
	}
	return cfg.MaxConnectionsPerUID
}

// uidCaps counts what each uid uses. Its lock guards only its own maps: a
// take and its put pair up, whoever else holds what.
type uidCaps struct {
	cfg func() *props.Config // the caps' limits
	log *slog.Logger

	mu    sync.Mutex
	use   map[uint32]*[numCaps]int
	conns int // all open connections (sidecar.max.connections)
}

func newUIDCaps(cfg func() *props.Config, log *slog.Logger) *uidCaps {
	return &uidCaps{cfg: cfg, log: log, use: map[uint32]*[numCaps]int{}}
}

// take counts one more k for uid if that stays within limit; it returns the
// count before, and whether it was taken. limit ≤ 0 means no cap.
func (u *uidCaps) take(uid uint32, k capKind, limit int) (int, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.use[uid]
	if c == nil {
		c = new([numCaps]int)
		u.use[uid] = c
	}
	n := c[k]
	if limit > 0 && n >= limit {
		if *c == ([numCaps]int{}) {
			delete(u.use, uid)
		}
		return n, false
	}
	c[k]++
	return n, true
}

// put gives back one k of uid.
func (u *uidCaps) put(uid uint32, k capKind) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.use[uid]
	if c == nil || c[k] == 0 {
		return // a bug; never below zero
	}
	c[k]--
	if *c == ([numCaps]int{}) {
		delete(u.use, uid)
	}
}

// tooMany is the 429 of a cap reached.
func tooMany(p peer, k capKind, n, limit int) *httpError {
	ci := capInfo[k]
	e := newError(api.TooManyRequests, "%s has %d %s on this sidecar, the cap (%s = %d); finish some and retry, or raise %s",
		p, n, ci.what, ci.key, limit, ci.key)
	e.Body.Key = ci.key
	return e
}

// takeFor counts one k for the request's caller p, or answers 429. The
// caller must put it back (put(p.uid, k)) when done.
func (u *uidCaps) takeFor(p peer, k capKind) error {
	limit := capLimit(u.cfg(), k)
	n, ok := u.take(p.uid, k, limit)
	if !ok {
		u.log.Info("request refused: per-uid cap reached", "cap", capInfo[k].key, "limit", limit, "caller", p.String())
		return tooMany(p, k, n, limit)
	}
	return nil
}

// Connections: a listener that reads the caller's credentials when it
// accepts a connection, counts it against sidecar.max.connections and
// sidecar.max.connections.per.uid (admins are exempt: an operator can
// always reach a saturated sidecar, e.g. to drain it) and answers a
// connection over a cap with a 429 and closes it.

// capListener wraps the socket's listener.
type capListener struct {
	net.Listener
	s *Server
}

// peerConn is an accepted connection with its caller.
type peerConn struct {
	net.Conn
	io      rawio.IO // Read and Write without waking the runtime's sysmon (internal/rawio)
	p       peer
	counted bool // counted against the caps: given back on Close
	// pre holds bytes the lean path read before handing the connection
	// to net/http (lean.go); read by net/http's goroutine alone after.
	pre  *bufio.Reader
	s    *Server
	once sync.Once
	// note is the grant the connection's next answer carries, until that
	// answer's first write is followed by another (unwritten.go)
	note atomic.Pointer[grantNote]
}

// Read reads what the lean path read ahead first (pre: a connection it
// handed to net/http), then the socket.
func (c *peerConn) Read(p []byte) (int, error) {
	if c.pre != nil {
		if c.pre.Buffered() > 0 {
			return c.pre.Read(p)
		}
		c.pre = nil
	}
	return c.io.Read(p)
}

func (c *peerConn) Write(p []byte) (int, error) {
	n, err := c.io.Write(p)
	if c.note.Load() != nil {
		c.wrote(err)
	}
	return n, err
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.counted {
			c.s.caps.put(c.p.uid, capConns)
			c.s.caps.mu.Lock()
			c.s.caps.conns--
			c.s.caps.mu.Unlock()
		}
	})
	return err
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		pc := &peerConn{Conn: c, io: rawio.New(c), p: peerCred(c), s: l.s}
		if l.s.auth.policy().isAdmin(pc.p) {
			return pc, nil
		}
		if he := l.s.caps.admitConn(pc.p); he != nil {
			go refuseConn(c, he)
			continue
		}
		pc.counted = true
		return pc, nil
	}
}

// admitConn counts a connection of p against the caps, or returns the 429.
func (u *uidCaps) admitConn(p peer) *httpError {
	cfg := u.cfg()
	u.mu.Lock()
	if u.conns >= cfg.MaxConnections {
		n := u.conns
		u.mu.Unlock()
		e := newError(api.TooManyRequests, "the sidecar has %d open connections, the cap (%s = %d); close idle connections and retry, or raise %s",
			n, keyMaxConns, cfg.MaxConnections, keyMaxConns)
		e.Body.Key = keyMaxConns
		u.log.Info("connection refused: cap reached", "cap", keyMaxConns, "limit", cfg.MaxConnections, "caller", p.String())
		return e
	}
	u.conns++
	u.mu.Unlock()
	if err := u.takeFor(p, capConns); err != nil {
		u.mu.Lock()
		u.conns--
		u.mu.Unlock()
		return err.(*httpError)
	}
	return nil
}

// refuseConn answers a connection over a cap with he and closes it, without
// reading its request.
func refuseConn(c net.Conn, he *httpError) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var b []byte
	rec := &bodyRecorder{h: http.Header{}}
	writeJSON(rec, he.Status, he.Body)
	b = rec.b
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"+
		"Connection: close\r\nContent-Length: %s\r\n\r\n%s",
		he.Status, http.StatusText(he.Status), strconv.Itoa(len(b)), b)
	// Read what the caller sent until it closes (or the deadline): closing
	// a unix socket with unread data makes the caller's read fail with
	// ECONNRESET instead of reading this answer.
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}

// bodyRecorder is a ResponseWriter that keeps the body (refuseConn).
type bodyRecorder struct {
	h http.Header
	b []byte
}

func (r *bodyRecorder) Header() http.Header         { return r.h }
func (r *bodyRecorder) WriteHeader(int)             {}
func (r *bodyRecorder) Write(p []byte) (int, error) { r.b = append(r.b, p...); return len(p), nil }
