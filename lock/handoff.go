package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"
)

// Local handoff on the plugin protocol (see "Local handoff" in the package
// doc): a foreground waiter leaves a plHandoff under the name of the child
// it watches; when that child is a grant of the same engine and session,
// the holder's release, if it can prove the waiter first after it, grants
// it in the release multi and settles the plHandoff with the answer.
type plHandoff struct {
	s     *session
	node  string // the waiter's child, checked in the release multi
	reqID string
	data  []byte // the waiter's node data: its privateLock's

	mu    sync.Mutex
	state hoState
	res   hoResult
	done  chan struct{} // closed when settled
}

type hoState int

const (
	hoOpen   hoState = iota // waiting; a holder may claim it
	hoSent                  // claimed: the release multi is in flight
	hoDone                  // settled: res is the multi's outcome
	hoClosed                // the waiter stopped waiting (before a claim, or gave up during one)
)

// hoResult is a handoff's outcome for the waiter: granted (st is the new
// privateLock's Stat after its setData, objVersion the object node's data
// version the multi set), uncertain (the multi's reply was lost: a
// privateLock of ours may exist), or neither (nothing was applied).
type hoResult struct {
	granted    bool
	uncertain  bool
	st         *zk.Stat
	objVersion int32
}

// handoffHook, when set (tests only), runs in the waiter once it offered
// itself, before it sets its watch ("offered"), and in the holder's release
// just before the handoff multi is sent ("send") and once its answer is in
// hand, before anything is done with it ("answer").
var handoffHook atomic.Pointer[func(stage string)]

func handoffStage(stage string) {
	if f := handoffHook.Load(); f != nil {
		(*f)(stage)
	}
}

// awaitHandoff offers r, which watches the child watched, to a holder of
// this engine. nil: not offered (another waiter already waits on that
// child).
func (r *request) awaitHandoff(watched string) *plHandoff {
	h := &plHandoff{s: r.s, node: r.node, reqID: r.reqID, data: r.data, done: make(chan struct{})}
	r.e.objMu.Lock()
	defer r.e.objMu.Unlock()
	st := r.e.objs[r.name]
	if st == nil || st.behind[watched] != nil {
		return nil
	}
	if st.behind == nil {
		st.behind = make(map[string]*plHandoff)
	}
	st.behind[watched] = h
	return h
}

