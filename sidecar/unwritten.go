package sidecar

import "context"

// A grant whose answer cannot be written reaches nobody: a caller that
// gave up just as it was granted — its own timeout fired, it was killed —
// closed its connection first, and the lease would hold the object for its
// whole length with nobody knowing of it. So the connection notes the grant
// its next answer carries (noteGrant: a new lease, or a re-entry's hold),
// and gives it back (leaseTable.release: the lease, or that one hold) when
// the write of that answer fails (EPIPE, or any error: not all of it went
// out), on every path: the lean one, net/http's, a detached acquire's.
// Once the answer's first write went out, nothing written after it can give
// the grant back: the note ends at the next write.
//
// What it does not do: give back a grant whose answer was written and then
// never read. A unix socket closed with bytes unread in it tells its peer
// so (the next read fails with ECONNRESET instead of EOF), but not which
// bytes: a caller that decoded its lease and closed without reading the
// answer's last byte (Go's json.Decoder leaves the trailing newline) looks
// the same as one that read nothing, and giving back a lease its caller
// holds is two holders. Such a lease ends when it expires (lease_ms) or its
// bound caller exits; TestWrittenGrantKept.

// connKey carries a socket connection (*peerConn) in its context.
type connKey struct{}

// grantNote is a grant a connection's answer carries: the lease, and
// whether that answer's first write went out (written).
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
// first write of the grant's answer (failed: the caller cannot have it), or
// a later one (the note ends).
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

// giveBack releases what an answer not written granted: the lease, or the hold
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
