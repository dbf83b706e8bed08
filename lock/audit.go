package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// The audit is the second line behind recovery and the cleaner: now and
// then (Options.AuditInterval) and after every reconnect, the session lists
// the objects it has touched and deletes every ephemeral node it owns there
// that nothing owns any more: a node whose request id is neither an acquire
// in progress nor a grant held on this session. A bug that leaves such a
// node (issue 23: a privateLock of a live, idle session) would otherwise
// block the object for everyone until the session ends.
//
// Ownership is by request id, not by node name, because a create whose reply
// has not arrived yet has no name on our side: every node carries its
// request's id, and the id is live from before the request's first create
// until the request fails or its grant ends (see owners). An id not live when
// the audit looks will never own a node again, except through a caller
// reusing AcquireOptions.RequestID: the audit reserves the id while it
// deletes, and a new acquire with that id waits for the reservation.

// OrphanObserver is an optional extension of Observer: an Observer that
// implements it is told about every node the audit deleted.
type OrphanObserver interface {
	// OrphanDeleted is called once per node of the engine's own session
	// that nothing owned and the audit deleted (node is "privateLock" or a
	// child's name).
	OrphanDeleted(object, node string)
}

// owners tracks which request ids own nodes of a session, and the objects
// the session has touched. Its methods are safe for concurrent use.
type owners struct {
	mu       sync.Mutex
	live     map[string]int           // request id → acquires in progress and grants held with it
	reserved map[string]chan struct{} // request ids the audit is deleting a node of; closed when done
	objects  map[string]*touched      // object path → use by this session; nil: no audit, not tracked
	// names: the plugin protocol's children of live requests (object
	// path/child → request id, and the creation zxid of the object node
	// they were seen in), so that the audit leaves them unread (a plugin
	// child's name does not carry its request id); byReq: each request's,
	// dropped when it stops being live.
	names map[string]nameRec
	byReq map[string][]string
}

// nameRec: a child's name stands for the request's node only in the object
// node it was seen in. Names repeat when the object node is renewed (an
// operator's deleteall, a reaped container, the renewal near the sequence
// limit); a request live across a renewal keeps its old name, which a node
// of the new object node may carry (TestReviewAuditOrphanAtRenewedName).
type nameRec struct {
	req      string
	objCzxid int64
}

type touched struct {
	active int    // acquires in progress and grants held on the object
	epoch  uint64 // bumped by every acquire: an audit forgets the object only if unchanged
}

// newOwners tracks the objects touched only for an audit (audit true).
func newOwners(audit bool) *owners {
	o := &owners{live: make(map[string]int), reserved: make(map[string]chan struct{}), names: make(map[string]nameRec), byReq: make(map[string][]string)}
	if audit {
		o.objects = make(map[string]*touched)
	}
	return o
}

// enter makes reqID live on objPath before the request creates anything;
// it waits while the audit deletes a node carrying the same id.
func (o *owners) enter(ctx context.Context, objPath, reqID string) error {
	for {
		o.mu.Lock()
		ch := o.reserved[reqID]
		if ch == nil {
			o.live[reqID]++
			if o.objects != nil {
				t := o.objects[objPath]
				if t == nil {
					t = &touched{}
					o.objects[objPath] = t
				}
				t.active++
				t.epoch++
			}
			o.mu.Unlock()
			return nil
		}
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// leave ends what enter started: the request failed, or its grant ended.
func (o *owners) leave(objPath, reqID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live[reqID]--; o.live[reqID] <= 0 {
		delete(o.live, reqID)
		for _, p := range o.byReq[reqID] {
			if o.names[p].req == reqID {
				delete(o.names, p)
			}
		}
		delete(o.byReq, reqID)
	}
	if t := o.objects[objPath]; t != nil {
		t.active--
	}
}

// name records node, a child of objPath that live request reqID created
// (the plugin protocol), seen in the object node created at objCzxid, until
// reqID stops being live.
func (o *owners) name(objPath, node, reqID string, objCzxid int64) {
	p := objPath + "/" + node
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live[reqID] <= 0 {
		return
	}
	if o.names[p].req != reqID {
		o.byReq[reqID] = append(o.byReq[reqID], p)
	}
	o.names[p] = nameRec{reqID, objCzxid}
}

// liveNode reports whether the child at p, listed in the object node
// created at objCzxid, was created there by a request that is still live
// (name): the audit would read it only to find that request's id in its
// data, and leave it.
func (o *owners) liveNode(p string, objCzxid int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	rec, ok := o.names[p]
	return ok && rec.objCzxid == objCzxid && o.live[rec.req] > 0
}

// reserve reports whether reqID is not live, and if so keeps it from
// becoming live until unreserve.
func (o *owners) reserve(reqID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live[reqID] > 0 || o.reserved[reqID] != nil {
		return false
	}
	o.reserved[reqID] = make(chan struct{})
	return true
}

func (o *owners) unreserve(reqID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ch := o.reserved[reqID]; ch != nil {
		close(ch)
		delete(o.reserved, reqID)
	}
}

type touchedObj struct {
	path  string
	epoch uint64
}

func (o *owners) snapshot() []touchedObj {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]touchedObj, 0, len(o.objects))
	for p, t := range o.objects {
		out = append(out, touchedObj{p, t.epoch})
	}
	return out
}

