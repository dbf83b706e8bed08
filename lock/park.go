package lock

import (
	"context"
	"errors"
	"path"
	"time"

	"github.com/go-zookeeper/zk"
)

// Parking (native protocol): see "Local waiters park" in the package doc.

// parkPatience bounds how long a request stays parked: then it queues the
// usual way (a child of its own, watching the holder's). Parking pays off
// for short holds (a turn of W2 is a round trip or two); a long hold costs
// the usual waiter's requests once, and a host whose child is gone is
// found by that waiter's view or watch.
const parkPatience = time.Second

// parkWait is a foreground exclusive request parked behind a holder of
// this engine: nothing of it is in ZooKeeper yet.
type parkWait struct {
	n   *nreq
	out chan parkOutcome // one outcome, sent once the request leaves the queue
}

// parkOutcome is how a parked request left the queue: granted by a release
// multi that created its child (child set), sent on to queue the usual way
// (child "", uncertain false), or with that multi's outcome unknown
// (uncertain: a child and a grant of it may exist).
type parkOutcome struct {
	child     string
	d         nativeData
	st        *zk.Stat // the object node's, as the multi's write left it
	alone     bool     // the multi left no child but the sentinel and ours
	uncertain bool
}

// park parks n behind this engine's exclusive holder of the object when
// it may (see parkAdd) and waits: ok false, it did not park. A parked
// request whose wait ends (cancelled: its context ended, or its session
// was lost) is taken out of the queue, unless a release
// already took it: then its multi is under way, and the request waits
// for the outcome whatever its context says (it knows whether a child of
// its own exists only then).
func (n *nreq) park(ctx context.Context) (o parkOutcome, cancelled, ok bool) {
	if n.shared || n.typ != Foreground || n.delay > 0 || n.tryOnce || n.e.opts.DisableParking {
		return parkOutcome{}, false, false
	}
	w := &parkWait{n: n, out: make(chan parkOutcome, 1)}
	if !n.e.parkAdd(n.name, n.s, w) {
		return parkOutcome{}, false, false
	}
	n.e.parks.Add(1)
	n.e.parkedNow.Add(1)
	defer n.e.parkedNow.Add(-1)
	n.e.waiting.Add(1)
	defer n.e.waiting.Add(-1)
	n.s.addWaiter(1)
	defer n.s.addWaiter(-1)
	patience := time.NewTimer(parkPatience)
	defer patience.Stop()
	select {
	case out := <-w.out:
		return out, false, true
	case <-ctx.Done():
		cancelled = true
	case <-patience.C:
		// The host holds long, or is gone unseen (its child deleted by an
		// operator: named in the data, its grant still reads held, and it
		// may hold for an hour): queue the usual way, watching it
		// (TestReviewParkHostChildDeletedNoHang).
	case <-n.s.lost:
		// Our session is gone, and the host with it: a host that ended
		// between its registration and its first look at its state never
		// ends its hosting (TestReviewParkHostLostOnRegister).
		cancelled = true
	}
	if n.e.parkRemove(n.name, w) {
		return parkOutcome{}, cancelled, true
	}
	// a release took us first: its multi's outcome decides
	return <-w.out, false, true
}

// parkAdd queues w behind the object's parking host, if there is one on
// session s: a holder of this engine, or the request a holder's release
// is handing the lock to.
func (e *Engine) parkAdd(name string, s *session, w *parkWait) bool {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil || st.parkHost == nil {
		return false
	}
	var hs *session
	switch h := st.parkHost.(type) {
	case *Grant:
		hs = h.s
	case *nreq:
		hs = h.s
	}
	if hs != s {
		return false
	}
	st.parked = append(st.parked, w)
	return true
}

// parkRemove takes w out of the queue: false if a release took it first.
func (e *Engine) parkRemove(name string, w *parkWait) bool {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		return false
	}
	for i, x := range st.parked {
		if x == w {
			st.parked = append(st.parked[:i:i], st.parked[i+1:]...)
			return true
		}
	}
	return false
}

// parkHostSet makes g, the exclusive native grant of n, the object's
// parking host: if there is none, or n was the host while its grant was
// on the way (a release took n from the queue, or named it). A host that
// ended meanwhile sends the queue on (parkEnd).
func (e *Engine) parkHostSet(name string, g *Grant, n *nreq) {
	e.objMu.Lock()
	n.parkGrant = g
	st := e.objs[name]
	set := st != nil && (st.parkHost == nil || st.parkHost == n)
	if set {
		st.parkHost = g
	}
	e.objMu.Unlock()
	if set && g.over() {
		e.parkEnd(name, g)
	}
}

// parkFailed records that n ended without a grant: the queue parked
// behind it, if any, queues the usual way.
func (e *Engine) parkFailed(name string, n *nreq) {
	e.objMu.Lock()
	n.parkFail = true
	e.objMu.Unlock()
	e.parkEnd(name, n)
}

