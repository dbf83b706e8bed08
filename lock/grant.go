package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Grant is a held lock. Its methods are safe for concurrent use.
type Grant struct {
	e          *Engine
	s          *session
	object     string
	name       string
	typ        Type
	info       string
	reqID      string
	node       string
	seq        int64
	objPath    string
	plPath     string
	token      int64
	objVersion int32 // the object node's data version our grant set: identifies our privateLock
	onSignal   func(Signal)
	acquiredAt time.Time
	waited     time.Duration
	next       int64 // fast-path prediction to store after release; -1 none
	objCzxid   int64 // the object node the prediction belongs to
	shared     bool  // a shared (read) grant: native protocol only
	native     *nativeGrant

	mu         sync.Mutex
	plVersion  int32    // privateLock's data version as last seen: 1, more after signals
	signal     *Signal  // the last signal seen
	asks       []Signal // the standing asks seen (Engine.Ask)
	state      State    // Held while not finished; Lost or Released when done
	cause      error
	releasing  bool
	relFailed  chan struct{}   // closed when a release under way fails and the grant stays held (releaseUnderWay)
	armLate    bool            // the holder watch came due during a release: armed if it fails (releaseFailed)
	abandoned  bool            // ended by Abandon: leaves no fast-path prediction (its end is a vanish)
	relVersion int32           // the object node's data version our release record set; -1 unknown (lock-delay: see request.acquire)
	ctx        context.Context // cancelled, with the cause, when the grant ends
	cancel     context.CancelCauseFunc
	armTimer   *time.Timer // arms the holder watch after HolderWatchDelay
}

// grantRegisteredHook, when set (tests only), runs in grant just after
// the grant is registered in its session.
var grantRegisteredHook atomic.Pointer[func(*session)]

// grant reports the request granted. The session may have ended while the
// grant multi was answered: then nothing is reported held (the session's
// nodes die with it) and the acquire fails.
func (r *request) grant(ctx context.Context, node string, seq int64, st *zk.Stat, objVersion int32, next int64) (*Grant, error) {
	now := time.Now()
	g := &Grant{
		e: r.e, s: r.s, object: r.object, name: r.name, typ: r.typ, info: r.info, reqID: r.reqID,
		node: node, seq: seq, objPath: r.objPath, plPath: r.plPath,
		token: st.Czxid, objVersion: objVersion, acquiredAt: now, waited: now.Sub(r.start), next: next,
		objCzxid: r.objCzxid, plVersion: st.Version, onSignal: r.onSignal, relVersion: -1,
		native: r.natGrant, shared: r.shared,
	}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	if err := r.s.register(g); err != nil {
		// The session ended, or the grant came with no validity left:
		// never report it held.
		g.cancel(err)
		if !errors.Is(err, errNoValidity) {
			r.node = "" // goes with the session
		} else {
			r.s.addCleanup(cleanup{kind: cleanPL, objPath: r.objPath, objVersion: objVersion, token: g.token, noMark: r.guard < 0})
		}
		return nil, r.fail(ctx, err)
	}
	r.registered = true // from here the grant's finish does objLeave
	if f := grantRegisteredHook.Load(); f != nil {
		(*f)(r.s)
	}
	r.e.held.Add(1)
	if r.e.log.Enabled(ctx, slog.LevelDebug) { // the attributes allocate: only when shown
		r.e.log.Debug("lock granted", "object", r.object, "type", r.typ, "token", g.token, "node", node, "waited", g.waited)
	}
	// No goroutine per grant until the holder watch is due: short critical
	// sections cost a timer only.
	g.mu.Lock()
	lost := g.state != Held
	if !lost {
		g.armTimer = time.AfterFunc(r.e.opts.HolderWatchDelay, g.arm)
	}
	g.mu.Unlock()
	if lost { // lost (session) between register and here: not reported held
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, g.Err())
	}
	return g, nil
}

// arm starts the holder watch, unless the grant ended meanwhile. Due while
// the grant's release is under way, it is left to that release: armed if
// the release fails and leaves the grant held (releaseFailed).
func (g *Grant) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armLocked()
}

// armLocked is arm with g.mu held.
func (g *Grant) armLocked() {
	if g.state != Held {
		return
	}
	if g.releasing {
		g.armLate = true
		return
	}
	select {
	case <-g.e.closing:
		return
	default:
	}
	if g.native != nil {
		if !g.e.track(g.watchNative) {
			return // closed: Close ends the grant
		}
		if !g.native.learning && len(g.native.next) == 0 {
			// Uncontended, and held long enough for someone to queue:
			// follow arrivals too, so that the release can name the next
			// holder in its write (one write and one read per handoff)
			// instead of leaving the object free to the waiter's listing
			// and take (two writes and two reads).
			g.native.learning, g.native.late = true, true
			g.e.track(g.learnNative)
		}
		return
	}
	g.e.track(g.watch)
}