// forget drops an object in which the audit found no node of the session,
// unless an acquire touched it since the audit began or is still active.
func (o *owners) forget(objPath string, epoch uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t := o.objects[objPath]; t != nil && t.active <= 0 && t.epoch == epoch {
		delete(o.objects, objPath)
	}
}

// auditor runs the session's audit every Options.AuditInterval and after
// every reconnect, until the session ends.
func (s *session) auditor() {
	every := s.e.opts.AuditInterval
	if every < 0 {
		return
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for s.woken(s.auditWake, t.C) {
		s.audit()
		t.Reset(every)
	}
}

// auditWorkers bounds the objects audited at once (requests pipeline on the
// one connection).
const auditWorkers = 8

// audit looks at every object the session has touched; it stops at a
// connection loss (the reconnect runs it again).
func (s *session) audit() {
	if err := s.waitConnected(s.e.ctx); err != nil {
		return
	}
	sid := s.sessionID()
	s.settleDeletes(sid)
	objs := s.own.snapshot()
	var stop atomic.Bool
	sem := make(chan struct{}, auditWorkers)
	var wg sync.WaitGroup
	for _, o := range objs {
		if stop.Load() {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			found, err := s.auditObject(o.path, sid)
			switch {
			case err == nil:
				if !found {
					s.own.forget(o.path, o.epoch)
				}
			case isConnErr(err), notSent(err), errors.Is(err, zk.ErrClosing):
				stop.Store(true)
			default:
				s.log.Warn("audit of our nodes failed", "object", objectOf(o.path), "err", err)
			}
		})
	}
	wg.Wait()
}

