package lock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// request is one Acquire in progress.
type request struct {
	e        *Engine
	s        *session
	object   string
	name     string
	typ      Type
	info     string
	reqID    string
	start    time.Time
	objPath  string
	plPath   string
	prefix   string
	data     []byte
	tryOnce  bool
	onSignal func(Signal)
	// parkKey: the native request this is, which may host requests
	// parked behind its coming grant (park.go); nil otherwise
	parkKey *nreq

	node     string // our child, once created
	seq      int64
	objCzxid int64 // creation zxid of the object node in the last listing
	// uncertain: a create of this request may have been applied without
	// our seeing the reply (connection lost, or the wait ended with it in
	// flight); cleared once recoverOrphans has looked. fail() sweeps.
	uncertain bool
	// uncertainMark: every uncertain grant multi was guarded by a version
	// whose state the request had read, so a privateLock it finds and
	// gives back in recovery may be deleted with a release record (see
	// cleanup.noMark); false: without one.
	uncertainMark bool
	// registered: the grant object was registered with the session; its
	// finish (lost or released) ends the local acquire, not Acquire.
	registered bool
	// listAfter: a listing used by this request must have been sent after
	// this instant (after our child's create was answered, and after the
	// last wake-up).
	listAfter time.Time

	// Lock-delay (see delay.go): delay is this request's; sawPL the
	// creation zxid of the newest privateLock it saw; vanishKey/vanishAt
	// the vanished holder it is waiting out and when it saw the absence;
	// guard, when ≥ 0, the object node's data version the grant multi
	// requires (-1: any).
	delay     time.Duration
	sawPL     int64
	vanishKey int64
	vanishAt  time.Time
	guard     int32

	// Native protocol (native.go): nat marks the request; shared its mode;
	// natGrant the grant's state handed to grant().
	nat      bool
	shared   bool
	natGrant *nativeGrant
}

// grantOps creates privateLock with its data (the setData's Stat carries the
// creation zxid: the token) and bumps the object node's data version, which
// identifies this grant to every later delete of privateLock (see cleanup).
func (r *request) grantOps() []any {
	return []any{
		&zk.CreateRequest{Path: r.plPath, Data: r.data, Acl: r.e.acl, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: r.plPath, Data: r.data, Version: 0},
		&zk.SetDataRequest{Path: r.objPath, Data: nil, Version: r.guard},
	}
}

func (r *request) sweepLater() {
	if r.nat {
		r.s.addCleanup(cleanup{kind: cleanNative, objPath: r.objPath, reqID: r.reqID})
		return
	}
	r.s.addCleanup(cleanup{kind: cleanSweep, objPath: r.objPath, reqID: r.reqID})
}

// run acquires with the request's id live in its session (owned).
func (r *request) run(ctx context.Context, p prediction) (*Grant, error) {
	return r.owned(ctx, func() (*Grant, error) { return r.acquire(ctx, p) })
}

// owned runs acquire with the request's id live in its session (see
// owners) before anything is created (for a parked native request, by
// another request's release), until it fails or its grant ends.
func (r *request) owned(ctx context.Context, acquire func() (*Grant, error)) (*Grant, error) {
	if err := r.s.own.enter(ctx, r.objPath, r.reqID); err != nil {
		return nil, r.fail(ctx, err)
	}
	g, err := acquire()
	if err != nil && !r.registered {
		r.s.own.leave(r.objPath, r.reqID)
	}
	return g, err
}

func (r *request) acquire(ctx context.Context, p prediction) (*Grant, error) {
	// With a lock-delay only a prediction (nobody created anything since our
	// own clean release) skips the check of how the last holder ended.
	// The prediction holds only if nobody created a node since, which a
	// request with a delay cannot wait to find out: its multi also requires
	// the object node's version our release left (a grant since, or a
	// reaped node, fails it with nothing created), so that a stale
	// prediction neither grants by create-then-verify nor gives back a
	// privateLock over another holder's vanish (TestReview2LockDelayStalePrediction).
	if p.seq >= 0 && r.delay > 0 && p.version < 0 {
		p.seq = -1 // version unknown: the slow path checks
	}
	if p.seq >= 0 || !p.contended && r.delay <= 0 {
		if p.seq >= 0 && r.delay > 0 {
			r.guard = p.version
		}
		g, err, done := r.direct(ctx, p)
		r.guard = -1
		if done {
			return g, err
		}
	}
	return r.slow(ctx)
}