// Object returns the object name. Token returns the fencing token: the
// creation zxid of privateLock, greater than every earlier grant's token for
// the object. Node returns our child's name ("A-0000000007").
func (g *Grant) Object() string { return g.object }

// Token returns the fencing token; see Object.
func (g *Grant) Token() int64 { return g.token }

// Node returns the name of the grant's sequential node.
func (g *Grant) Node() string { return g.node }

// Shared reports whether the grant is a shared (read) lock.
func (g *Grant) Shared() bool { return g.shared }

// Type returns the grant's type.
func (g *Grant) Type() Type { return g.typ }

// Info returns the caller-supplied info.
func (g *Grant) Info() string { return g.info }

// RequestID returns the id recorded in the grant's nodes.
func (g *Grant) RequestID() string { return g.reqID }

// AcquiredAt returns when the grant was made (local clock, monotonic).
func (g *Grant) AcquiredAt() time.Time { return g.acquiredAt }

// Waited returns how long the acquire took.
func (g *Grant) Waited() time.Duration { return g.waited }

// Done is closed when the grant ends: released, or lost (see Err).
func (g *Grant) Done() <-chan struct{} { return g.ctx.Done() }

// Context is cancelled when the grant ends; its cause is the grant's Err,
// or context.Canceled after Release. It suits context.AfterFunc.
func (g *Grant) Context() context.Context { return g.ctx }

// Err returns nil while the grant lasts, nil after Release, or an error
// wrapping ErrLockLost and its cause once lost.
func (g *Grant) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cause
}

// State returns Held, Suspect (session disconnected: valid until
// ValidUntil), Lost or Released.
func (g *Grant) State() State {
	g.mu.Lock()
	st := g.state
	g.mu.Unlock()
	if st != Held {
		return st
	}
	if time.Now().After(g.s.deadline()) {
		return Lost // the monitor is about to say so
	}
	if !g.s.connected() {
		return Suspect
	}
	return Held
}

// ValidUntil returns the instant (monotonic) until which the grant is valid
// unless it is lost earlier: the session deadline. It does not move forward
// while the session is disconnected. Zero once the grant has ended.
func (g *Grant) ValidUntil() time.Time {
	g.mu.Lock()
	st := g.state
	g.mu.Unlock()
	if st != Held {
		return time.Time{}
	}
	return g.s.deadline()
}

// finish ends the grant once.
func (g *Grant) finish(st State, cause error) bool {
	g.mu.Lock()
	if g.state != Held {
		g.mu.Unlock()
		return false
	}
	g.state, g.cause = st, cause
	if g.armTimer != nil {
		g.armTimer.Stop()
	}
	abandoned, relVersion := g.abandoned, g.relVersion
	g.mu.Unlock()
	if g.native != nil {
		g.e.natHeld.CompareAndDelete(g.reqID, g)
		g.e.parkEnd(g.name, g)
	}
	g.cancel(cause)
	g.s.unregister(g)
	g.e.held.Add(-1)
	next := int64(-1)
	if st == Released && !abandoned { // after Abandon, a later acquire must look at how it ended
		next = g.next
	}
	g.e.objLeave(g.name, next, g.s.gen, g.objCzxid, relVersion)
	g.s.own.leave(g.objPath, g.reqID) // its nodes are garbage from here (see owners)
	if st == Lost {
		g.e.log.Warn("lock lost", "object", g.object, "token", g.token, "node", g.node, "cause", cause)
	}
	return true
}

func (g *Grant) lose(cause error) {
	if g.finish(Lost, fmt.Errorf("%w: %w", ErrLockLost, cause)) {
		// our child still blocks the queue while the session lives;
		// privateLock, if still ours, too
		c := g.releaseCleanup()
		c.lost = true
		g.s.addCleanup(c)
	}
}

func (g *Grant) releaseCleanup() cleanup {
	if g.native != nil {
		return cleanup{kind: cleanNative, objPath: g.objPath, reqID: g.reqID, token: g.token}
	}
	return cleanup{kind: cleanRelease, objPath: g.objPath, node: g.node, objVersion: g.objVersion, token: g.token, reqID: g.reqID}
}

