package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// The native protocol (Options.Protocol = Native): see "Native protocol" in
// the package doc.

// nativeMaxNext bounds the queue a passing holder hands on in the object
// node's data (nativeData.N).
const nativeMaxNext = 64

// nativeLocalNext bounds it when every successor the write names waits on
// this engine: the names are read only by the successors a write names
// (granted), and a local successor extends them from this engine's
// listing (topUp) as a remote one cannot. Up to 64 names made a local
// drain's release ≈ 3 KB, and ZooKeeper's write of it ≈ 1.5× as slow as
// the plugin protocol's (10,000-waiter probe: 715 µs against 484 p50).
const nativeLocalNext = 8

// nativeData is the object node's data under a native root: who holds the
// object. Every write of it is guarded by the data version its writer read,
// so grants, releases and hand-overs are serialised by ZooKeeper.
type nativeData struct {
	V int            `json:"native"`
	H []nativeHolder `json:"h,omitempty"`
	// N is the queue behind the holders in grant order, as the holder that
	// handed the lock over saw it (at most nativeMaxNext names): the next
	// holder hands on without listing.
	N []string `json:"n,omitempty"`
	// X is the token of a holder that ended without a release (Abandon,
	// a lost grant's cleanup): a waiter with a lock-delay waits it out.
	X int64 `json:"x,omitempty"`
}

// nativeHolder is one holder: its request id (in its child's name), mode
// and fencing token. T 0 means "the write that wrote this data" (its
// mzxid): a write names a holder before its zxid is known; the next write
// fills it in.
type nativeHolder struct {
	R string `json:"r"`
	S bool   `json:"s,omitempty"`
	T int64  `json:"t,omitempty"`
}

// parseNativeData parses the object node's data. Empty data, and the
// plugin protocol's release marker ({"released":…}: an object Baton locked
// on the plugin protocol before its root moved to native), hold nobody: V
// is 0 then (the object is not known to have its sentinel).
func parseNativeData(data []byte) (nativeData, error) {
	if len(data) == 0 {
		return nativeData{}, nil
	}
	var d nativeData
	if err := json.Unmarshal(data, &d); err == nil && d.V == 1 {
		return d, nil
	}
	var m struct {
		Released *string `json:"released"`
	}
	if json.Unmarshal(data, &m) == nil && m.Released != nil {
		return nativeData{}, nil
	}
	return nativeData{}, fmt.Errorf("object node data %.40q is not the native protocol's", data)
}

func (d nativeData) marshal() []byte {
	d.V = 1
	if b, ok := d.appendJSON(make([]byte, 0, d.size())); ok {
		return b
	}
	b, _ := json.Marshal(d)
	return b
}

// size is an upper bound of d's JSON when appendJSON can write it: the
// version, "x" and the brackets of "h" and "n" take at most 70 bytes (two
// 20-digit integers), a holder 48 with its id, a name 3 with it.
func (d nativeData) size() int {
	n := 72
	for _, h := range d.H {
		n += len(h.R) + 48
	}
	for _, nm := range d.N {
		n += len(nm) + 3
	}
	return n
}