// direct tries to be granted with one multi (create our child and
// privateLock) and, unless a prediction proves we are alone, one listing
// after it: "create, then verify". ZooKeeper answers a session's requests in
// order, so the listing shows at least what the multi did; if no child sorts
// ahead of ours then, we hold privateLock and are first in order, exactly
// the plugin's grant condition (a request arriving later waits behind us, as
// it would after the plugin's list-then-create). Otherwise privateLock goes
// back at once (its rightful holder watches it) and we wait in line with the
// child we have. Uncontended: 1 round trip with a prediction, 2 without (the
// plugin's algorithm needs 3). done=false: continue on the slow path (r.node
// may hold our child).
func (r *request) direct(ctx context.Context, p prediction) (*Grant, error, bool) {
	guarded := r.guard >= 0 // the multi overwrites a known clean end (see cleanup.noMark)
	ops := append([]any{
		&zk.CreateRequest{Path: r.objPath + "/" + r.prefix + "-", Data: r.data, Acl: r.e.acl, Flags: zk.FlagEphemeralSequential},
	}, r.grantOps()...)
	var res []zk.MultiResponse
	var err error
	for range 2 {
		res, err = boundedMulti(ctx, r.s, ops,
			func(res []zk.MultiResponse, err error) {
				switch {
				case err == nil: // granted after we gave up: undo
					r.s.addCleanup(
						cleanup{kind: cleanPL, objPath: r.objPath, objVersion: res[3].Stat.Version, token: res[2].Stat.Czxid, noMark: !guarded},
						cleanup{kind: cleanChild, objPath: r.objPath, node: path.Base(res[0].String), reqID: r.reqID})
				case isConnErr(err):
					r.sweepLater()
				}
			})
		if !errors.Is(err, zk.ErrNoNode) {
			break
		}
		// No object node (new, or a reaped container): create it, try once more.
		if _, err := r.e.ensureObject(ctx, r.s, r.objPath); err != nil {
			if retry(err) { // nothing of ours under it: the slow path creates it once reconnected
				return nil, nil, false
			}
			return nil, r.fail(ctx, err), true
		}
	}
	switch {
	case err == nil:
		child := path.Base(res[0].String)
		seq, _ := seqOf(child)
		st, obj := res[2].Stat, res[3].Stat
		if p.seq >= 0 && seq == p.seq && obj.Czxid == p.czxid {
			r.e.observe(func(o Observer) { o.FastPath(true) })
			r.objCzxid = p.czxid
			g, err := r.grant(ctx, child, seq, st, obj.Version, seq+2)
			return g, err, true
		}
		if p.seq >= 0 {
			r.e.observe(func(o Observer) { o.FastPath(false) })
			r.e.log.Debug("fast path off: sequence mismatch or object renewed", "object", r.object, "want", p.seq, "got", seq)
		}
		r.node, r.seq, r.objCzxid, r.listAfter = child, seq, obj.Czxid, time.Now()
		r.s.own.name(r.objPath, r.node, r.reqID, obj.Czxid)
		// Verify: is anyone ahead of us now?
		l, err := r.e.listShared(ctx, r.s, r.name, r.objPath, r.listAfter)
		if err == nil {
			queue := l.queue
			if len(queue) > 0 && queue[0] == child {
				next := int64(-1)
				if len(queue) == 1 && r.e.objAlone(r.name) {
					next = seq + 2 // anchors the prediction: our child's create, then privateLock's
				}
				g, err := r.grant(ctx, child, seq, st, obj.Version, next)
				return g, err, true
			}
			r.e.objContended(r.name)
		}
		// Someone sorts ahead of us (or the listing failed): give
		// privateLock back without granting and wait in line.
		if _, gerr := zcall(context.WithoutCancel(ctx), func() (struct{}, error) {
			return struct{}{}, r.s.giveBackPL(r.objPath, obj.Version, st.Czxid, guarded)
		}, nil); gerr != nil {
			r.s.addCleanup(cleanup{kind: cleanPL, objPath: r.objPath, objVersion: obj.Version, token: st.Czxid, noMark: !guarded})
		}
		if err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			return nil, r.fail(ctx, err), true
		}
		return nil, nil, false
	case errors.Is(err, zk.ErrNodeExists): // privateLock held: nothing was created
		if p.seq >= 0 {
			r.e.observe(func(o Observer) { o.FastPath(false) })
		}
		r.e.objContended(r.name)
		return nil, nil, false
	case errors.Is(err, zk.ErrNoNode): // the object keeps vanishing: the slow path copes
		return nil, nil, false
	case errors.Is(err, zk.ErrBadVersion): // r.guard (lock-delay): a grant since our release; nothing was created
		r.e.objContended(r.name)
		return nil, nil, false
	case isConnErr(err):
		// Applied or not: slow() recovers before anything else (our child
		// is adopted, privateLock given back), retrying after every
		// connection loss; a recovery that cannot finish is swept.
		r.noteUncertain(guarded)
		return nil, nil, false
	default: // including the wait running out with the multi in flight (the orphan handler undoes it)
		return nil, r.fail(ctx, err), true
	}
}