// endCleanup is releaseCleanup for Release (mark) or Abandon.
func (g *Grant) endCleanup(mark bool) cleanup {
	c := g.releaseCleanup()
	c.lost = !mark
	return c
}

// watch follows privateLock while the grant lasts: deletion by anyone else,
// or the session's end, loses the grant.
func (g *Grant) watch() {
	for !g.over() {
		data, st, ev, err := g.s.conn.GetW(g.plPath)
		g.e.watchReads.Add(1)
		if err == nil && st.Czxid == g.token {
			g.noteData(data, st.Version)
		}
		switch {
		case err == nil && st.Czxid != g.token:
			// (after our own release the next holder's is expected)
			if g.goneOnRead(errors.New("privateLock was replaced by another holder's")) {
				continue
			}
			return
		case errors.Is(err, zk.ErrNoNode):
			if g.goneOnRead(errors.New("privateLock was deleted by someone else")) {
				continue
			}
			return
		case err != nil:
			if !g.awaitSession(err) {
				return
			}
			continue
		}
		select {
		case <-g.ctx.Done(): // over
		case <-g.s.lost: // over
		case e := <-ev:
			if e.Type == zk.EventNodeDeleted && !g.isReleasing() {
				g.lose(errors.New("privateLock was deleted by someone else"))
				return
			}
			if !g.heldAfterRelease() {
				return
			}
		}
	}
}

// releaseUnderWay returns, while the grant's release is under way, a
// channel closed if that release fails and leaves the grant held (a
// release that ends the grant cancels g.ctx instead); nil otherwise.
func (g *Grant) releaseUnderWay() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.releasing || g.state != Held {
		return nil
	}
	if g.relFailed == nil {
		g.relFailed = make(chan struct{})
	}
	return g.relFailed
}

// releaseFailed ends a release that left the grant held (g.mu held): a
// holder watch waiting for it reads again, one that came due during it is
// armed now.
func (g *Grant) releaseFailed() {
	g.releasing = false
	if g.relFailed != nil {
		close(g.relFailed)
		g.relFailed = nil
	}
	if g.armLate {
		g.armLate = false
		g.armLocked()
	}
}

// awaitRelease is for a holder watch whose event came while the grant's
// release is under way: most often that release's own write, whose event
// the server sends before its answer. Reading the node again then would
// be one read per release for nothing: while a release is under way no
// read loses the grant (the release's outcome decides, and the release
// reads for itself when its guard fails). So it waits for the outcome; the
// watch reads again only if the grant is still held.
func (g *Grant) awaitRelease() {
	ch := g.releaseUnderWay()
	if ch == nil {
		return
	}
	select {
	case <-g.ctx.Done():
	case <-g.s.lost:
	case <-ch:
	}
}

// goneOnRead is for a holder watch whose read found the grant gone: lost
// with cause, unless the grant's release is under way, which decides (the
// next holder's node is expected after it). It reports whether the watch
// reads again: only when that release failed and left the grant held.
func (g *Grant) goneOnRead(cause error) (readAgain bool) {
	if g.isReleasing() {
		return g.heldAfterRelease()
	}
	g.lose(cause)
	return false
}

// heldAfterRelease waits for the outcome of a release under way, if any
// (awaitRelease), and reports whether the grant is still held: the holder
// watch reads again only then. Its state, not only its context: a release
// marks the grant Released before it cancels the context (finish), and
// the watch woken by that release's event in between would read for
// nothing. A read that found the grant gone while its release is under
// way waits the same way: the release decides, but it may fail and leave
// the grant held, and the watch must go on then.
func (g *Grant) heldAfterRelease() bool {
	g.awaitRelease()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state == Held
}

// awaitSession handles a holder watch's failed read: the engine closing
// loses the grant (false: stop watching); otherwise it waits for the
// session to come back or end (true: read again).
func (g *Grant) awaitSession(err error) bool {
	if errors.Is(err, zk.ErrClosing) {
		g.lose(ErrClosed)
		return false
	}
	ctx, cancel := context.WithCancel(g.ctx)
	stop := context.AfterFunc(g.e.ctx, cancel)
	_ = g.s.waitConnected(ctx)
	stop()
	cancel()
	return true
}

// over reports whether the grant has ended or its session is lost (then it
// loses the grant), for watch.
func (g *Grant) over() bool {
	select {
	case <-g.ctx.Done():
		return true
	case <-g.s.lost:
		g.lose(g.s.lostCause())
		return true
	default:
		return false
	}
}