// auditObject deletes the nodes of session sid under objPath that no live
// request id owns. found reports whether any node of the session was there.
func (s *session) auditObject(objPath string, sid int64) (found bool, err error) {
	kids, ost, err := s.conn.Children(objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	hasPL := false
	for _, k := range kids {
		if k == privateLock {
			hasPL = true
			continue
		}
		if !s.connected() { // cut mid-audit: stop, the reconnect audits again
			return found, zk.ErrConnectionClosed
		}
		if s.liveNative(k) || s.own.liveNode(objPath+"/"+k, ost.Czxid) {
			found = true
			continue
		}
		ok, st, err := s.conn.Exists(objPath + "/" + k)
		if err != nil {
			return found, err
		}
		if !ok || st.EphemeralOwner != sid {
			continue
		}
		found = true
		if err := s.auditChild(objPath, k, sid); err != nil {
			return found, err
		}
	}
	if hasPL {
		mine, err := s.auditPL(objPath, sid)
		found = found || mine
		if err != nil {
			return found, err
		}
	}
	return found, nil
}

// cleanupQueued reports whether a cleanup about objPath is queued: the
// nodes it deletes are not orphans (a grant released or an acquire given up
// while disconnected leaves them to the cleaner). The audit leaves the
// object to the cleaner; if the cleaner gives up, a later audit looks again.
func (s *session) cleanupQueued(objPath string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cleanups {
		if c.objPath == objPath {
			return true
		}
	}
	return false
}

// reqOf returns the request id in a node's data ("" if none).
func reqOf(data []byte) string {
	var d nodeData
	if json.Unmarshal(data, &d) != nil {
		return ""
	}
	return d.Req
}

// auditChild deletes our child k unless a live request id owns it.
func (s *session) auditChild(objPath, k string, sid int64) error {
	p := objPath + "/" + k
	data, st, err := s.conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	req := reqOf(data)
	if st.EphemeralOwner != sid || s.cleanupQueued(objPath) || !s.own.reserve(req) {
		return nil // owned by a request in progress, a grant or a queued cleanup
	}
	err = s.conn.Delete(p, st.Version)
	s.own.unreserve(req)
	if gone(err) {
		return nil
	}
	if err != nil {
		s.deleteInDoubt(err, sid, objPath, k, req, st.Czxid, 0)
		return err
	}
	s.orphanDeleted(objPath, k, req, 0)
	return nil
}

// auditPL deletes privateLock if our session owns it and no live request id
// does, in a multi that checks the object node's version read before it
// (every Baton grant bumps it) and privateLock's own.
func (s *session) auditPL(objPath string, sid int64) (mine bool, err error) {
	_, ost, err := s.conn.Get(objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	data, pst, err := s.conn.Get(objPath + "/" + privateLock)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if pst.EphemeralOwner != sid {
		return false, nil
	}
	if pst.Version < plVersion {
		// Not created the way Baton creates privateLock: leave it (its
		// version cannot tell it from a plugin's that replaced it).
		s.log.Warn("audit: a privateLock of this session not written by Baton; left alone", "object", objectOf(objPath))
		return true, nil
	}
	req := reqOf(data)
	if s.cleanupQueued(objPath) || !s.own.reserve(req) {
		return true, nil
	}
	_, err = s.conn.Multi(
		&zk.CheckVersionRequest{Path: objPath, Version: ost.Version},
		&zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: pst.Version},
	)
	s.own.unreserve(req)
	if gone(err) {
		return true, nil // changed meanwhile: the next audit looks again
	}
	if err != nil {
		s.deleteInDoubt(err, sid, objPath, privateLock, req, pst.Czxid, pst.Czxid)
		return true, err
	}
	s.orphanDeleted(objPath, privateLock, req, pst.Czxid)
	return true, nil
}

// doubtfulDelete is an audit delete whose reply was lost with the
// connection: it may have been applied.
type doubtfulDelete struct {
	sid                int64
	objPath, node, req string
	czxid, token       int64
}

// deleteInDoubt remembers a delete that was sent but whose answer was lost,
// so that the next audit counts it if it was applied (review of issue 23:
// such an orphan was gone and never counted nor named).
func (s *session) deleteInDoubt(err error, sid int64, objPath, node, req string, czxid, token int64) {
	if !isConnErr(err) {
		return
	}
	s.doubtMu.Lock()
	defer s.doubtMu.Unlock()
	if len(s.doubts) < 1024 {
		s.doubts = append(s.doubts, doubtfulDelete{sid, objPath, node, req, czxid, token})
	}
}

// settleDeletes, at the start of an audit of session sid, counts the
// doubtful deletes of that session that were applied: the node is gone, or
// a node of that name was created again since (another creation zxid).
// One still there is left to this audit. A node freed meanwhile by an
// operator (FreeOrphan) would be counted here too: both are deletions of
// an orphan of this session.
func (s *session) settleDeletes(sid int64) {
	s.doubtMu.Lock()
	ds := s.doubts
	s.doubts = nil
	s.doubtMu.Unlock()
	var keep []doubtfulDelete
	for _, d := range ds {
		if d.sid != sid {
			continue // that session ended: its nodes went with it
		}
		if !s.connected() {
			keep = append(keep, d)
			continue
		}
		ok, st, err := s.conn.Exists(d.objPath + "/" + d.node)
		switch {
		case err != nil:
			keep = append(keep, d) // the next audit tries again
		case !ok || st.Czxid != d.czxid:
			s.orphanDeleted(d.objPath, d.node, d.req, d.token)
		}
	}
	if len(keep) > 0 {
		s.doubtMu.Lock()
		s.doubts = append(s.doubts, keep...)
		s.doubtMu.Unlock()
	}
}

func (s *session) orphanDeleted(objPath, node, req string, token int64) {
	obj := objectOf(objPath)
	args := []any{"object", obj, "node", node, "request_id", req, "session", fmt.Sprintf("0x%x", s.sessionID())}
	if token != 0 {
		args = append(args, "token", token)
	}
	s.log.Warn("audit: deleted a node of this session that no request or grant owned (orphan)", args...)
	s.e.observe(func(o Observer) {
		if oo, ok := o.(OrphanObserver); ok {
			oo.OrphanDeleted(obj, node)
		}
	})
}

// objectOf returns the object name of an object path (its escaped name if
// it does not unescape).
func objectOf(objPath string) string {
	name := objPath
	for i := len(objPath) - 1; i >= 0; i-- {
		if objPath[i] == '/' {
			name = objPath[i+1:]
			break
		}
	}
	if o, err := UnescapeObject(name); err == nil {
		return o
	}
	return name
}