// appendJSON appends what json.Marshal writes for d, byte for byte, when
// every string in it is plain ASCII that JSON leaves unescaped (request ids
// and node names are, as a rule); ok false otherwise. A release writes the
// holders and up to nativeMaxNext names on every handoff: encoding/json's
// reflection was a tenth of the engine's allocations in a drain.
func (d nativeData) appendJSON(b []byte) ([]byte, bool) {
	ok := true
	b = append(b, `{"native":`...)
	b = strconv.AppendInt(b, int64(d.V), 10)
	if len(d.H) > 0 {
		b = append(b, `,"h":[`...)
		for i, h := range d.H {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"r":`...)
			if b, ok = appendPlainString(b, h.R); !ok {
				return nil, false
			}
			if h.S {
				b = append(b, `,"s":true`...)
			}
			if h.T != 0 {
				b = append(b, `,"t":`...)
				b = strconv.AppendInt(b, h.T, 10)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(d.N) > 0 {
		b = append(b, `,"n":[`...)
		for i, nm := range d.N {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendPlainString(b, nm); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	if d.X != 0 {
		b = append(b, `,"x":`...)
		b = strconv.AppendInt(b, d.X, 10)
	}
	return append(b, '}'), true
}

// appendPlainString appends v as JSON, the bytes json.Marshal writes,
// when v is plain ASCII that encoding/json leaves unescaped; ok false
// (and b unchanged) otherwise.
func appendPlainString(b []byte, v string) ([]byte, bool) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, v...)
	return append(b, '"'), true
}

// filled returns the holders with every T 0 set to mzxid, the zxid of the
// write that wrote d.
func (d nativeData) filled(mzxid int64) []nativeHolder {
	out := make([]nativeHolder, len(d.H))
	for i, h := range d.H {
		if h.T == 0 {
			h.T = mzxid
		}
		out[i] = h
	}
	return out
}

func (d nativeData) holder(req string) (nativeHolder, bool) {
	for _, h := range d.H {
		if h.R == req {
			return h, true
		}
	}
	return nativeHolder{}, false
}

// nchild is a parsed child of a native object node:
// "<prefix>_<x|s>_<request id>_<sequence>".
type nchild struct {
	name   string
	fg     bool
	shared bool
	req    string
	seq    int64
}

func (e *Engine) nativePrefix(typ Type, shared bool, reqID string) string {
	p := e.opts.ForegroundPrefix
	if typ == Background {
		p = e.opts.BackgroundPrefix
	}
	m := "x"
	if shared {
		m = "s"
	}
	return p + "_" + m + "_" + reqID + "_"
}

// parseNative parses a child name; ok false for anything else (a plugin
// node, privateLock, a stranger).
func (e *Engine) parseNative(name string) (nchild, bool) {
	p, rest, ok := strings.Cut(name, "_")
	if !ok {
		return nchild{}, false
	}
	c := nchild{name: name}
	switch p {
	case e.opts.ForegroundPrefix:
		c.fg = true
	case e.opts.BackgroundPrefix:
	default:
		return nchild{}, false
	}
	m, rest, ok := strings.Cut(rest, "_")
	if !ok || m != "x" && m != "s" {
		return nchild{}, false
	}
	c.shared = m == "s"
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 || len(rest)-i-1 != 10 {
		return nchild{}, false
	}
	seq, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return nchild{}, false
	}
	c.req, c.seq = rest[:i], seq
	return c, true
}

// nativeSeq returns a native child's sequence number (-1 if none).
func nativeSeq(name string) int64 {
	i := strings.LastIndexByte(name, '_')
	v, err := strconv.ParseInt(name[i+1:], 10, 64)
	if i < 0 || err != nil {
		return -1
	}
	return v
}

// nativeOrder parses and orders an object's children: foreground before
// background, then by sequence. A child of any other form is an error
// naming it and the root: a plugin node under a native root is never a
// grant.
func (e *Engine) nativeOrder(objPath string, kids []string) ([]nchild, error) {
	out := make([]nchild, 0, len(kids))
	for _, k := range kids {
		if k == privateLock { // the sentinel (see ensureNative)
			continue
		}
		c, ok := e.parseNative(k)
		if !ok {
			return nil, fmt.Errorf("%w: %s/%s under the native root %s (a plugin node? this root is zookeeper.lock.protocol=native)", ErrForeignNode, path.Base(objPath), k, e.opts.Root)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, grantOrder)
	return out, nil
}

// grantOrder orders native children: foreground before background, then
// by sequence.
func grantOrder(a, b nchild) int {
	if a.fg != b.fg {
		if a.fg {
			return -1
		}
		return 1
	}
	if a.seq != b.seq {
		if a.seq < b.seq {
			return -1
		}
		return 1
	}
	return strings.Compare(a.name, b.name)
}

// nativeView is one read of an object: its data, then its children (in
// that order, on one session: a holder named in the data and missing from
// the listing is gone for good).
type nativeView struct {
	d     nativeData
	st    *zk.Stat // the object node's, from the data read
	kids  []nchild // grant order
	live  []nativeHolder
	dead  []nativeHolder // named, child gone: vanished (or never came)
	alive map[string]bool
}

func (v *nativeView) setKids(kids []nchild) {
	v.kids, v.live, v.dead = kids, nil, nil
	v.alive = make(map[string]bool, len(kids))
	for _, k := range kids {
		v.alive[k.req] = true
	}
	for _, h := range v.d.filled(v.st.Mzxid) {
		if v.alive[h.R] {
			v.live = append(v.live, h)
		} else {
			v.dead = append(v.dead, h)
		}
	}
}

func (v *nativeView) holds(req string) bool {
	for _, h := range v.live {
		if h.R == req {
			return true
		}
	}
	return false
}

// waiters returns the children that are not live holders, in order.
func (v *nativeView) waiters() []nchild {
	out := make([]nchild, 0, len(v.kids))
	for _, k := range v.kids {
		if !v.holds(k.req) {
			out = append(out, k)
		}
	}
	return out
}

func (v *nativeView) exclusiveHolder() (nativeHolder, bool) {
	for _, h := range v.live {
		if !h.S {
			return h, true
		}
	}
	return nativeHolder{}, false
}

func (v *nativeView) childOf(req string) string {
	for _, k := range v.kids {
		if k.req == req {
			return k.name
		}
	}
	return ""
}

// nreq is one Acquire under the native protocol.
type nreq struct {
	*request
	shared  bool
	view    *nativeView // the latest read, if fresh
	created bool        // a child of this request was created (or may have been)
	waited  bool        // the object was held or contended when it came, or it queued behind another
	missed  bool        // its predicted write was refused by the data version (fast)
	// firstNoRoot: its first-touch multi (fast, prediction.first) found no
	// lock root: nothing was created, and ensureNativeFrom makes the root
	firstNoRoot bool
	// parkGrant, parkFail: how the request ended, for a parked queue a
	// release moves behind it after the fact (parkMove); under e.objMu
	parkGrant *Grant
	parkFail  bool
	// handed: in-process handoffs to this request while it waits with a
	// child (slow; Engine.handoffs finds it)
	handed chan nativeHandoff
}

func (e *Engine) acquireNative(ctx context.Context, r *request, shared bool) (*Grant, error) {
	if r.reqID == "" || strings.ContainsAny(r.reqID, "/\x00") || len(r.reqID) > 128 {
		return nil, fmt.Errorf("lock: request id %q: the native protocol needs 1-128 bytes without '/'", r.reqID)
	}
	r.nat, r.shared = true, shared
	n := &nreq{request: r, shared: shared}
	r.parkKey = n
	p := e.objEnter(r.name, r.s.gen)
	g, err := n.run(ctx, p)
	if err != nil && !r.registered {
		e.objLeave(r.name, -1, r.s.gen, 0, -1)
	}
	return g, err
}

func (n *nreq) run(ctx context.Context, p prediction) (*Grant, error) {
	return n.owned(ctx, func() (*Grant, error) { return n.acquire(ctx, p) })
}

func (n *nreq) acquire(ctx context.Context, p prediction) (*Grant, error) {
	if o, cancelled, ok := n.park(ctx); ok {
		switch {
		case cancelled:
			cause := ctx.Err()
			if cause == nil { // the session was lost
				cause = n.s.lostCause()
			}
			return nil, n.fail(ctx, cause)
		case o.child != "":
			return n.grantedParked(ctx, o)
		case o.uncertain:
			// the multi that would have granted us may have landed: the
			// slow path gives back whatever of ours it left, then queues
			n.uncertain, n.created, n.waited = true, true, true
			return n.slow(ctx)
		}
		// The holder named someone else, or ended: queue at once (the
		// object is contended, and its sentinel known).
		p = prediction{seq: -1, contended: true}
	}
	// Our own clean release left the object (its sentinel is known), and
	// no other engine's write refused our last predicted one (missed: read
	// first, below).
	fast := p.seq >= 0 && p.version >= 0 && n.delay <= 0 && !p.missed
	var v *nativeView
	if !fast && p.contended && n.e.objSentinelKnown(n.name) {
		// Contended lately, sentinel known: queue at once. The read of
		// the holders would only say so again (the slow path reads a
		// view after our create): W2's every acquisition sent it.
	} else if !fast {
		// The holders, read first: data the native protocol wrote proves
		// the sentinel; anything else is checked (ensureNative).
		var err error
		n.e.preReads.Add(1)
		v, err = n.readData(ctx)
		missing := errors.Is(err, zk.ErrNoNode)
		switch {
		case errors.Is(err, ErrForeignNode):
			return nil, n.fail(ctx, err)
		case err != nil: // no object node yet (ensureNative creates it), or not connected (slow retries)
			v = nil
		case v.d.V == 1:
			n.e.objSentinel(n.name, true)
		}
		if missing && !p.contended && n.delay <= 0 && !n.e.firstSplit.Load() {
			// No object node: make it, its sentinel and our child, and
			// name us, in one write (a first touch was two: the node,
			// then the one-write grant below). An object made meanwhile
			// (NodeExists) or no root yet (NoNode): nothing was created,
			// and the usual way follows.
			g, err, done := n.fast(ctx, prediction{seq: -1, czxid: -1, version: 0, first: true})
			switch {
			case done:
				return g, err
			case n.uncertain:
				// Its answer lost: the slow path gives back what landed,
				// then queues; the object node may be there now.
				missing = false
			case !n.firstNoRoot:
				missing = false // made meanwhile: look
			}
		}
		for v == nil || v.d.V != 1 {
			created, err := n.e.ensureNativeFrom(ctx, n.s, n.name, n.objPath, missing)
			if err == nil {
				if created && v == nil && !p.contended && n.delay <= 0 && !n.uncertain {
					// Ours, just made: no holders, data version 0, for the
					// one-write grant below (a first touch was eight
					// requests and three writes through the queue). Not
					// read: the grant's write is guarded by version 0, and
					// its answer counts the children (a write since, and
					// it is refused; anyone else there, and the listing
					// decides). Not for a request that queues anyway
					// (contended, or a lock-delay: the view reads the data).
					v = &nativeView{d: nativeData{V: 1}, st: &zk.Stat{Czxid: -1}}
				}
				break
			}
			if !retry(err) {
				return nil, n.fail(ctx, err)
			}
			missing = false
			if err := n.s.waitConnected(ctx); err != nil { // disconnected: look again once connected
				return nil, n.fail(ctx, err)
			}
		}
	}
	var g *Grant
	var err error
	done := false
	// held or contended when we came (a fast attempt that falls through
	// found someone, too)
	contended := p.contended || (v != nil && len(v.d.H) > 0)
	if fast {
		g, err, done = n.fast(ctx, p)
		contended = true
		if !done && n.missed {
			// Another engine wrote since our release: its version refused
			// our write (nothing created). Read, and the one-write grant
			// below if the object is free, rather than queueing (a child,
			// a view of two reads, a take: W3's objects taken by turns
			// on eight sidecars). The next acquires read first
			// (objMissed) until a read shows the prediction held.
			n.missed, fast = false, false
			n.e.objMissed(n.name, true)
			v = nil
			if w, rerr := n.readData(ctx); rerr == nil && w.d.V == 1 {
				v = w
			}
			contended = v == nil || len(v.d.H) > 0
		}
	}
	if !fast && !done && v != nil && !p.contended && n.delay <= 0 && len(v.d.H) == 0 {
		contended = true
		if p.seq >= 0 && p.version >= 0 && v.st.Czxid == p.czxid && v.st.Version == p.version {
			// Nobody wrote since our release: the prediction holds (no
			// check after the write), and the next acquire need not read.
			n.e.objMissed(n.name, false)
			g, err, done = n.fast(ctx, p)
		} else {
			if p.seq >= 0 && p.version >= 0 && p.missed {
				// read first instead of predicting, and the prediction
				// would have been refused (a refused one is counted by fast)
				n.e.predOutcome(false)
			}
			// No prediction, nobody seen here lately and no holder: create
			// our child and name ourselves in one multi guarded by the
			// version read; its answer, or a listing when it counts
			// others, shows whether anyone waits ahead (two round trips
			// and one write, or three; queueing first costs four, two).
			g, err, done = n.fast(ctx, prediction{seq: -1, czxid: v.st.Czxid, version: v.st.Version})
		}
	}
	// Otherwise the slow path reads a view sent after our create, shared
	// with this engine's other waiters on the object (not v: a listing
	// of our own per waiter is O(waiters) each).
	if !done {
		// The object was held or contended when we came: contended, even
		// if its holder is gone before our first view (a release landing
		// just after our create). A grant that did not follow arrivals
		// then would name nobody, and its successor would take with a
		// second write and again follow nothing: a run of two-write
		// handoffs (TestNativeReleaseMidViewNoRefusedTake, one engine).
		// Not when nothing was seen here: the object node missing (a first
		// acquire of the object) or only a lock-delay sending every acquire
		// this way; a grant that follows arrivals lists the object twice
		// (TestReviewMidviewUncontendedNoLearning; W3's thousand new
		// objects). A queue met later counts below (not eligible, or not
		// alone when taking).
		n.waited = contended
		// A holder of this engine listing the object (learnNative, at its
		// grant): our create after that listing's answer fires its watch,
		// and the listing that follows names us before its release. A
		// create inside it was missed by it, and a release coming just
		// after our create listed the object itself. Briefly: an
		// optimisation, never a wait on a stalled connection.
		if l := n.e.objLearning(n.name); l != nil {
			t := time.NewTimer(learnWaitMax)
			select {
			case <-l:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		g, err = n.slow(ctx)
	}
	return g, err
}

// fast is the uncontended acquire with a prediction: one multi creates our
// child and names us holder, guarded by the object node's data version our
// own clean release left (any grant since changed it). Our child's
// sequence number equal to the predicted one proves nobody created a child
// since, so nobody waits ahead of us. Otherwise the multi's answer counts
// the object's children: the sentinel and ours alone, nobody waits ahead
// either; more, and a listing decides: if someone waits ahead of us, we
// give the lock back and queue.
//
// With p.first (no object node was there), the multi first creates the
// object node with free data, its sentinel and the sentinel's mark, as
// ensureNativeFrom does: the data guarded by version 0 is then the node
// this multi made, which nobody else can have a child under. If the node
// exists (made meanwhile) or the root does not, nothing is created
// (n.firstNoRoot says which).
func (n *nreq) fast(ctx context.Context, p prediction) (*Grant, error, bool) {
	d := nativeData{H: []nativeHolder{{R: n.reqID, S: n.shared}}}
	if f := fastMultiHook.Load(); f != nil {
		(*f)(n.objPath)
	}
	ops := make([]any, 0, 6)
	if p.first {
		ops = append(ops, n.e.nativeObjectOps(n.objPath)...)
	}
	at := len(ops) // our child's create; the setData follows it, then the check
	ops = append(ops,
		&zk.CreateRequest{Path: n.objPath + "/" + n.e.nativePrefix(n.typ, n.shared, n.reqID), Data: n.data, Acl: n.e.acl, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: n.objPath, Data: d.marshal(), Version: p.version},
		&zk.CheckVersionRequest{Path: sentinelMark(n.objPath), Version: -1},
	)
	n.created = true
	res, err := boundedMulti(ctx, n.s, ops,
		func(_ []zk.MultiResponse, err error) {
			if err == nil || isConnErr(err) {
				n.s.addCleanup(cleanup{kind: cleanNative, objPath: n.objPath, reqID: n.reqID})
			}
		})
	switch {
	case err == nil:
		child := path.Base(res[at].String)
		seq := nativeSeq(child)
		st := res[at+1].Stat
		n.node, n.seq, n.objCzxid = child, seq, st.Czxid
		if p.first {
			n.e.objSentinel(n.name, true)
		}
		if st.Czxid == p.czxid && seq == p.seq {
			n.e.observe(func(o Observer) { o.FastPath(true) })
			n.e.predOutcome(true)
			g, err := n.granted(ctx, st.Mzxid, st, d, nil, seq+1)
			return g, err, true
		}
		if p.seq >= 0 {
			n.e.observe(func(o Observer) { o.FastPath(false) })
			n.e.predOutcome(false)
		}
		// The node the multi landed on is the one whose version guarded
		// it (read, or predicted from our release), or (czxid -1) one at
		// data version 0, which names nobody: a native object node is
		// created with free data (ensureNativeFrom), and every grant
		// writes it again.
		known := st.Czxid == p.czxid || (p.czxid < 0 && p.version == 0)
		if known && st.NumChildren == 2 {
			// The setData's stat counts the children the multi left (as a
			// parked handoff's, park.go): the sentinel (checked in the
			// multi) and ours alone, so nobody waits ahead and no foreign
			// node is there. No listing: W3's objects, taken by turns on
			// eight sidecars, were listed at every acquisition.
			next := int64(-1)
			if n.e.objAlone(n.name) {
				next = seq + 1
			}
			g, err := n.granted(ctx, st.Mzxid, st, d, nil, next)
			return g, err, true
		}
		if known {
			// Someone created a child since: are they ahead of us?
			v, err := n.readAfter(ctx, d, st)
			if err == nil && len(v.kids) > 1 {
				n.e.objContended(n.name)
			}
			if err == nil && v.holds(n.reqID) {
				if !n.waiterAhead(v) {
					next := int64(-1)
					if len(v.kids) == 1 && n.e.objAlone(n.name) {
						next = seq + 1
					}
					g, err := n.granted(ctx, st.Mzxid, v.st, v.d, n.after(v), next)
					return g, err, true
				}
			}
		}
		// A renewed object node (an operator deleted it), someone waits
		// ahead of us, or the check could not be made: give everything
		// back and queue (disconnected: the slow path gives it back once
		// connected).
		if err := n.giveBack(ctx); err != nil {
			if retry(err) || errors.Is(err, errContended) { // the slow path gives it back, again
				n.uncertain = true
				return nil, nil, false
			}
			return nil, n.fail(ctx, err), true
		}
		return nil, nil, false
	case p.first && (errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode)):
		// nothing created: the node exists, or the root does not
		n.created = false
		n.firstNoRoot = errors.Is(err, zk.ErrNoNode)
		return nil, nil, false
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		if p.seq >= 0 {
			n.e.observe(func(o Observer) { o.FastPath(false) })
			n.e.predOutcome(false)
			n.missed = errors.Is(err, zk.ErrBadVersion)
		}
		if sentinelGone(res, 2) {
			n.e.objSentinel(n.name, false)
			if err := n.e.ensureNative(ctx, n.s, n.name, n.objPath); err != nil && !retry(err) {
				return nil, n.fail(ctx, err), true
			}
		}
		return nil, nil, false // nothing created
	case isConnErr(err):
		n.uncertain = true
		return nil, nil, false
	case notSent(err): // nothing was created: the slow path waits for the connection
		return nil, nil, false
	default:
		return nil, n.fail(ctx, err), true
	}
}

// waiterAhead reports whether a waiter (not a holder) sorts ahead of our
// child in v.
func (n *nreq) waiterAhead(v *nativeView) bool {
	for _, k := range v.kids {
		if k.req == n.reqID {
			return false
		}
		if !v.holds(k.req) {
			return true
		}
	}
	return false
}

// after returns the waiters in v's order but us: whom we may hand the
// lock to. Not only those behind our child: a shared request is granted
// past shared waiters ahead of it that have not taken yet, and they stay
// first in order (naming a request behind them could have it watch one of
// them while that one watches it).
func (n *nreq) after(v *nativeView) []string {
	return waitersBut(v.kids, v.holds, n.reqID)
}

func waitersBut(kids []nchild, holds func(req string) bool, req string) []string {
	var out []string
	for _, k := range kids {
		if k.req != req && !holds(k.req) && len(out) < nativeMaxNext {
			out = append(out, k.name)
		}
	}
	return out
}

// read reads the object node's data, then its children.
func (n *nreq) read(ctx context.Context) (*nativeView, error) {
	return zcall(ctx, func() (*nativeView, error) { return n.e.readNativeView(n.s, n.objPath) }, nil)
}

// readAfter is read after our own write of d (st: the object node's stat
// it left): one listing, whose stat tells whether the data is still d (its
// version unchanged); only if not is the data read again, then listed.
// Either way the data is known as of a moment before the listing.
func (n *nreq) readAfter(ctx context.Context, d nativeData, st *zk.Stat) (*nativeView, error) {
	type listing struct {
		kids []string
		st   *zk.Stat
	}
	l, err := zcall(ctx, func() (listing, error) {
		kids, lst, err := n.s.conn.Children(n.objPath)
		return listing{kids, lst}, err
	}, nil)
	if err != nil {
		return nil, err
	}
	if l.st.Czxid != st.Czxid || l.st.Version != st.Version {
		return n.read(ctx)
	}
	v := &nativeView{d: d, st: st}
	return v, n.e.setChildren(v, n.objPath, l.kids)
}

func (n *nreq) readData(ctx context.Context) (*nativeView, error) {
	// Parsed on zcall's goroutine: JSON decoding on the request's own
	// goroutine doubled the stack every waiting acquire keeps (4 → 8 KiB,
	// measured with 3,000 waiters).
	return zcall(ctx, func() (*nativeView, error) { return readObjectData(n.s, n.objPath) }, nil)
}

// readObjectData reads the object node's data (the holders) on session s.
func readObjectData(s *session, objPath string) (*nativeView, error) {
	data, st, err := s.conn.Get(objPath)
	if err != nil {
		return nil, err
	}
	d, err := objectData(objPath, data)
	if err != nil {
		return nil, err
	}
	return &nativeView{d: d, st: st}, nil
}

// objectData parses the object node's data: anything but the native
// protocol's is ErrForeignNode naming the node.
func objectData(objPath string, data []byte) (nativeData, error) {
	d, err := parseNativeData(data)
	if err != nil {
		return nativeData{}, fmt.Errorf("%w: %s: %v", ErrForeignNode, objPath, err)
	}
	return d, nil
}

// readNativeView reads the object's data, then its children, on session
// s: one view for every waiter of the engine that joins it (listShared).
func (e *Engine) readNativeView(s *session, objPath string) (*nativeView, error) {
	// The data, then the children: both sent at once, answered in order
	// (one round trip). A release landing between the two reads still
	// shows as a holder named with its child gone (slow's localRelease).
	data, st, kids, _, err := s.conn.GetThenChildren(objPath)
	if err != nil {
		return nil, err
	}
	d, err := objectData(objPath, data)
	if err != nil {
		return nil, err
	}
	v := &nativeView{d: d, st: st}
	if err := e.setChildren(v, objPath, kids); err != nil {
		return nil, err
	}
	return v, nil
}

// setChildren orders kids, the object's children, into v.
func (e *Engine) setChildren(v *nativeView, objPath string, kids []string) error {
	ks, err := e.nativeOrder(objPath, kids)
	if err != nil {
		return err
	}
	v.setKids(ks)
	if name, ok := strings.CutPrefix(objPath, e.root+"/"); ok {
		e.noteQueue(name, ks)
	}
	return nil
}

// noteQueue keeps ks, a listing of the object's children in grant order,
// for topUp (read-only from here: views share it).
func (e *Engine) noteQueue(name string, ks []nchild) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil {
		st.nq = ks
	}
}

// topUp extends next, the waiters an exclusive holder knows to be behind
// it in order (after names, its own child, when it knows of none), to
// nativeMaxNext names with those behind the last of them in the engine's
// latest listing of the object: a holder handed names in the data (at most
// nativeMaxNext) or in process names its successor without listing the
// object again, however long the queue (10,000 waiters on one sidecar
// re-listed ≈ 10,000 children every 64 handoffs). Any listing will do,
// however old: a child that sorts ahead of a foreground child existed when
// that child was created (foreground before background, then by
// sequence), so up to its last foreground child a listing is the queue as
// it was, less the children gone since (successors skips those this engine
// deleted; the release multi checks each one it names) — a later arrival
// sorts behind all of them, and successors names no background waiter.
func (e *Engine) topUp(name string, next []string, self string) []string {
	if len(next) >= nativeMaxNext {
		return next
	}
	anchor := self
	if len(next) > 0 {
		anchor = next[len(next)-1]
	}
	a, ok := e.parseNative(anchor)
	if !ok {
		return next
	}
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		return next
	}
	i, found := slices.BinarySearchFunc(st.nq, a, grantOrder)
	if !found {
		return next
	}
	next = append(make([]string, 0, nativeMaxNext), next...) // not in place: next may share its array with the data the handoff wrote
	for _, c := range st.nq[i+1:] {
		if len(next) >= nativeMaxNext {
			break
		}
		if _, ok := st.gone[c.name]; !ok {
			next = append(next, c.name)
		}
	}
	return next
}

func (n *nreq) list(ctx context.Context, v *nativeView) error {
	kids, err := n.s.children(ctx, n.objPath)
	if err != nil {
		return err
	}
	return n.e.setChildren(v, n.objPath, kids)
}

// eligible reports whether we may be granted in view v: exclusive, no live
// holder and first of the waiters; shared, no live exclusive holder and
// only shared waiters ahead of us. (It and target walk v.kids in place: a
// copy of the waiters per call was O(queue) garbage on every waiting
// acquire's arrival.)
func (n *nreq) eligible(v *nativeView) bool {
	if !n.shared {
		if len(v.live) > 0 {
			return false
		}
		return len(v.kids) > 0 && v.kids[0].req == n.reqID // no live holder: every child waits
	}
	if _, ok := v.exclusiveHolder(); ok {
		return false
	}
	for _, k := range v.kids {
		if v.holds(k.req) {
			continue
		}
		if k.req == n.reqID {
			return true
		}
		if !k.shared {
			return false
		}
	}
	return false
}

// target returns the child to watch: the waiter we wait behind (the one
// just ahead of us; for a shared request the nearest exclusive one), or,
// with no such waiter ahead, a live holder whose end can unblock us.
func (n *nreq) target(v *nativeView) string {
	ahead := ""
	for _, k := range v.kids {
		if v.holds(k.req) {
			continue
		}
		if k.req == n.reqID {
			if ahead != "" {
				return ahead
			}
			break
		}
		if !n.shared || !k.shared {
			ahead = k.name
		}
	}
	if h, ok := v.exclusiveHolder(); ok {
		return v.childOf(h.R)
	}
	if len(v.live) > 0 {
		return v.childOf(v.live[0].R)
	}
	return ""
}

func (n *nreq) createChild(ctx context.Context) error {
	for range 10 {
		p, err := bounded(ctx, n.s, func() (string, error) {
			return n.s.conn.Create(n.objPath+"/"+n.e.nativePrefix(n.typ, n.shared, n.reqID), n.data, zk.FlagEphemeralSequential, n.e.acl)
		}, func(p string, err error) {
			if err == nil || isConnErr(err) {
				n.s.addCleanup(cleanup{kind: cleanNative, objPath: n.objPath, reqID: n.reqID})
			}
		})
		switch {
		case err == nil:
			n.node = path.Base(p)
			n.seq = nativeSeq(n.node)
			return nil
		case errors.Is(err, zk.ErrNoNode):
			n.e.objSentinel(n.name, false)
			if err := n.e.ensureNative(ctx, n.s, n.name, n.objPath); err != nil {
				return err
			}
		case isConnErr(err):
			n.uncertain = true
			return err
		default:
			return err
		}
	}
	return fmt.Errorf("lock: create under %s: object node keeps vanishing", n.objPath)
}

// slow queues and waits: read the holders, list, grant ourselves if
// eligible, else watch the one child whose end can unblock us. A holder
// handing the lock to us deletes the child we watch in the same write that
// names us: one read (the object's data) finds the grant.
func (n *nreq) slow(ctx context.Context) (*Grant, error) {
	n.e.waiting.Add(1)
	defer n.e.waiting.Add(-1)
	n.s.addWaiter(1)
	defer n.s.addWaiter(-1)
	handed := make(chan nativeHandoff, 1)
	n.handed = handed
	n.e.handoffs.Store(n.reqID, n)
	defer func() { n.e.handoffs.Delete(n.reqID) }() // renew moves it
	again := func(err error) error {                // nil: go round again
		if retry(err) {
			return n.s.waitConnected(ctx)
		}
		return err
	}
	for {
		if n.s.isLost() {
			return nil, n.fail(ctx, n.s.lostCause())
		}
		if n.uncertain { // give back whatever of ours landed unseen, then queue afresh
			if err := n.giveBack(ctx); err != nil {
				if errors.Is(err, errContended) {
					// Every guarded multi lost to the holders' writes (grants
					// handed on meanwhile): again, within the wait. Once the
					// line reaches a child of ours, our name is the one the
					// data gets and nobody else writes it.
					continue
				}
				if err := again(err); err != nil {
					return nil, n.fail(ctx, err)
				}
				continue
			}
		}
		if n.node == "" && n.created {
			// Queueing again: under a request id of its own. The holders are
			// named by request id, so a new child under the old one would
			// make a stale read of the data naming the old child look like
			// a live holder (two waiters watched each other:
			// TestReviewNativeFuzzCutsCancels), and a cleanup still queued
			// for the old one would delete the new child.
			if err := n.renew(ctx); err != nil {
				return nil, n.fail(ctx, err)
			}
		}
		if n.node == "" {
			n.created = true
			if err := n.createChild(ctx); err != nil {
				if err := again(err); err != nil {
					return nil, n.fail(ctx, err)
				}
				continue
			}
		}
		// A view sent after now: the holders, then the children. Without
		// one of its own (the read after a watch), the view in flight for
		// the object joins, or the next one (read-only: every waiter of
		// this engine on the object may share it). 10,000 waiters
		// arriving on one object send a few reads, not one each of ≈ 10,000
		// children: those clogged the session's connection until its
		// acknowledgements were older than the session timeout.
		v := n.view
		n.view = nil
		var err error
		if v == nil {
			var l *listing
			if l, err = n.e.listShared(ctx, n.s, n.name, n.objPath, time.Now()); err == nil {
				v = l.view
			}
		} else {
			err = n.list(ctx, v)
		}
		if err != nil {
			if errors.Is(err, zk.ErrNoNode) { // our node went with its parent
				n.node = ""
				continue
			}
			if err := again(err); err != nil {
				return nil, n.fail(ctx, err)
			}
			continue
		}
		if !v.alive[n.reqID] || v.childOf(n.reqID) != n.node {
			n.e.log.Warn("our lock node vanished; queueing again", "object", n.object, "node", n.node)
			n.node = ""
			continue
		}
		if h, ok := v.d.holder(n.reqID); ok { // handed to us
			return n.granted(ctx, filledToken(h, v.st), v.st, v.d, n.after(v), -1)
		}
		if n.eligible(v) && len(v.dead) > 0 {
			// A holder named in the data with its child gone: most often
			// a release that landed between our view's two reads (the data
			// read before it, the listing after), whose write may name us.
			// A take now would be refused by the data version that release
			// wrote, and a refused multi is still a logged write. A
			// release of this engine tells us in process; any other, one
			// read of the data (a holder that truly vanished leaves it as
			// it was: on to lock-delay and take).
			dead := make([]string, len(v.dead))
			for i, d := range v.dead {
				dead[i] = d.R
			}
			if h, ok := n.localRelease(ctx, handed, dead...); ok {
				return n.granted(ctx, h.st.Mzxid, h.st, h.d, h.d.N, -1)
			}
			if ctx.Err() != nil {
				return nil, n.fail(ctx, ctx.Err())
			}
			w, err := n.readData(ctx)
			if err != nil {
				if errors.Is(err, zk.ErrNoNode) { // our node went with its parent (an operator's deleteall)
					n.node = ""
					continue
				}
				if err := again(err); err != nil {
					return nil, n.fail(ctx, err)
				}
				continue
			}
			if h, ok := w.d.holder(n.reqID); ok {
				return n.granted(ctx, filledToken(h, w.st), w.st, w.d, w.d.N, -1)
			}
			if w.st.Version != v.st.Version || w.st.Mzxid != v.st.Mzxid {
				n.view = w // changed: list again behind it
				continue
			}
		}
		if n.eligible(v) {
			if n.delay > 0 {
				wait, err := n.lockDelay(ctx, v)
				if err != nil {
					return nil, n.fail(ctx, err)
				}
				if wait {
					continue
				}
			}
			g, err := n.take(ctx, v)
			if err != nil {
				if err := again(err); err != nil {
					return nil, n.fail(ctx, err)
				}
				continue
			}
			if g != nil {
				return g, nil
			}
			continue
		}
		if len(v.kids) > 1 {
			n.e.objContended(n.name)
		}
		if n.tryOnce {
			return nil, n.fail(ctx, ErrNotFirst)
		}
		// Someone is ahead of us: contended, whether or not their node
		// is still there when our watch is set (a release landing while
		// we queue leaves us to take the lock alone, and that grant must
		// still follow arrivals, or every later handoff takes two writes).
		n.waited = true
		t := n.target(v)
		if t == "" {
			continue
		}
		if c, ok := n.e.parseNative(t); ok && v.holds(c.req) {
			// First in line behind a holder of this engine: tell it, so that
			// its release names us without listing.
			if hv, ok := n.e.natHeld.Load(c.req); ok {
				hv.(*Grant).learn(n.node)
			}
		}
		ev, err := zcall(ctx, func() (<-chan zk.Event, error) {
			ok, _, ev, err := n.s.conn.ExistsW(n.objPath + "/" + t)
			if err == nil && !ok {
				return nil, nil // gone: an exists watch on a missing node stays; it fires on a create only (names do not repeat)
			}
			return ev, err
		}, nil)
		if err != nil {
			if err := again(err); err != nil {
				return nil, n.fail(ctx, err)
			}
			continue
		}
		if ev == nil {
			continue
		}
		n.waited = true
		select {
		case <-ev:
		case h := <-handed:
			if n.mine(h) {
				return n.granted(ctx, h.st.Mzxid, h.st, h.d, h.d.N, -1)
			}
			continue
		case <-n.s.lost:
			continue
		case <-ctx.Done():
			return nil, n.fail(ctx, ctx.Err())
		}
		// The watch fires before the holder's multi is answered: a holder
		// of this engine tells us in process whether it named us.
		if c, ok := n.e.parseNative(t); ok {
			if h, ok := n.localRelease(ctx, handed, c.req); ok {
				return n.granted(ctx, h.st.Mzxid, h.st, h.d, h.d.N, -1)
			}
		} else if h, ok := n.handedNow(handed); ok {
			return n.granted(ctx, h.st.Mzxid, h.st, h.d, h.d.N, -1)
		}
		if ctx.Err() != nil {
			return nil, n.fail(ctx, ctx.Err())
		}
		// One read: handed to us?
		w, err := n.readData(ctx)
		if err != nil {
			if errors.Is(err, zk.ErrNoNode) { // our node went with its parent
				n.node = ""
				continue
			}
			if err := again(err); err != nil {
				return nil, n.fail(ctx, err)
			}
			continue
		}
		if h, ok := w.d.holder(n.reqID); ok {
			return n.granted(ctx, filledToken(h, w.st), w.st, w.d, w.d.N, -1)
		}
		n.view = w
	}
}

// localRelease waits for the releases under way of this engine's grants
// with the given request ids (their multis landed: a watch fired, or a
// listing shows their children gone; their answers are on the way), and
// reports the in-process handoff if one named us. A grant that is not
// releasing is not waited for: one whose child someone else deleted holds
// on (until its watch sees another named) and would keep us waiting for as
// long (TestReviewMidviewDeletedHolderChildNoHang). ctx ending: no handoff.
func (n *nreq) localRelease(ctx context.Context, handed chan nativeHandoff, reqs ...string) (nativeHandoff, bool) {
	for _, r := range reqs {
		hv, ok := n.e.natHeld.Load(r)
		if !ok {
			continue // ended already: its handoff, if any, is in handed
		}
		g := hv.(*Grant)
		if g.s != n.s || !g.isReleasing() {
			continue
		}
		select {
		case <-g.Done():
		case <-ctx.Done():
			return nativeHandoff{}, false
		}
	}
	return n.handedNow(handed)
}

// handedNow takes an in-process handoff already sent to us, if any.
func (n *nreq) handedNow(handed chan nativeHandoff) (nativeHandoff, bool) {
	select {
	case h := <-handed:
		if n.mine(h) {
			return h, true
		}
	default:
	}
	return nativeHandoff{}, false
}

// mine reports whether h names this request's current child on its session
// (a message for an earlier child, or an earlier session, is stale).
func (n *nreq) mine(h nativeHandoff) bool { return h.s == n.s && h.node == n.node }

func filledToken(h nativeHolder, st *zk.Stat) int64 {
	if h.T == 0 {
		return st.Mzxid
	}
	return h.T
}

// lockDelay waits out a vanished holder (see "Lock-delay"): named in the
// data with its child gone, or recorded as ended without a release. wait
// true: look again.
func (n *nreq) lockDelay(ctx context.Context, v *nativeView) (bool, error) {
	key := v.d.X
	for _, h := range v.dead {
		key = max(key, h.T)
	}
	if key == 0 {
		return false, nil
	}
	if n.vanishKey != key {
		n.vanishKey, n.vanishAt = key, time.Now()
	}
	left := n.delay - time.Since(n.vanishAt)
	if left <= 0 {
		return false, nil
	}
	if n.tryOnce {
		return false, ErrNotFirst
	}
	n.e.delays.Add(1)
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// take names us holder, guarded by the data version read in v and by our
// child's existence. A nil grant and nil error: look again.
func (n *nreq) take(ctx context.Context, v *nativeView) (*Grant, error) {
	d := nativeData{H: append(v.live[:len(v.live):len(v.live)], nativeHolder{R: n.reqID, S: n.shared})}
	ops := []any{
		&zk.CheckVersionRequest{Path: n.objPath + "/" + n.node, Version: -1},
		&zk.SetDataRequest{Path: n.objPath, Data: d.marshal(), Version: v.st.Version},
		&zk.CheckVersionRequest{Path: sentinelMark(n.objPath), Version: -1},
	}
	res, err := zmulti(ctx, n.s, ops,
		func(_ []zk.MultiResponse, err error) {
			if err == nil || isConnErr(err) {
				n.s.addCleanup(cleanup{kind: cleanNative, objPath: n.objPath, reqID: n.reqID})
			}
		})
	switch {
	case err == nil:
		st := res[1].Stat
		next := int64(-1)
		if len(v.kids) == 1 && n.e.objAlone(n.name) {
			next = n.seq + 1
		}
		return n.granted(ctx, st.Mzxid, st, d, n.after(v), next)
	case errors.Is(err, zk.ErrBadVersion):
		n.e.refusedTakes.Add(1)
		return nil, nil
	case errors.Is(err, zk.ErrNoNode) && sentinelGone(res, 2):
		// the sentinel went (an operator): make it again, or find the
		// plugin holder that took its place
		n.e.objSentinel(n.name, false)
		return nil, n.e.ensureNative(ctx, n.s, n.name, n.objPath)
	case errors.Is(err, zk.ErrNoNode):
		n.node = ""
		return nil, nil
	case isConnErr(err):
		n.uncertain = true
		return nil, nil
	case notSent(err):
		return nil, n.s.waitConnected(ctx)
	}
	return nil, err
}

// granted reports the grant: token, the object node's stat after the
// write that named us (or the read that found us named), whom we may hand
// the lock to, and the fast-path prediction (-1 none).
func (n *nreq) granted(ctx context.Context, token int64, st *zk.Stat, d nativeData, next []string, predict int64) (*Grant, error) {
	if !n.shared {
		// (a shared holder may pass shared waiters ahead of it: only
		// its listing knows them)
		next = n.e.topUp(n.name, next, n.node)
	}
	// Contended, and we know of nobody to hand over to: learn of arrivals
	// while we hold, off the handoff's path. Marked before grant sets the
	// holder-watch timer: one firing before we start learnNative below
	// (a short HolderWatchDelay, this goroutine descheduled) must not take
	// the grant for an uncontended one and start a second, late, one.
	learn := len(next) == 0 && (predict < 0 || n.waited)
	n.natGrant = &nativeGrant{version: st.Version, mzxid: st.Mzxid, d: &d, next: next, learning: learn}
	n.objCzxid = st.Czxid
	g, err := n.grant(ctx, n.node, n.seq, &zk.Stat{Czxid: token, Version: 0}, st.Version, predict)
	if err == nil {
		n.e.natHeld.Store(n.reqID, g)
		if g.State() == Lost || g.State() == Released { // ended meanwhile: finish may have missed the entry
			n.e.natHeld.CompareAndDelete(n.reqID, g)
		}
		if !n.shared {
			n.e.parkHostSet(n.name, g, n)
		}
		if learn {
			n.e.track(g.learnNative)
		}
	}
	if err != nil && !n.registered {
		// never reported held: give the name back (the grant's nodes go
		// with the session when it ended)
		n.s.addCleanup(cleanup{kind: cleanNative, objPath: n.objPath, reqID: n.reqID})
	}
	if err != nil && !n.shared {
		// no grant to host what is parked behind us (grant ends some
		// failures without fail: lost just after its registration)
		n.e.parkFailed(n.name, n)
	}
	return g, err
}

// giveBack removes us from the holders and deletes our children, in one
// guarded multi, after a sync (a create or grant of ours sent on an older
// connection has landed by then, or never will).
func (n *nreq) giveBack(ctx context.Context) error {
	if err := n.s.waitConnected(ctx); err != nil {
		return err
	}
	c := cleanup{kind: cleanNative, objPath: n.objPath, reqID: n.reqID}
	if _, err := zcall(ctx, func() (struct{}, error) { return struct{}{}, c.run(n.s) }, nil); err != nil {
		return err
	}
	if n.node != "" {
		n.e.noteGone(n.name, n.node)
	}
	n.node, n.uncertain = "", false
	return nil
}

// nativeEnd removes reqID from the object's holders (recording X = vanished
// when lost) and deletes every child carrying reqID, in one multi guarded by
// the data version read; after a sync. Used for give-backs, lost grants and
// releases whose outcome is unknown. nil: nothing of ours is left.
func (s *session) nativeEnd(objPath, reqID string, lost bool, token int64) error {
	if _, err := s.conn.Sync(objPath); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	e := s.e
	for range 10 {
		data, st, err := s.conn.Get(objPath)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		kids, _, err := s.conn.Children(objPath)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		var ops []any
		for _, k := range kids {
			if c, ok := e.parseNative(k); ok && c.req == reqID {
				ops = append(ops, &zk.DeleteRequest{Path: objPath + "/" + k, Version: -1})
			}
		}
		d, perr := parseNativeData(data)
		if _, named := d.holder(reqID); perr == nil && named {
			h := d.filled(st.Mzxid)
			nd := nativeData{X: d.X}
			for _, x := range h {
				if x.R != reqID {
					nd.H = append(nd.H, x)
				} else if lost {
					nd.X = max(x.T, token)
				}
			}
			ops = append(ops, &zk.SetDataRequest{Path: objPath, Data: nd.marshal(), Version: st.Version})
		} else if len(ops) == 0 {
			return nil
		} else {
			ops = append(ops, &zk.CheckVersionRequest{Path: objPath, Version: st.Version})
		}
		_, err = s.conn.Multi(ops...)
		if err == nil {
			return nil
		}
		if !gone(err) {
			return err
		}
	}
	return fmt.Errorf("lock: %s: %w", objPath, errContended)
}

// nativeLeave is a waiter giving up: it deletes our child and, if a
// release named us meanwhile (a grant we never reported), our name among
// the holders, in one multi guarded by the data version read: a dead name
// would read as a vanished holder (lock-delay) after a clean release. Two
// round trips, as the plugin's deleteOwnChild.
func (s *session) nativeLeave(objPath, node, reqID string) error {
	child := objPath + "/" + node
	for range 10 {
		data, st, err := s.conn.Get(objPath)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		d, perr := parseNativeData(data)
		if _, named := d.holder(reqID); perr != nil || !named {
			if err := s.conn.Delete(child, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			return nil
		}
		nd := nativeData{X: d.X, N: d.N}
		for _, h := range d.filled(st.Mzxid) {
			if h.R != reqID {
				nd.H = append(nd.H, h)
			}
		}
		_, err = s.conn.Multi(
			&zk.DeleteRequest{Path: child, Version: -1},
			&zk.SetDataRequest{Path: objPath, Data: nd.marshal(), Version: st.Version},
		)
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode): // gone already: its name is dead (the safe side)
			return nil
		case !errors.Is(err, zk.ErrBadVersion):
			return err
		}
	}
	return fmt.Errorf("lock: %s: %w", objPath, errContended)
}

// liveNative reports whether k, a child of an object under a native
// root, carries in its name the request id of an acquire in progress or a
// grant held on this session: the audit leaves it without reading it (it
// would read it only to find that id in its data, and leave it). With
// 10,000 waiters on one sidecar, an audit's exists and getData per child
// came between every two handoffs of a drain.
func (s *session) liveNative(k string) bool {
	if s.e.opts.Protocol != Native {
		return false
	}
	c, ok := s.e.parseNative(k)
	if !ok {
		return false
	}
	s.own.mu.Lock()
	defer s.own.mu.Unlock()
	return s.own.live[c.req] > 0
}

// errContended: a native cleanup lost every version race to other writers
// of the object's data (takes, hand-overs, shared holders coming and
// going); the session's cleaner tries again (see cleaner), as after a lost
// connection: given up, it would leave a child, and a name among the
// holders, blocking the object for as long as the session lives.
var errContended = errors.New("holders kept changing")

// nativeGrant is a grant's state under the native protocol.
type nativeGrant struct {
	version int32 // the object node's data version as last seen by the holder
	mzxid   int64 // ... and the zxid that wrote it
	d       *nativeData
	next    []string // whom to hand the lock to, in order (names)
	// learning: learnNative follows arrivals (the grant was contended and
	// came with nobody known to hand over to); a release that still knows
	// of nobody then lists before it writes, after learnNative's listing
	// in flight if there is one (learnList: closed when it is answered).
	learning  bool
	learnList chan struct{}
	// late: learning began when the holder watch was armed, the grant
	// uncontended (nobody behind it then) and held past HolderWatchDelay;
	// its release lists only if the children watch fired since the last
	// listing was sent (arrived).
	late, arrived bool
}

// learn puts node, a waiter of this engine first in line behind this
// grant, at the head of the names the grant may hand over to.
func (g *Grant) learn(node string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.native == nil || slices.Contains(g.native.next, node) {
		return
	}
	g.native.next = append([]string{node}, g.native.next...)
}

// endNative releases (mark) or abandons a native grant: one multi deletes
// our child and rewrites the holders, guarded by the data version. The
// last holder to leave hands the lock to the next foreground waiter(s) it
// knows of in that same write (foreground: no later request can sort ahead
// of it, so it is watching us); otherwise it leaves the object free and
// the waiter watching us takes it.
func (g *Grant) endNative(ctx context.Context, mark bool) error {
	if mark {
		g.learnBeforeRelease(ctx)
	}
	for range 10 {
		g.mu.Lock()
		ng := *g.native
		g.mu.Unlock()
		var d nativeData
		if ng.d != nil {
			d = *ng.d
		} else {
			d = nativeData{H: []nativeHolder{{R: g.reqID, S: g.shared, T: g.token}}}
		}
		nd := nativeData{}
		for _, h := range d.filled(ng.mzxid) {
			if h.R != g.reqID {
				nd.H = append(nd.H, h)
			}
		}
		passed := false
		var named []string // the successors' children, checked in the multi
		var pw *parkWait   // a parked request this multi grants (park.go)
		if len(nd.H) == 0 {
			if !mark {
				nd.X = g.token
			} else {
				var succ []nativeHolder
				succ, named, nd.N = g.e.successors(g.name, ng.next)
				nd.H, passed = succ, len(succ) > 0
				if passed && len(nd.N) > nativeLocalNext && g.e.allLocal(succ) &&
					g.e.listed(g.name, nd.N[nativeLocalNext-1:]) {
					nd.N = nd.N[:nativeLocalNext]
				}
			}
		}
		if mark && !passed && len(nd.H) == 0 && !g.shared {
			// Nobody to name: the first request parked behind us, if any,
			// is granted by this multi (its child created in it).
			if pw = g.e.parkTake(g.name, g); pw != nil {
				nd = nativeData{H: []nativeHolder{{R: pw.n.reqID}}}
			}
		}
		var ops []any
		sentinelAt := 2 + len(named)
		if pw != nil {
			ops, sentinelAt = g.parkOps(pw, nd, ng.version), 3
		} else {
			ops = []any{
				&zk.DeleteRequest{Path: g.objPath + "/" + g.node, Version: -1},
				&zk.SetDataRequest{Path: g.objPath, Data: nd.marshal(), Version: ng.version},
			}
			// A successor is named only while its child lives (checked in
			// the same multi): a waiter that gave up or whose session
			// ended since our listing is not named (a dead name would read
			// as a vanished holder to lock-delay waiters, and a request
			// that queued again under the same id would find itself named
			// out of its turn).
			for _, nm := range named {
				ops = append(ops, &zk.CheckVersionRequest{Path: g.objPath + "/" + nm, Version: -1})
			}
			if passed { // a successor is granted by this write: only beside our sentinel
				ops = append(ops, &zk.CheckVersionRequest{Path: sentinelMark(g.objPath), Version: -1})
			}
		}
		res, err := zmulti(ctx, g.s, ops,
			func(_ []zk.MultiResponse, err error) {
				// the release reported done when ctx ended: any failure
				// (a co-holder's write, a named successor gone, a lost
				// connection) leaves it to the session
				if err != nil {
					g.s.addCleanup(cleanup{kind: cleanNative, objPath: g.objPath, reqID: g.reqID, lost: !mark, token: g.token})
				}
			})
		if pw != nil {
			switch {
			case err == nil:
				g.e.noteGone(g.name, g.node)
				parkGranted(pw, nd, res)
				// The successor's answer is the handoff's path; ours is not
				// (`baton serve` runs one P): let it run first.
				runtime.Gosched()
				g.e.local.Add(1)
				g.e.parkGrants.Add(1)
				g.finish(Released, nil)
				return nil
			case isConnErr(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
				pw.out <- parkOutcome{uncertain: true} // may have landed: it gives back what did
			default:
				pw.out <- parkOutcome{} // nothing created: it queues
			}
			g.e.parkEnd(g.name, pw.n)
		}
		switch {
		case err == nil:
			g.e.noteGone(g.name, g.node)
			if passed {
				if len(nd.H) == 1 && !nd.H[0].S {
					// The requests parked behind us stay parked behind a
					// successor of this engine (its grant hosts them);
					// behind another engine's, they queue (finish).
					if v, ok := g.e.handoffs.Load(nd.H[0].R); ok {
						g.e.parkMove(g.name, g, v.(*nreq))
					}
				}
				g.e.handOver(g.s, nd, res[1].Stat, named)
			}
			if mark && !passed && len(nd.H) == 0 {
				g.mu.Lock()
				g.relVersion = res[1].Stat.Version
				g.mu.Unlock()
			}
			g.finish(Released, nil)
			return nil
		case errors.Is(err, zk.ErrBadVersion):
			// a co-holder came or went (shared), or we were taken for gone
			data, st, rerr := g.s.conn.Get(g.objPath)
			if rerr != nil {
				g.s.addCleanup(cleanup{kind: cleanNative, objPath: g.objPath, reqID: g.reqID, lost: !mark, token: g.token})
				g.finish(Released, nil)
				return nil
			}
			nd, perr := parseNativeData(data)
			if _, ok := nd.holder(g.reqID); perr != nil || !ok {
				g.lose(errors.New("the object's holders no longer name this grant"))
				return g.Err()
			}
			g.noteNative(&nd, st)
			continue
		case errors.Is(err, zk.ErrNoNode) && (passed || pw != nil) && sentinelGone(res, sentinelAt):
			// the sentinel went (an operator): release without naming
			// anyone; the next request finds out (take)
			g.e.objSentinel(g.name, false)
			g.mu.Lock()
			g.native.next = nil
			g.mu.Unlock()
			continue
		case errors.Is(err, zk.ErrNoNode) && goneSuccessor(res, named) != "":
			// that successor left since our listing: hand over without it
			gone := goneSuccessor(res, named)
			g.mu.Lock()
			g.native.next = slices.DeleteFunc(slices.Clone(g.native.next), func(nm string) bool { return nm == gone })
			g.mu.Unlock()
			continue
		case errors.Is(err, zk.ErrNoNode):
			g.lose(errors.New("our lock node was deleted by someone else"))
			return g.Err()
		case isConnErr(err), notSent(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			// Completes in the background. With ctx ended the multi may
			// never have been sent (MultiCtx does not send it then), or
			// its outcome goes to the orphan handler: queue the cleanup
			// here too (a second one finds nothing of ours).
			g.s.addCleanup(cleanup{kind: cleanNative, objPath: g.objPath, reqID: g.reqID, lost: !mark, token: g.token})
			g.finish(Released, nil)
			return nil
		default:
			g.mu.Lock()
			g.releaseFailed()
			g.mu.Unlock()
			return fmt.Errorf("lock: release %q: %w", g.object, err)
		}
	}
	g.s.addCleanup(cleanup{kind: cleanNative, objPath: g.objPath, reqID: g.reqID, lost: !mark, token: g.token})
	g.finish(Released, nil)
	return nil
}

// goneSuccessor returns the successor's child (of named, checked after the
// release multi's first two operations) whose check failed, or "".
func goneSuccessor(res []zk.MultiResponse, named []string) string {
	for i, nm := range named {
		if 2+i < len(res) && errors.Is(res[2+i].Error, zk.ErrNoNode) {
			return nm
		}
	}
	return ""
}

// successors picks, from the names a holder knows to be behind it, whom
// to hand the lock to: the first waiter if it is foreground (exclusive), or
// the leading foreground shared ones; none if the first is background
// (a later foreground request could sort ahead of it and not be seen).
// names are their children; rest is the queue behind them, handed on.
func (e *Engine) successors(name string, next []string) ([]nativeHolder, []string, []string) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	var gone map[string]time.Time
	if st := e.objs[name]; st != nil {
		gone = st.gone
	}
	// live: not deleted by this engine, and of the native form. (Walked in
	// place: a parsed copy of every name was 4 KiB of garbage per handoff.)
	live := func(nm string) (nchild, bool) {
		if _, ok := gone[nm]; ok {
			return nchild{}, false
		}
		return e.parseNative(nm)
	}
	var succ []nativeHolder
	var names []string
	i := 0
	for ; i < len(next); i++ {
		c, ok := live(next[i])
		if !ok {
			continue
		}
		if !c.fg || len(succ) > 0 && (!c.shared || !succ[0].S) {
			break
		}
		succ = append(succ, nativeHolder{R: c.req, S: c.shared})
		names = append(names, c.name)
		if !c.shared {
			i++
			break
		}
	}
	if len(succ) == 0 {
		return nil, nil, nil
	}
	rest := make([]string, 0, min(len(next)-i, nativeMaxNext))
	for _, nm := range next[i:] {
		if len(rest) == nativeMaxNext {
			break
		}
		if _, ok := live(nm); ok {
			rest = append(rest, nm)
		}
	}
	return succ, names, rest
}

// noteNative records the object's data as the holder saw it.
func (g *Grant) noteNative(d *nativeData, st *zk.Stat) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.native.d, g.native.version, g.native.mzxid = d, st.Version, st.Mzxid
}

// watchNative follows the object's holders while the grant lasts: data
// that no longer names us, or the object node deleted, loses the grant.
func (g *Grant) watchNative() {
	for !g.over() {
		data, st, ev, err := g.s.conn.GetW(g.objPath)
		g.e.watchReads.Add(1)
		if err == nil {
			d, perr := parseNativeData(data)
			if _, ok := d.holder(g.reqID); perr != nil || !ok {
				if g.goneOnRead(errors.New("the object's holders no longer name this grant")) {
					continue
				}
				return
			}
			g.noteNative(&d, st)
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
			if g.goneOnRead(errors.New("the object node was deleted")) {
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
		case <-g.ctx.Done():
		case <-g.s.lost:
		case <-ev:
			if !g.heldAfterRelease() {
				return
			}
		}
	}
}

// inspectNative is Inspect under the native protocol: the holders named in
// the object node's data whose children live, then the waiters in order
// (the first max; 0 = all).
func (e *Engine) inspectNative(ctx context.Context, s *session, objPath string, max int) (*Status, error) {
	r, err := s.get(ctx, objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return &Status{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock: inspect %s: %w", objPath, err)
	}
	d, err := objectData(objPath, r.data)
	if err != nil {
		return nil, err
	}
	kids, err := s.children(ctx, objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return &Status{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock: inspect %s: %w", objPath, err)
	}
	order, err := e.nativeOrder(objPath, kids)
	if err != nil {
		return nil, err
	}
	v := &nativeView{d: d, st: r.stat}
	v.setKids(order)
	w := v.waiters()
	if max > 0 && len(w) > max {
		w = w[:max]
	}
	names := make([]string, 0, len(v.live)+len(w))
	for _, h := range v.live {
		names = append(names, v.childOf(h.R))
	}
	for _, c := range w {
		names = append(names, c.name)
	}
	reads := make([]nodeRead, len(names))
	var wg sync.WaitGroup
	for i, nm := range names {
		wg.Go(func() {
			rr, err := zcall(ctx, func() (nodeRead, error) {
				d, st, err := s.conn.Get(objPath + "/" + nm)
				return nodeRead{d, st, err}, err
			}, nil)
			rr.err = err
			reads[i] = rr
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Status{}
	for i, nm := range names {
		rr := reads[i]
		if errors.Is(rr.err, zk.ErrNoNode) {
			continue
		}
		if rr.err != nil {
			return nil, fmt.Errorf("lock: inspect %s/%s: %w", objPath, nm, rr.err)
		}
		node := toNode(nm, rr.data, rr.stat)
		c, _ := e.parseNative(nm)
		node.Shared = c.shared
		if i < len(v.live) {
			node.Token = v.live[i].T
			out.Holders = append(out.Holders, node)
			continue
		}
		out.Waiters = append(out.Waiters, node)
	}
	if len(out.Holders) > 0 {
		h := out.Holders[0]
		out.Holder = &h
	}
	return out, nil
}

// checkNative is Check under the native protocol (after the sync): token
// is current if a holder named in the object's data, whose child lives,
// has it.
func (e *Engine) checkNative(ctx context.Context, s *session, objPath string, token int64) (bool, int64, error) {
	st, err := e.inspectNative(ctx, s, objPath, 1)
	if err != nil {
		return false, 0, err
	}
	var holder int64
	for _, h := range st.Holders {
		if h.Token == token {
			return true, token, nil
		}
		holder = max(holder, h.Token)
	}
	return false, holder, nil
}

// ensureNative makes sure the object node exists with its sentinel: a
// persistent child named privateLock, created with the object node. The
// plugin's layout takes the lock by creating an ephemeral privateLock, so
// under a native object no plugin participant (the original plugin, or
// Baton on the plugin protocol) can ever be granted: it waits, and Baton
// on the plugin protocol reports ErrForeignNode. An ephemeral privateLock
// found here is a plugin holder under a native root: ErrForeignNode. Once
// per object and engine (remembered while the engine knows the object).
func (e *Engine) ensureNative(ctx context.Context, s *session, name, objPath string) error {
	_, err := e.ensureNativeFrom(ctx, s, name, objPath, false)
	return err
}

// nativeObjectOps creates a native object node: the node with free data,
// its sentinel (privateLock, persistent) and the sentinel's mark.
func (e *Engine) nativeObjectOps(objPath string) []any {
	free := nativeData{}.marshal()
	return []any{
		&zk.CreateRequest{Path: objPath, Data: free, Acl: e.acl, Flags: zk.FlagPersistent},
		&zk.CreateRequest{Path: objPath + "/" + privateLock, Data: free, Acl: e.acl, Flags: zk.FlagPersistent},
		&zk.CreateRequest{Path: sentinelMark(objPath), Acl: e.acl, Flags: zk.FlagPersistent},
	}
}

// ensureNativeFrom is ensureNative; missing: the caller just found no
// object node (its first look is the create, not a read). created: this
// call made the object node with its sentinel (the data: no holders).
func (e *Engine) ensureNativeFrom(ctx context.Context, s *session, name, objPath string, missing bool) (created bool, _ error) {
	e.objMu.Lock()
	st := e.objs[name]
	ok := st != nil && st.sentinel
	e.objMu.Unlock()
	if ok {
		return false, nil
	}
	sentinel := objPath + "/" + privateLock
	mark := sentinelMark(objPath)
	data := nativeData{}.marshal()
	for range 10 {
		if missing {
			missing = false
			_, err := zcall(ctx, func() ([]zk.MultiResponse, error) { return s.conn.Multi(e.nativeObjectOps(objPath)...) }, nil)
			switch {
			case err == nil:
				e.objSentinel(name, true)
				return true, nil
			case errors.Is(err, zk.ErrNoNode):
				if err := e.ensureRoot(ctx, s); err != nil {
					return false, err
				}
				missing = true
				continue
			case errors.Is(err, zk.ErrNodeExists): // made meanwhile: look
				continue
			default:
				return false, err
			}
		}
		st, err := zcall(ctx, func() (*zk.Stat, error) {
			ok, st, err := s.conn.Exists(sentinel)
			if err == nil && !ok {
				st = nil
			}
			return st, err
		}, nil)
		if err != nil {
			return false, err
		}
		if st != nil {
			if st.EphemeralOwner != 0 {
				return false, fmt.Errorf("%w: %s/%s is a plugin holder's (ephemeral) under the native root %s", ErrForeignNode, path.Base(objPath), privateLock, e.opts.Root)
			}
			if st.NumChildren > 0 {
				e.objSentinel(name, true)
				return false, nil
			}
			_, err = zcall(ctx, func() (string, error) { return s.conn.Create(mark, nil, zk.FlagPersistent, e.acl) }, nil)
			if err != nil && !errors.Is(err, zk.ErrNodeExists) && !errors.Is(err, zk.ErrNoNode) {
				return false, err
			}
			continue // look again
		}
		_, err = zcall(ctx, func() ([]zk.MultiResponse, error) { return s.conn.Multi(e.nativeObjectOps(objPath)...) }, nil)
		if err == nil { // all three ours
			e.objSentinel(name, true)
			return true, nil
		}
		if errors.Is(err, zk.ErrNodeExists) { // the object node exists: add the sentinel
			_, err = zcall(ctx, func() ([]zk.MultiResponse, error) {
				return s.conn.Multi(
					&zk.CreateRequest{Path: sentinel, Data: data, Acl: e.acl, Flags: zk.FlagPersistent},
					&zk.CreateRequest{Path: mark, Acl: e.acl, Flags: zk.FlagPersistent},
				)
			}, nil)
		}
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			continue // look again
		case errors.Is(err, zk.ErrNoNode):
			if err := e.ensureRoot(ctx, s); err != nil {
				return false, err
			}
		default:
			return false, err
		}
	}
	return false, fmt.Errorf("lock: could not create %s: it keeps vanishing", sentinel)
}

// sentinelMark is the sentinel's child: an ephemeral node (a plugin
// holder's privateLock) cannot have one, so a grant's multi that checks it
// proves the object's privateLock is our persistent sentinel at that
// moment, however the engine last saw it (an operator may have deleted the
// sentinel, or the object node, since).
func sentinelMark(objPath string) string { return objPath + "/" + privateLock + "/native" }

// sentinelGone reports whether a failed multi failed on its check of the
// sentinel's mark (operation i).
func sentinelGone(res []zk.MultiResponse, i int) bool {
	return i < len(res) && errors.Is(res[i].Error, zk.ErrNoNode)
}

// learnWaitMax bounds how long a request waits for a local holder's
// listing in flight before creating its child (a round trip is well under).
const learnWaitMax = 20 * time.Millisecond

// objLearnList records the listing in flight of a holder of this engine
// learning arrivals on the object (set: done non-nil; cleared: only if it
// is still was).
func (e *Engine) objLearnList(name string, done, was chan struct{}) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil && (done != nil || st.learnList == was) {
		st.learnList = done
	}
}

// objLearning returns the listing in flight of a holder of this engine
// learning arrivals on the object, or nil.
func (e *Engine) objLearning(name string) chan struct{} {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil {
		return st.learnList
	}
	return nil
}

// objSentinelKnown reports whether the engine knows the object's sentinel.
func (e *Engine) objSentinelKnown(name string) bool {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	return st != nil && st.sentinel
}

// objSentinel records whether the engine knows the object's sentinel.
func (e *Engine) objSentinel(name string, ok bool) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil {
		st.sentinel = ok
	}
}

// nativeHandoff is a grant handed over in process: the holder's release
// multi named a waiter of the same engine and session, whose wake-up needs
// no watch and no read (the multi's answer has the token).
type nativeHandoff struct {
	s *session
	// node is the child the multi checked and named: a request that gave
	// everything back and queued again since (its name out of the data) is
	// not the one named, and a stale message must not grant it.
	node string
	d    nativeData
	st   *zk.Stat // the object node's, after the multi
}

// allLocal reports whether every holder of hs waits on this engine (has a
// handoff channel: handOver wakes it in process, or its watch does).
func (e *Engine) allLocal(hs []nativeHolder) bool {
	for _, h := range hs {
		if _, ok := e.handoffs.Load(h.R); !ok {
			return false
		}
	}
	return true
}

// listed reports whether the engine's latest listing of the object (the
// one topUp extends from) holds every name: a local successor handed
// fewer names than the release knows gets the rest back from it only if
// it holds the last name kept (topUp's anchor) and each one dropped (one
// it lacks, handed on by another engine's release, would take a listing
// to find again).
func (e *Engine) listed(name string, names []string) bool {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		return false
	}
	for _, nm := range names {
		c, ok := e.parseNative(nm)
		if !ok {
			return false
		}
		if _, found := slices.BinarySearchFunc(st.nq, c, grantOrder); !found {
			return false
		}
	}
	return true
}

// handOver wakes the local waiters the release just named (d.H), in the
// session whose multi named them.
func (e *Engine) handOver(s *session, d nativeData, st *zk.Stat, named []string) {
	for i, h := range d.H {
		v, ok := e.handoffs.Load(h.R)
		if !ok || i >= len(named) {
			continue // another sidecar's: it wakes on its watch
		}
		select {
		case v.(*nreq).handed <- nativeHandoff{s: s, node: named[i], d: d, st: st}:
			e.local.Add(1)
		default:
		}
	}
}

// nativeLearnPause spaces a holder's listings while it learns arrivals
// behind it (learnNative), in nanoseconds. An atomic for tests: one may
// set it while another engine's learnNative still reads it.
var nativeLearnPause atomic.Int64

func init() { nativeLearnPause.Store(int64(5 * time.Millisecond)) }

// knowQueue records, from a listing, the waiters the grant may hand
// over to: every child but the holders named in the data it last saw. It
// reports whether the first of them is foreground (later arrivals sort
// behind it).
func (g *Grant) knowQueue(ks []nchild) (fgFirst bool) {
	g.e.noteQueue(g.name, ks)
	g.mu.Lock()
	defer g.mu.Unlock()
	holders := map[string]bool{}
	if d := g.native.d; d != nil {
		for _, h := range d.H {
			holders[h.R] = true
		}
	}
	g.native.next = waitersBut(ks, func(r string) bool { return holders[r] }, g.reqID)
	if len(g.native.next) == 0 {
		return false
	}
	c, ok := g.e.parseNative(g.native.next[0])
	return ok && c.fg
}

// learnBeforeRelease makes sure a releasing grant that follows arrivals
// (learnNative) and knows of nobody to hand over to has seen the arrivals
// its caller could know of: it waits for learnNative's listing in flight
// rather than sending its own behind it (a waiter that arrived just before
// the release fired the holder's watch, and that listing names it), and
// lists only when it still knows of nobody. A contended grant lists even
// when its watch has not fired: the event can still be in the socket, or
// its goroutine not yet run, when the release starts (W4's ping-pong
// releases as soon as the waiter's child exists). A late-learning grant
// (uncontended, held past HolderWatchDelay) does not: most often nobody
// came, and a caller releasing the moment it sees a waiter (WaitChange)
// whose event is not read yet leaves that waiter to take the free object
// (two writes instead of one).
//
// None of this is needed for safety: a successor named is checked in the
// release multi, and one arriving unseen finds the object free and takes
// it (two writes instead of one).
func (g *Grant) learnBeforeRelease(ctx context.Context) {
	g.mu.Lock()
	unknown := g.native.learning && len(g.native.next) == 0
	list := g.native.learnList
	g.mu.Unlock()
	if !unknown {
		return
	}
	// Join learnNative's listing in flight, if any (the grant's first, when
	// the waiter's create came right after the grant). There is at most
	// one: learnNative starts none once the release has begun (end sets
	// releasing before it calls us), so if it names nobody, list ourselves.
	if list != nil {
		select {
		case <-list:
		case <-ctx.Done():
			return
		}
		g.mu.Lock()
		unknown = len(g.native.next) == 0
		g.mu.Unlock()
		if !unknown {
			return
		}
	}
	g.mu.Lock()
	quiet := g.native.late && !g.native.arrived
	g.mu.Unlock()
	if quiet {
		// An uncontended grant whose children watch has not fired since
		// its last listing: most often nobody came. Listing on every such
		// release would cost a long uncontended hold a read on its path;
		// an arrival whose event is still on its way takes the lock
		// itself (two writes), as before this grant learned at all.
		return
	}
	if g.e.parkWaiting(g.name, g) {
		// A request parked behind us takes the lock in our multi; the
		// multi's answer tells whether anyone else queued (park.go).
		return
	}
	g.e.relLists.Add(1)
	if kids, err := g.s.children(ctx, g.objPath); err == nil {
		if ks, err := g.e.nativeOrder(g.objPath, kids); err == nil {
			g.knowQueue(ks)
		}
	}
}

// fastMultiHook, when set (tests only), runs in fast just before its multi
// is sent, with the object node's path.
var fastMultiHook atomic.Pointer[func(objPath string)]

// learnListHook, when set (tests only), runs in learnNative with its
// listing in flight (learnList set), just before the listing is sent.
var learnListHook atomic.Pointer[func()]

// learnStartHook, when set (tests only), runs first in learnNative: a
// goroutine not yet scheduled when the grant's release begins.
var learnStartHook atomic.Pointer[func()]

// learnNative keeps the waiters a holder may hand over to up to date while
// it holds: a children watch on the object, re-listed when it fires (an
// arrival), until the grant ends or its release begins. The first arrival
// after the grant is listed at once; later ones at most once per
// nativeLearnPause (bursts).
func (g *Grant) learnNative() {
	if f := learnStartHook.Load(); f != nil {
		(*f)()
	}
	g.mu.Lock()
	late := g.native.late
	g.mu.Unlock()
	if late && g.e.parkWaiting(g.name, g) {
		// Requests of this engine are parked behind us: our release
		// grants the first of them in its one write, whoever else
		// queued, so learning the queue would only add a listing per
		// long hold to parking's one write per acquisition.
		return
	}
	var relisted time.Time // when the last listing after a change was sent
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-g.s.lost:
			return
		default:
		}
		if g.isReleasing() {
			return
		}
		done := make(chan struct{})
		g.mu.Lock()
		g.native.learnList = done
		g.native.arrived = false
		g.mu.Unlock()
		g.e.objLearnList(g.name, done, nil)
		g.e.learnLists.Add(1)
		if f := learnListHook.Load(); f != nil {
			(*f)()
		}
		kids, _, ev, err := g.s.conn.ChildrenW(g.objPath)
		var ks []nchild
		if err == nil {
			ks, err = g.e.nativeOrder(g.objPath, kids)
		}
		fgFirst := err == nil && g.knowQueue(ks)
		g.mu.Lock()
		g.native.learnList = nil
		g.mu.Unlock()
		g.e.objLearnList(g.name, nil, done)
		close(done)
		if err != nil {
			return
		}
		if fgFirst {
			// The first waiter is foreground: every later arrival sorts
			// behind it, so listing again would name nobody else first.
			// (With thousands arriving, each arrival's re-listing of
			// thousands of children clogged the session's connection.)
			return
		}
		if len(ks) > nativeMaxNext {
			// Background waiters first, more than a release hands on: a
			// foreground arrival would sort ahead of them and could be
			// named, but re-listing a long queue on every arrival costs
			// more than that arrival's own take (two writes).
			return
		}
		select {
		case <-g.ctx.Done():
			return
		case <-g.s.lost:
			return
		case <-ev:
		}
		g.mu.Lock()
		g.native.arrived = true
		g.mu.Unlock()
		// Arrivals come in bursts: at most one listing per pause after
		// the first, so a burst is listed a few times, not once per
		// arrival; a lone arrival (a ping-pong) is listed at once, so
		// that a release coming soon after it joins that listing.
		if d := time.Duration(nativeLearnPause.Load()) - time.Since(relisted); !relisted.IsZero() && d > 0 {
			select {
			case <-g.ctx.Done():
				return
			case <-time.After(d):
			}
		}
		relisted = time.Now()
	}
}

// renew gives the request a new request id (the caller's part kept, a
// new suffix): its ownership, its node data and its registration for
// in-process handoffs move to it.
func (n *nreq) renew(ctx context.Context) error {
	old := n.reqID
	base, _, _ := strings.Cut(old, "~")
	id := base + "~" + newRequestID()[:12]
	if err := n.s.own.enter(ctx, n.objPath, id); err != nil {
		return err
	}
	var d nodeData
	if err := json.Unmarshal(n.data, &d); err == nil {
		d.Req = id
		n.data, _ = json.Marshal(d)
	}
	n.reqID = id
	n.s.own.leave(n.objPath, old)
	n.e.handoffs.CompareAndDelete(old, n)
	n.e.handoffs.Store(id, n)
	return nil
}