// slow is the plugin's algorithm: create our child, then loop: list, grant if
// first and privateLock is free, else watch what can unblock us.
func (r *request) slow(ctx context.Context) (*Grant, error) {
	r.e.waiting.Add(1)
	defer r.e.waiting.Add(-1)
	r.s.addWaiter(1)
	defer r.s.addWaiter(-1)
	for {
		if r.s.isLost() {
			return nil, r.fail(ctx, r.s.lostCause())
		}
		if r.uncertain {
			// A create of ours may have landed unseen: nothing is created,
			// listed or waited for until recovery has looked.
			if err := r.recoverOrphans(ctx); err != nil {
				if retry(err) {
					if err := r.s.waitConnected(ctx); err != nil {
						return nil, r.fail(ctx, err)
					}
					continue
				}
				return nil, r.fail(ctx, err)
			}
		}
		if r.node == "" {
			if err := r.createChild(ctx); err != nil {
				if retry(err) {
					if err := r.s.waitConnected(ctx); err != nil {
						return nil, r.fail(ctx, err)
					}
					continue
				}
				return nil, r.fail(ctx, err)
			}
		}
		l, err := r.e.listShared(ctx, r.s, r.name, r.objPath, r.listAfter)
		r.listAfter = time.Now() // a request never uses one listing twice
		if err != nil {
			if retry(err) {
				if err := r.s.waitConnected(ctx); err != nil {
					return nil, r.fail(ctx, err)
				}
				continue
			}
			if errors.Is(err, zk.ErrNoNode) { // our node is gone with its parent
				r.node = ""
				continue
			}
			return nil, r.fail(ctx, err)
		}
		r.objCzxid = l.czxid
		queue, locked := l.queue, l.locked
		if locked && r.delay > 0 {
			// Note whose privateLock it is: the plugin's holders leave no
			// release record, so their end counts as a vanish (delay.go).
			if err := r.notePL(ctx); err != nil {
				if retry(err) {
					if err := r.s.waitConnected(ctx); err != nil {
						return nil, r.fail(ctx, err)
					}
					continue
				}
				return nil, r.fail(ctx, err)
			}
		}
		idx := slices.Index(queue, r.node)
		if idx >= 0 { // the audit leaves it unread (the object node's czxid: names repeat in a renewed one)
			r.s.own.name(r.objPath, r.node, r.reqID, l.czxid)
		}
		if idx < 0 { // our node was deleted by someone else: queue again
			r.e.log.Warn("our lock node vanished; queueing again", "object", r.object, "node", r.node)
			r.node = ""
			continue
		}
		if idx == 0 && !locked {
			if r.delay > 0 {
				v, err := r.lockDelay(ctx)
				if err != nil {
					if retry(err) {
						if err := r.s.waitConnected(ctx); err != nil {
							return nil, r.fail(ctx, err)
						}
						continue
					}
					return nil, r.fail(ctx, err)
				}
				if v < 0 {
					continue
				}
				r.guard = v
			}
			g, err := r.takePrivateLock(ctx, len(queue) == 1, false)
			r.guard = -1
			if err != nil {
				return nil, r.fail(ctx, err)
			}
			if g != nil {
				return g, nil
			}
			continue // someone else created privateLock first
		}
		if r.tryOnce {
			if idx == 0 { // first, privateLock there: a native root's sentinel is no holder (one read, on refusal only)
				st, err := zcall(ctx, func() (*zk.Stat, error) {
					ok, st, err := r.s.conn.Exists(r.objPath + "/" + privateLock)
					if err == nil && !ok {
						st = nil
					}
					return st, err
				}, nil)
				if err == nil && st != nil && st.EphemeralOwner == 0 {
					return nil, r.fail(ctx, fmt.Errorf("%w: %s/%s is persistent: a native protocol object under the plugin root %s (this root is zookeeper.lock.protocol=plugin)", ErrForeignNode, r.name, privateLock, r.e.opts.Root))
				}
			}
			return nil, r.fail(ctx, ErrNotFirst)
		}
		target := privateLock
		if idx > 0 {
			target = queue[idx-1]
		}
		// Foreground, watching a child: a holder of this engine may grant
		// us in its release multi and wake us in process (handoff.go).
		// Offered before the watch is set, which the holder's multi may
		// beat (NoNode): its answer is waited for either way.
		var h *plHandoff
		var handed <-chan struct{}
		if target != privateLock && r.typ == Foreground && r.delay <= 0 {
			if h = r.awaitHandoff(target); h != nil {
				handed = h.done
				handoffStage("offered")
			}
		}
		var plCzxid int64
		plPersistent := false
		ev, err := zcall(ctx, func() (<-chan zk.Event, error) {
			_, st, ev, err := r.s.conn.GetW(r.objPath + "/" + target)
			if err == nil && target == privateLock {
				plCzxid = st.Czxid // read only when zcall returned f's answer
				plPersistent = st.EphemeralOwner == 0
			}
			return ev, err
		}, nil)
		if err == nil {
			r.sawPL = max(r.sawPL, plCzxid)
			if plCzxid != 0 && plPersistent {
				return nil, r.fail(ctx, fmt.Errorf("%w: %s/%s is persistent: a native protocol object under the plugin root %s (this root is zookeeper.lock.protocol=plugin)", ErrForeignNode, r.name, privateLock, r.e.opts.Root))
			}
		}
		if err != nil && h != nil {
			if g, err, done := r.takeHandoff(ctx, target, h); done {
				return g, err
			}
			if r.uncertain {
				continue
			}
		}
		if err != nil {
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if retry(err) {
				if err := r.s.waitConnected(ctx); err != nil {
					return nil, r.fail(ctx, err)
				}
				continue
			}
			return nil, r.fail(ctx, err)
		}
		woke := false
		select {
		case <-ev:
			r.listAfter = time.Now()
			woke = true
		case <-handed:
		case <-r.s.lost:
		case <-ctx.Done():
		}
		if h != nil {
			// Our watch fires on the holder's multi before its answer
			// reaches the holder: a handoff in flight is waited for.
			if g, err, done := r.takeHandoff(ctx, target, h); done {
				return g, err
			}
			if r.uncertain { // a privateLock of ours may exist: recover first
				continue
			}
		}
		if ctx.Err() != nil {
			return nil, r.fail(ctx, ctx.Err())
		}
		if !woke {
			continue
		}
		// Foreground shortcut: only a child with a lower sequence number
		// can sort ahead of an A- node, and all of those existed when we
		// listed. So a foreground request that was first (watching
		// privateLock) or second (watching the one node ahead) is first
		// now, and takes privateLock without listing again: one round trip
		// per wake-up instead of two. Its own child is checked in the same
		// multi. A background request must list: foreground nodes arriving
		// later sort ahead of it.
		// Also when the latest listing this engine has shows that every
		// other child ahead of ours is one this engine has since deleted
		// (local handoffs on a long queue: no listing per handoff).
		// Not with a lock-delay: how the holder ended is read before a grant.
		for r.typ == Foreground && r.delay <= 0 && (idx <= 1 || r.e.firstAfter(r.name, r.s.gen, r.node, target)) {
			g, err := r.takePrivateLock(ctx, false, true)
			if err != nil {
				if errors.Is(err, errNotFirst) {
					break // our child is gone: list again
				}
				return nil, r.fail(ctx, err)
			}
			if g != nil {
				return g, nil
			}
			if r.uncertain { // recover first (top of the outer loop)
				break
			}
			// privateLock is held: wait for it, still first.
			ev, err := zcall(ctx, func() (<-chan zk.Event, error) {
				_, _, ev, err := r.s.conn.GetW(r.plPath) // no watch is left when it is missing
				if errors.Is(err, zk.ErrNoNode) {
					return nil, nil // gone meanwhile: try again
				}
				return ev, err
			}, nil)
			if err != nil {
				if retry(err) {
					break // list again once reconnected
				}
				return nil, r.fail(ctx, err)
			}
			if ev == nil {
				continue
			}
			select {
			case <-ev:
			case <-r.s.lost:
			case <-ctx.Done():
				return nil, r.fail(ctx, ctx.Err())
			}
			if r.s.isLost() {
				break
			}
		}
	}
}

