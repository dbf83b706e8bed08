package sidecar

import (
	"context"
	"errors"
	"syscall"
)

// A grant's answer written is not yet a grant's answer read. A caller that
// gives up just as it is granted — its own timeout fires, it is killed —
// closes its connection with the answer unread, or before it is written,
// and the lease would hold the object for its whole length with nobody
// knowing of it. So the connection notes the grant its latest answer
// carries (noteGrant: a new lease, or a re-entry's hold) and gives it back
// (leaseTable.release: the lease, or that one hold) when the caller cannot
// have read that answer whole:
//
//   - the answer's write fails (the caller closed first: EPIPE, or any
//     error: not all of it went out);
//   - a later read fails with ECONNRESET while that answer is still the last
//     thing written: a unix socket closed with data unread in it makes its
//     peer's next read fail so (Linux's unix_release_sock) instead of EOF,
//     and any byte unread means the last answer's last bytes are.
//
// Anything written after that answer (the answer to a later request,
// net/http's own answers included: OPTIONS *, a 400) ends the note, so an
// unread later answer never gives back a grant the caller had whole. A
// caller that read the answer and then closed reads as EOF: its lease stays.
// Not covered: an answer after which the sidecar closes the connection
// itself (Connection: close, a detached acquire's answer) and is not read.

// connKey carries a socket connection (*peerConn) in its context.
type connKey struct{}

// grantNote is a grant a connection's answer carries: the lease, and
// whether that answer was written whole (written) or not yet.
type grantNote struct {
	l       *lease
	written bool
}

// noteGrant notes l, granted (or re-entered) by the request of ctx, on the
// request's connection: its answer comes next.
func noteGrant(ctx context.Context, l *lease) {
	if c, ok := ctx.Value(connKey{}).(*peerConn); ok {
		c.note.Store(&grantNote{l: l})
	}
}

// wrote follows a write of c (err its error) while a grant is noted: the
// write of the grant's answer (whole: it is the last thing written; failed:
// the caller cannot have it), or a later one (the note ends).
func (c *peerConn) wrote(err error) {
	n := c.note.Load()
	switch {
	case n == nil:
	case n.written:
		c.note.CompareAndSwap(n, nil)
	case err != nil:
		if c.note.CompareAndSwap(n, nil) {
			c.giveBack(n.l, "the caller left as its acquire was granted: its answer could not be written", err)
		}
	default:
		c.note.CompareAndSwap(n, &grantNote{l: n.l, written: true})
	}
}

// readFailed follows a failed read of c while a grant is noted: a reset
// means the caller closed with bytes of the grant's answer unread (or
// before it was written: its write fails).
func (c *peerConn) readFailed(err error) {
	if !errors.Is(err, syscall.ECONNRESET) {
		return
	}
	if n := c.note.Load(); n != nil && c.note.CompareAndSwap(n, nil) {
		c.giveBack(n.l, "the caller closed its connection without reading the answer that granted it", err)
	}
}

// giveBack releases what an unread answer granted: the lease, or the hold
// a re-entry added (an error: it ended meanwhile, nothing to give back).
func (c *peerConn) giveBack(l *lease, why string, err error) {
	res, rerr := c.s.leases.release(context.Background(), l, true)
	switch {
	case rerr != nil:
	case res.Released:
		c.s.log.Info(why+"; lease released", "lease", logID(l.id), "object", l.g.Object(), "err", err)
	default:
		c.s.log.Info(why+"; the hold it added released", "lease", logID(l.id), "object", l.g.Object(), "err", err)
	}
}