// leaveHandoff withdraws the offer. A handoff in flight is waited for,
// unless ctx ends first (then the holder gives the grant back); ok false:
// the waiter gave up a handoff that was in flight or granted.
func (r *request) leaveHandoff(ctx context.Context, watched string, h *plHandoff) (hoResult, bool) {
	r.e.objMu.Lock()
	if st := r.e.objs[r.name]; st != nil && st.behind[watched] == h {
		delete(st.behind, watched)
	}
	r.e.objMu.Unlock()
	h.mu.Lock()
	if h.state == hoOpen {
		h.state = hoClosed
	}
	sent := h.state == hoSent
	h.mu.Unlock()
	if sent {
		select {
		case <-h.done:
		case <-ctx.Done():
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state {
	case hoSent: // ctx ended first: the holder gives back what it granted
		h.state = hoClosed
		return hoResult{}, false
	case hoDone:
		if ctx.Err() != nil && h.res.granted { // the caller gave up: not reported
			h.state = hoClosed
			r.s.addCleanup(cleanup{kind: cleanPL, objPath: r.objPath, objVersion: h.res.objVersion, token: h.res.st.Czxid})
			return hoResult{}, false
		}
		return h.res, true
	}
	return hoResult{}, true
}

// takeHandoff withdraws r's offer and acts on the outcome of a handoff to
// it: done with the grant, or with a failure (r gave up during one);
// otherwise r goes on waiting, marked uncertain if the multi's reply was
// lost (a privateLock of ours may exist: recovery looks first).
func (r *request) takeHandoff(ctx context.Context, watched string, h *plHandoff) (*Grant, error, bool) {
	res, ok := r.leaveHandoff(ctx, watched, h)
	switch {
	case !ok:
		return nil, r.fail(ctx, ctx.Err()), true
	case res.granted:
		g, err := r.grant(ctx, r.node, r.seq, res.st, res.objVersion, -1)
		return g, err, true
	case res.uncertain:
		r.noteUncertain(false)
	}
	return nil, nil, false
}

// claimSuccessor returns the waiter to hand g over to in the release
// multi, claimed (hoSent), or nil: the waiter watching g's child, if it is
// foreground, of g's session, and provably first once g's child is gone
// (firstAfter: every child ahead of it in the engine's latest listing is
// g's or one this engine has deleted since; a child created later has a
// higher sequence number and sorts after a foreground one). g must be
// foreground (a background holder ahead of a foreground waiter is there by
// aging), hold privateLock at the version its grant created (no signal,
// ask or revocation written) and be released, not abandoned.
func (g *Grant) claimSuccessor() *plHandoff {
	if g.native != nil || g.typ != Foreground || g.shared {
		return nil
	}
	g.mu.Lock()
	clean := g.plVersion == plVersion && g.signal == nil && len(g.asks) == 0
	g.mu.Unlock()
	if !clean || g.s.isLost() || !g.s.connected() {
		return nil
	}
	if s, err := g.e.current(); err != nil || s != g.s {
		return nil
	}
	g.e.objMu.Lock()
	st := g.e.objs[g.name]
	if st == nil {
		g.e.objMu.Unlock()
		return nil
	}
	h := st.behind[g.node]
	if h == nil || h.s != g.s || !firstAfterLocked(st, g.s.gen, h.node, g.node) {
		g.e.objMu.Unlock()
		return nil
	}
	delete(st.behind, g.node)
	g.e.objMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != hoOpen {
		return nil
	}
	h.state = hoSent
	return h
}

// handOff releases g and grants h in one multi: the object node's data
// set to nil at the version g's grant set (no Baton grant since ours: the
// new grant's mark, as a grant multi writes it), g's privateLock deleted at
// the version its grant created (no signal since), g's child deleted, h's
// child checked, h's privateLock created (ephemeral, this session) and its
// data set (the Stat gives the token: the multi's zxid). done false:
// nothing was applied (a signal, a foreign deletion, the waiter gone): the
// caller releases the ordinary way.
func (g *Grant) handOff(ctx context.Context, h *plHandoff) bool {
	ops := []any{
		&zk.SetDataRequest{Path: g.objPath, Data: nil, Version: g.objVersion},
		&zk.DeleteRequest{Path: g.plPath, Version: plVersion},
		&zk.DeleteRequest{Path: g.objPath + "/" + g.node, Version: -1},
		&zk.CheckVersionRequest{Path: g.objPath + "/" + h.node, Version: -1},
		&zk.CreateRequest{Path: g.plPath, Data: h.data, Acl: g.e.acl, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: g.plPath, Data: h.data, Version: 0},
	}
	type answer struct {
		res []zk.MultiResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		handoffStage("send")
		res, err := g.s.conn.Multi(ops...)
		handoffStage("answer")
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return g.settleHandoff(h, a.res, a.err, false)
	case <-ctx.Done(): // completes in the background, as a release does
		settle := func() {
			a := <-ch
			g.settleHandoff(h, a.res, a.err, true)
		}
		if !g.e.track(settle) {
			go settle() // closing: settled all the same, when the multi is answered or fails
		}
		g.finish(Released, nil)
		return true
	}
}

// settleHandoff ends g and tells h what the multi did. background: the
// release already returned; a multi that applied nothing leaves a cleanup.
func (g *Grant) settleHandoff(h *plHandoff, res []zk.MultiResponse, err error, background bool) bool {
	var r hoResult
	done := true
	switch {
	case err == nil:
		g.e.noteGone(g.name, g.node) // before finish: the object's state lives while our acquire is active
		r = hoResult{granted: true, st: res[5].Stat, objVersion: res[0].Stat.Version}
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrNodeExists):
		// the multi failed as a whole: nothing was applied
		if background {
			g.s.addCleanup(g.endCleanup(true))
		} else {
			done = false
		}
	case notSent(err):
		g.s.addCleanup(g.endCleanup(true))
	default: // a lost connection, or anything else: applied or not
		g.s.addCleanup(g.endCleanup(true)) // reads first: deletes only what is still ours
		r.uncertain = true
	}
	if done {
		g.finish(Released, nil) // before the successor is woken
	}
	h.mu.Lock()
	gaveUp := h.state == hoClosed
	if !gaveUp {
		h.state, h.res = hoDone, r
		close(h.done)
	}
	h.mu.Unlock()
	switch {
	case gaveUp && r.granted: // never reported: give it back (a clean end: the multi was guarded by our grant's version)
		g.s.addCleanup(cleanup{kind: cleanPL, objPath: g.objPath, objVersion: r.objVersion, token: r.st.Czxid})
	case gaveUp && r.uncertain:
		g.s.addCleanup(cleanup{kind: cleanSweep, objPath: g.objPath, reqID: h.reqID})
	case r.granted:
		g.e.local.Add(1)
	}
	if !done {
		g.e.log.Debug("local handoff not applied; releasing", "object", g.object, "err", err)
	}
	return done
}