// errNotFirst: the shortcut's check of our own child failed.
var errNotFirst = errors.New("lock: own child gone")

// retry reports errors after which the step is repeated once connected.
func retry(err error) bool { return isConnErr(err) || notSent(err) }

func (r *request) createChild(ctx context.Context) error {
	for range 10 {
		p, err := bounded(ctx, r.s, func() (string, error) {
			return r.s.conn.Create(r.objPath+"/"+r.prefix+"-", r.data, zk.FlagEphemeralSequential, r.e.acl)
		}, func(p string, err error) {
			if err == nil {
				r.s.addCleanup(cleanup{kind: cleanChild, objPath: r.objPath, node: path.Base(p), reqID: r.reqID})
			} else if isConnErr(err) {
				r.sweepLater()
			}
		})
		switch {
		case err == nil:
			r.node = path.Base(p)
			r.seq, _ = seqOf(r.node)
			r.listAfter = time.Now()
			if r.seq >= seqRefuse {
				if err := r.drainWait(ctx); !errors.Is(err, errRecreate) {
					return err
				}
				continue
			}
			return nil
		case errors.Is(err, zk.ErrNoNode):
			if _, err := r.e.ensureObject(ctx, r.s, r.objPath); err != nil {
				return err
			}
		case isConnErr(err):
			// The create may have been applied: slow() finds it once
			// reconnected, before creating anything else.
			r.uncertain = true
			return err
		default:
			return err
		}
	}
	return fmt.Errorf("lock: create under %s: object node keeps vanishing", r.objPath)
}