// noteData records privateLock's version and delivers a new signal, each
// new standing ask that is not that signal (Ask leaves a revocation in
// Signal), and a KindWithdrawn signal for each standing ask seen before
// that is gone.
func (g *Grant) noteData(data []byte, version int32) {
	var d nodeData
	_ = json.Unmarshal(data, &d)
	g.mu.Lock()
	g.plVersion = version
	var fresh *Signal
	if d.Signal != nil && (g.signal == nil || *d.Signal != *g.signal) {
		sig := *d.Signal
		g.signal, fresh = &sig, &sig
	}
	var gone, added []Signal
	for _, a := range d.Asks { // an ask not in Signal: written over a revocation, or coalesced
		if !hasAsk(g.asks, a.ID) && (fresh == nil || fresh.ID != a.ID) && (g.signal == nil || g.signal.ID != a.ID) {
			added = append(added, a)
		}
	}
	for _, a := range g.asks {
		if !hasAsk(d.Asks, a.ID) {
			gone = append(gone, Signal{Kind: KindWithdrawn, ID: a.ID, From: a.From, Who: a.Who, Reason: a.Reason})
		}
	}
	g.asks = d.Asks
	held := g.state == Held
	g.mu.Unlock()
	if !held || g.onSignal == nil && fresh == nil && len(added) == 0 {
		return
	}
	if fresh != nil {
		g.e.log.Info("signal for a held lock", "object", g.object, "token", g.token, "kind", fresh.Kind, "from", fresh.From, "reason", fresh.Reason)
		if g.onSignal != nil {
			g.onSignal(*fresh)
		}
	}
	for _, a := range added {
		g.e.log.Info("signal for a held lock", "object", g.object, "token", g.token, "kind", a.Kind, "from", a.From, "reason", a.Reason)
		if g.onSignal != nil {
			g.onSignal(a)
		}
	}
	for _, w := range gone {
		g.e.log.Info("standing ask withdrawn", "object", g.object, "token", g.token, "from", w.From, "reason", w.Reason)
		if g.onSignal != nil {
			g.onSignal(w)
		}
	}
}

func hasAsk(asks []Signal, id string) bool {
	for _, a := range asks {
		if a.ID == id {
			return true
		}
	}
	return false
}

// LastSignal returns the last Signal written to this grant's privateLock, if
// any (see Engine.Signal).
func (g *Grant) LastSignal() (Signal, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.signal == nil {
		return Signal{}, false
	}
	return *g.signal, true
}

// Asks returns the standing asks (Engine.Ask) on this grant's privateLock
// not withdrawn, as last seen by its holder watch.
func (g *Grant) Asks() []Signal {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Signal(nil), g.asks...)
}

// Standing reports whether sig, a Signal this grant received, still
// stands: an ask (sig.ID set) not withdrawn, or any other signal.
func (g *Grant) Standing(sig Signal) bool {
	if sig.ID == "" {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return hasAsk(g.asks, sig.ID)
}

func (g *Grant) isReleasing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.releasing || g.state != Held
}

// Release deletes the grant's node and privateLock in one multi that applies
// only if privateLock is still this grant's (see cleanup). While
// disconnected, or with ctx already done, it returns nil and the deletion
// completes after the reconnect (or with the session). It returns ErrNoNode
// for a grant already released and an error wrapping ErrLockLost for a grant
// lost before Release.
func (g *Grant) Release(ctx context.Context) error { return g.end(ctx, true) }

// Abandon ends the grant as Release does, but records no release: a waiter
// with a lock-delay treats the object as if its holder had vanished (see
// "Lock-delay"). For grants that end without their holder's release: a
// lease that expired, a holder process that exited, a revocation.
func (g *Grant) Abandon(ctx context.Context) error { return g.end(ctx, false) }