// parkMove hands the queue parked behind g to n, a waiter of this engine
// that g's release multi named: n hosts it from here. n may have found
// its grant (its watch fired before our multi's answer came) or ended
// already: then its grant hosts the queue, or the queue is sent on.
func (e *Engine) parkMove(name string, g *Grant, n *nreq) {
	e.objMu.Lock()
	st := e.objs[name]
	if st == nil || st.parkHost != g {
		e.objMu.Unlock()
		return
	}
	pg, failed := n.parkGrant, n.parkFail
	switch {
	case failed:
	case pg != nil:
		st.parkHost = pg
	default:
		st.parkHost = n
	}
	e.objMu.Unlock()
	switch {
	case failed:
		e.parkEnd(name, g)
	case pg != nil && pg.over():
		e.parkEnd(name, pg)
	}
}

// parkTake is a releasing host's: the first parked request, which becomes
// the host (the one its multi grants), or nil (nobody parked: the host is
// gone).
func (e *Engine) parkTake(name string, g *Grant) *parkWait {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil || st.parkHost != g {
		return nil
	}
	if len(st.parked) == 0 {
		st.parkHost = nil
		return nil
	}
	w := st.parked[0]
	st.parked[0] = nil
	st.parked = st.parked[1:]
	st.parkHost = w.n
	return w
}

// parkEnd ends host's hosting: every request parked behind it queues the
// usual way.
func (e *Engine) parkEnd(name string, host any) {
	e.objMu.Lock()
	st := e.objs[name]
	if st == nil || st.parkHost != host {
		e.objMu.Unlock()
		return
	}
	ws := st.parked
	st.parkHost, st.parked = nil, nil
	e.objMu.Unlock()
	for _, w := range ws {
		w.out <- parkOutcome{}
	}
}

// parkOps is a release multi that grants the lock to w, parked behind g:
// our child deleted, the holders rewritten to name w (guarded by the
// version g saw), w's child created, the sentinel checked. The data is
// written last, so that its stat counts the children the multi left.
func (g *Grant) parkOps(w *parkWait, nd nativeData, version int32) []any {
	n := w.n
	return []any{
		&zk.DeleteRequest{Path: g.objPath + "/" + g.node, Version: -1},
		&zk.CreateRequest{Path: n.objPath + "/" + n.e.nativePrefix(n.typ, false, n.reqID), Data: n.data, Acl: n.e.acl, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: g.objPath, Data: nd.marshal(), Version: version},
		&zk.CheckVersionRequest{Path: sentinelMark(g.objPath), Version: -1},
	}
}

// parkGranted reports a parked release multi's success to w.
func parkGranted(w *parkWait, nd nativeData, res []zk.MultiResponse) {
	st := res[2].Stat
	w.out <- parkOutcome{child: path.Base(res[1].String), d: nd, st: st, alone: st.NumChildren == 2}
}

// grantedParked is the grant a release multi made for a parked request.
// Alone (the sentinel and our child were the object's only children), it
// hosts the requests still parked, and predicts the next sequence number
// like a fast grant. Otherwise someone queued the usual way meanwhile:
// they come first (the multi may have passed one of them, once), so the
// parked requests queue too, and the grant lists before it is reported:
// its release names whom it passed (TestReviewParkRemotePassedTwice), and
// a plugin node fails the request (TestReviewParkForeignNode).
func (n *nreq) grantedParked(ctx context.Context, o parkOutcome) (*Grant, error) {
	n.node, n.seq, n.created = o.child, nativeSeq(o.child), true
	n.objCzxid = o.st.Czxid
	if ctx.Err() != nil { // gave up while its grant was on the way: give it back
		return nil, n.fail(ctx, ctx.Err())
	}
	if o.alone {
		return n.granted(ctx, o.st.Mzxid, o.st, o.d, nil, n.seq+1)
	}
	n.e.parkEnd(n.name, n)
	n.waited = true
	// Someone else is there: learn who before the grant is reported. A
	// plugin node fails the request (never a grant beside one), and the
	// waiters it passed are named by its release: a request parking
	// behind it meanwhile passes nobody a second time (a release that
	// knows of nobody and has requests parked grants them without
	// listing).
	v, err := n.readAfter(ctx, o.d, o.st)
	switch {
	case ctx.Err() != nil: // gave up meanwhile: give it back
		return nil, n.fail(ctx, ctx.Err())
	case errors.Is(err, ErrForeignNode):
		return nil, n.fail(ctx, err)
	case err != nil: // unknown yet: the grant learns (learnNative)
		return n.granted(ctx, o.st.Mzxid, o.st, o.d, nil, -1)
	case !v.holds(n.reqID): // taken away since (an operator): give back, queue
		n.uncertain = true
		return n.slow(ctx)
	}
	return n.granted(ctx, o.st.Mzxid, v.st, v.d, n.after(v), -1)
}

// parkWaiting reports whether requests are parked behind g.
func (e *Engine) parkWaiting(name string, g *Grant) bool {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	return st != nil && st.parkHost == g && len(st.parked) > 0
}

// parkedOn counts the requests parked on the object (by its escaped name).
func (e *Engine) parkedOn(name string) int {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil {
		return len(st.parked)
	}
	return 0
}