// drainWait handles a sequence counter close to wrapping: it deletes our
// fresh child and waits until the object node is renewed.
func (r *request) drainWait(ctx context.Context) error {
	r.e.log.Warn("object sequence near 2^31: waiting for the object node to drain and be renewed", "object", r.object, "seq", r.seq)
	if err := r.s.conn.Delete(r.objPath+"/"+r.node, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		r.s.addCleanup(cleanup{kind: cleanChild, objPath: r.objPath, node: r.node, reqID: r.reqID})
	}
	r.node = ""
	for {
		// an empty object node can go now
		_ = r.s.conn.Delete(r.objPath, -1)
		ok, _, ev, err := r.s.conn.ExistsW(r.objPath)
		if err != nil {
			return err
		}
		if !ok {
			return errRecreate
		}
		select {
		case <-ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var errRecreate = errors.New("lock: object node renewed")

// noteUncertain marks the request uncertain after a grant multi whose reply
// was lost; guarded: that multi required a version the request had read.
func (r *request) noteUncertain(guarded bool) {
	if !r.uncertain {
		r.uncertainMark = true
	}
	r.uncertain, r.uncertainMark = true, r.uncertainMark && guarded
}

// takePrivateLock creates privateLock (and sets its data, whose Stat carries
// the creation zxid). alone says the listing showed only our child, which
// anchors the fast-path prediction. A nil grant and nil error mean someone
// else holds privateLock.
func (r *request) takePrivateLock(ctx context.Context, alone, checkOwn bool) (*Grant, error) {
	ops := r.grantOps()
	guarded := r.guard >= 0
	if checkOwn { // the node must still be ours: version -1 checks existence
		ops = append([]any{&zk.CheckVersionRequest{Path: r.objPath + "/" + r.node, Version: -1}}, ops...)
	}
	off := len(ops) - 3 // index of the create of privateLock
	res, err := zmulti(ctx, r.s, ops,
		func(res []zk.MultiResponse, err error) {
			switch {
			case err == nil: // granted after we gave up: undo
				r.s.addCleanup(cleanup{kind: cleanPL, objPath: r.objPath, objVersion: res[off+2].Stat.Version, token: res[off+1].Stat.Czxid, noMark: !guarded})
			case isConnErr(err):
				r.sweepLater()
			}
		})
	switch {
	case err == nil:
		next := int64(-1)
		if alone && r.e.objAlone(r.name) {
			next = r.seq + 2 // our child's create, then privateLock's
		}
		return r.grant(ctx, r.node, r.seq, res[off+1].Stat, res[off+2].Stat.Version, next)
	case errors.Is(err, zk.ErrNodeExists):
		return nil, nil
	case errors.Is(err, zk.ErrBadVersion): // r.guard: a grant or release happened since we read
		return nil, nil
	case checkOwn && errors.Is(err, zk.ErrNoNode):
		return nil, errNotFirst
	case isConnErr(err):
		// Applied or not: find out once reconnected. Ours (by request id
		// and session) is granted: it was created in order, as above.
		r.noteUncertain(guarded)
		g, err := r.resolveTake(ctx)
		if err != nil && retry(err) {
			// Could not look: slow() recovers before anything else
			// (privateLock, if ours, is given back).
			return nil, nil
		}
		return g, err
	case notSent(err):
		return nil, r.s.waitConnected(ctx)
	}
	return nil, err
}

// resolveTake finds out, after a connection loss, whether our privateLock
// multi was applied: ours (by request id and session) and the object not
// written since is our grant. Any error leaves r.uncertain set: the caller
// retries through recoverOrphans, or fail() sweeps.
func (r *request) resolveTake(ctx context.Context) (*Grant, error) {
	if err := r.s.waitConnected(ctx); err != nil {
		return nil, err
	}
	if _, err := zcall(ctx, func() (string, error) { return r.s.conn.Sync(r.objPath) }, nil); err != nil {
		return nil, err
	}
	ost, err := r.read(ctx, r.objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil // our child is gone with it: recovery looks (uncertain is still set)
	}
	if err != nil {
		return nil, err
	}
	pl, err := r.read(ctx, r.plPath)
	if errors.Is(err, zk.ErrNoNode) {
		r.uncertain = false // not applied, and never will be after the sync
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !r.s.owns(pl.data, pl.stat, r.reqID) {
		r.uncertain = false // someone else's: ours failed (node exists)
		return nil, nil
	}
	if ost.stat.Mzxid != pl.stat.Czxid {
		// The object was written after our privateLock: not provably our
		// grant. Recovery gives it back.
		return nil, nil
	}
	r.uncertain = false
	return r.grant(ctx, r.node, r.seq, pl.stat, ost.stat.Version, -1)
}

// read gets a node, bounded by ctx.
func (r *request) read(ctx context.Context, p string) (nodeRead, error) {
	return zcall(ctx, func() (nodeRead, error) {
		d, st, err := r.s.conn.Get(p)
		return nodeRead{d, st, err}, err
	}, nil)
}

// recoverOrphans finds nodes created for this live request whose replies
// were lost: our child is adopted (if we have none), other children of ours
// are deleted, and privateLock found ours is given back (the request holds
// no grant while it recovers, and its order is unproven). Only when every
// step has finished is r.uncertain cleared; any error (NoNode where NoNode
// answers the question is no error) returns with it set, so that the
// caller retries once connected or fail() leaves a sweep to the session:
// no path leaves a node of ours that nothing owns.
func (r *request) recoverOrphans(ctx context.Context) error {
	if err := r.s.waitConnected(ctx); err != nil {
		return err
	}
	// After the sync, a create sent on the old connection has been applied
	// or never will be.
	if _, err := zcall(ctx, func() (string, error) { return r.s.conn.Sync(r.objPath) }, nil); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	ost, err := r.read(ctx, r.objPath)
	if errors.Is(err, zk.ErrNoNode) { // no object node: nothing of ours under it
		r.uncertain = false
		return nil
	}
	if err != nil {
		return err
	}
	pl, err := r.read(ctx, r.plPath)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if err == nil && r.s.owns(pl.data, pl.stat, r.reqID) {
		giveBack := cleanup{kind: cleanPL, objPath: r.objPath, objVersion: ost.stat.Version, token: pl.stat.Czxid, noMark: !r.uncertainMark}
		if _, err := zcall(ctx, func() (struct{}, error) { return struct{}{}, giveBack.run(r.s) }, nil); err != nil {
			if !retry(err) {
				return err
			}
			// The cleaner deletes it after the reconnect (it reads first);
			// we look again too.
			r.s.addCleanup(giveBack)
			return err
		}
	}
	children, err := zcall(ctx, func() ([]string, error) {
		c, _, err := r.s.conn.Children(r.objPath)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		r.uncertain = false
		return nil
	}
	if err != nil {
		return err
	}
	adopt := ""
	var stale []string
	for _, c := range children {
		if c == privateLock || !strings.HasPrefix(c, r.prefix+"-") || c == r.node {
			continue
		}
		n, err := r.read(ctx, r.objPath+"/"+c)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		if !r.s.owns(n.data, n.stat, r.reqID) {
			continue
		}
		if r.node == "" && adopt == "" {
			adopt = c
			continue
		}
		stale = append(stale, c)
	}
	for _, c := range stale {
		r.s.addCleanup(cleanup{kind: cleanChild, objPath: r.objPath, node: c, reqID: r.reqID})
	}
	if adopt != "" {
		r.node = adopt
		r.seq, _ = seqOf(adopt)
		r.listAfter = time.Now()
	}
	r.uncertain = false
	return nil
}

// fail ends an acquire without a grant: our child is deleted (now, or by the
// cleaner after a reconnect) and a wait that ran out becomes an
// InstanceLockError with the holder and our position.
func (r *request) fail(ctx context.Context, cause error) error {
	if r.parkKey != nil { // no grant to host what is parked behind it: they queue
		r.e.parkFailed(r.name, r.parkKey)
	}
	waited := time.Since(r.start)
	var ile *InstanceLockError
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) || errors.Is(cause, ErrNotFirst) {
		ile = &InstanceLockError{Object: r.object, Type: r.typ, Waited: waited, Err: cause}
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), errorInspect)
	defer cancel()
	if ile != nil && r.s.connected() {
		st, shared, err := r.e.inspectForError(bg, r.s, r.objPath)
		if err == nil {
			ile.Holder = st.Holder
			// Where our node is among the waiters read (the first 16);
			// 0 = unknown: not among them, or never created (the wait
			// ended on a create slot or with the create in flight), unless
			// nobody waits at all in a view read for us alone (a shared
			// one may predate our node).
			if len(st.Waiters) == 0 && !shared {
				ile.Position = 1
			}
			for i, w := range st.Waiters {
				if r.node != "" && w.Name == r.node {
					ile.Position = i + 1
				}
			}
		}
	}
	if r.node != "" {
		c := cleanup{kind: cleanChild, objPath: r.objPath, node: r.node, reqID: r.reqID}
		if r.nat { // and our name, if a release named us meanwhile
			c.kind = cleanNative
		}
		if _, err := zcall(bg, func() (struct{}, error) { return struct{}{}, c.run(r.s) }, nil); err != nil {
			r.s.addCleanup(c)
		} else {
			r.e.noteGone(r.name, r.node)
		}
		r.node = ""
	}
	if r.uncertain {
		// A create may have landed unseen and the wait ended before we
		// could look: the session finds and deletes it after reconnecting.
		r.sweepLater()
	}
	if ile != nil {
		return ile
	}
	if errors.Is(cause, ErrSessionLost) || errors.Is(cause, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	if errors.Is(cause, zk.ErrNoServer) || errors.Is(cause, zk.ErrConnectionClosed) {
		return fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	return fmt.Errorf("lock: acquire %q: %w", r.object, cause)
}