// end is Release (mark: record the release in the object node) or Abandon.
func (g *Grant) end(ctx context.Context, mark bool) error {
	g.mu.Lock()
	switch g.state {
	case Released:
		g.mu.Unlock()
		return ErrNoNode
	case Lost:
		cause := g.cause
		g.mu.Unlock()
		return cause
	}
	if g.releasing {
		g.mu.Unlock()
		return ErrNoNode
	}
	g.releasing, g.abandoned = true, !mark
	g.mu.Unlock()
	if g.s.isLost() {
		g.lose(g.s.lostCause())
		return g.Err()
	}
	if ctx.Err() != nil { // nothing sent: the session completes it
		g.s.addCleanup(g.endCleanup(mark))
		g.finish(Released, nil)
		return nil
	}
	if g.native != nil {
		return g.endNative(ctx, mark)
	}
	if mark { // a local waiter known to be first: granted in our release multi (handoff.go)
		if h := g.claimSuccessor(); h != nil && g.handOff(ctx, h) {
			return nil
		}
	}
	g.mu.Lock()
	plv := g.plVersion
	g.mu.Unlock()
	res, err := zmulti(ctx, g.s, releaseOps(g.objPath, g.node, g.objVersion, plv, g.token, mark), func(_ []zk.MultiResponse, err error) {
		if err != nil && (isConnErr(err) || notSent(err) || gone(err)) {
			g.s.addCleanup(g.endCleanup(mark))
		}
	})
	switch {
	case err == nil:
		g.e.noteGone(g.name, g.node) // before finish: the object's state lives while our acquire is active
		if mark && len(res) > 0 && res[0].Stat != nil {
			g.mu.Lock()
			g.relVersion = res[0].Stat.Version
			g.mu.Unlock()
		}
		g.finish(Released, nil)
		if g.seq >= seqDrain { // renew the object node before its counter wraps
			_ = g.s.conn.Delete(g.objPath, -1)
		}
		return nil
	case gone(err):
		// privateLock is not ours any more, carries a signal we have not
		// seen yet, or our node is gone: find out which, delete only what
		// is ours.
		_, st, gerr := g.s.conn.Get(g.plPath)
		if gerr == nil && st.Czxid == g.token && st.EphemeralOwner == g.s.sessionID() {
			// privateLock is ours (at a newer version, or our node was
			// deleted by someone else)
			if _, err := g.s.conn.Multi(releaseOps(g.objPath, g.node, g.objVersion, st.Version, g.token, mark)...); err == nil {
				g.finish(Released, nil)
				return nil
			}
			if err := g.s.deleteOwnPL(g.objPath, g.objVersion, g.token, mark); err == nil {
				g.s.addCleanup(cleanup{kind: cleanChild, objPath: g.objPath, node: g.node, reqID: g.reqID})
				g.finish(Released, nil)
				return nil
			}
		}
		g.lose(fmt.Errorf("release found privateLock not ours: %w", err))
		return g.Err()
	case isConnErr(err), notSent(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// completes in the background: cleanup queued by the orphan
		// handler when ctx ended first, else here
		if !endedFirst(ctx, err) {
			g.s.addCleanup(g.endCleanup(mark))
		}
		g.finish(Released, nil)
		return nil
	}
	g.mu.Lock()
	g.releaseFailed()
	g.mu.Unlock()
	return fmt.Errorf("lock: release %q: %w", g.object, err)
}

// LiveAsks returns the standing asks (Asks) whose requester still waits for
// the object: a node under the object is of its request (Signal.Req, the
// requester's AcquireOptions.RequestID), or, for an ask that names no
// request (an earlier Baton's), of its session (Signal.Session). An ask
// whose requester gave up or died without withdrawing it — its withdraw
// failed, its sidecar was killed, its session lost — has no node of its
// request, and is left out, so that nobody takes a holder for a requester
// that is gone (the session alone would keep it live while any node of
// that session is there: the holder's own, for a requester on the holder's
// sidecar); a requester whose session was lost between its ask and its
// queueing waits in line in the next session with its request's id, and
// counts. Asks with neither, and all of them when the object cannot be
// read or has more than 1,000 children, count as live: the conservative
// answer is the one before this check.
func (g *Grant) LiveAsks(ctx context.Context) []Signal {
	asks := g.Asks()
	need := false
	for _, a := range asks {
		need = need || a.Session != 0 || a.Req != ""
	}
	if !need {
		return asks
	}
	kids, err := zcall(ctx, func() ([]string, error) {
		c, _, err := g.s.conn.Children(g.objPath)
		return c, err
	}, nil)
	if err != nil || len(kids) > 1000 {
		return asks
	}
	queued, reqs := map[int64]bool{}, map[string]bool{}
	for _, k := range kids {
		if k == privateLock {
			continue
		}
		type node struct {
			data []byte
			st   *zk.Stat
		}
		n, err := zcall(ctx, func() (node, error) {
			d, st, err := g.s.conn.Get(g.objPath + "/" + k)
			return node{d, st}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			continue // gone since the listing
		}
		if err != nil {
			return asks
		}
		queued[n.st.EphemeralOwner] = true
		if r := reqOf(n.data); r != "" {
			reqs[r] = true
		}
	}
	live := asks[:0:0]
	for _, a := range asks {
		if a.Req != "" && reqs[a.Req] || a.Req == "" && (a.Session == 0 || queued[a.Session]) {
			live = append(live, a)
		}
	}
	return live
}
