package lock

import (
	"context"
	"fmt"
	"path"
	"slices"
	"time"
)

// listing is one getChildren answer for an object, shared by the engine's
// requests on it.
//
// ZooKeeper answers a session's requests in order, so a listing sent after a
// request's create was answered shows that create: any such listing of the
// same session serves the request as well as one of its own. Concurrent
// waiters on one object (10,000 of them on one sidecar, say) join the
// listing in flight instead of each sending one.
type listing struct {
	gen    uint64      // session generation it was sent in
	issued time.Time   // taken before the request was sent
	queued bool        // not sent yet: waits for the one in flight (any request may join it)
	prev   *listing    // while queued, the one it waits for (firstAfter reads it)
	queue  []string    // children but privateLock, in grant order
	locked bool        // privateLock exists
	czxid  int64       // the object node's creation zxid
	view   *nativeView // native protocol: the object's data, then its children (read-only once done)
	err    error
	done   chan struct{} // closed when answered
	// gonePrefix: the leading children of queue seen in objState.gone by
	// firstAfterLocked (under objMu), while objState.goneDrops was
	// goneDrops. Children are only added to gone until something is
	// removed, so the prefix stays gone while goneDrops stands: a long
	// local drain walks each child once, not once per handoff.
	gonePrefix int
	goneDrops  uint64
}

// listShared returns a listing of the object sent after after, in session s:
// the one in flight if it qualifies, else a new one.
func (e *Engine) listShared(ctx context.Context, s *session, name, objPath string, after time.Time) (*listing, error) {
	e.objMu.Lock()
	st := e.objs[name]
	if st == nil { // not registered (cannot happen for an active request): list alone
		st = &objState{predict: -1}
	}
	l := st.list
	if l == nil || l.gen != s.gen || !l.queued && !l.issued.After(after) || l.isDone() && l.err != nil {
		// One in flight but sent too early for us: ours is sent when it
		// is answered, and every request arriving meanwhile joins ours.
		// At most one listing per object is in flight (with 10,000
		// waiters queueing, each getChildren answer is ≈ 300 KB).
		var prev *listing
		if l != nil && l.gen == s.gen && !l.isDone() {
			prev = l
		}
		l = &listing{gen: s.gen, issued: time.Now(), queued: prev != nil, prev: prev, done: make(chan struct{})}
		st.list = l
		e.lists.Add(1)
		if !e.track(func() {
			if prev != nil {
				<-prev.done
				e.objMu.Lock()
				l.issued, l.queued, l.prev = time.Now(), false, nil // sent after every joiner's after
				e.objMu.Unlock()
			}
			var err error
			if e.opts.Protocol == Native {
				l.view, err = e.readNativeView(s, objPath)
			} else {
				err = e.readListing(s, name, objPath, l)
			}
			l.err = err
			close(l.done)
			if err == nil {
				e.objMu.Lock()
				if st := e.objs[name]; st != nil {
					for n, at := range st.gone { // reflected in this listing
						if at.Before(l.issued) {
							delete(st.gone, n)
							st.goneDrops++
						}
					}
				}
				e.objMu.Unlock()
			}
		}) {
			l.err = ErrClosed // not sent: the engine is closed
			close(l.done)
		}
	}
	e.objMu.Unlock()
	select {
	case <-l.done:
		return l, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readListing fills l (plugin protocol) with the object's children in
// grant order.
func (e *Engine) readListing(s *session, name, objPath string, l *listing) error {
	c, stat, err := s.conn.Children(objPath)
	if err != nil {
		return err
	}
	if err := e.pluginOnly(objPath, c); err != nil {
		return err
	}
	l.queue, l.locked = sortedQueue(c)
	l.czxid = stat.Czxid
	l.queue, err = e.ordered(s, name, objPath, stat.Czxid, l.queue) // aging
	return err
}

func (l *listing) isDone() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// noteGone records that this engine deleted a child of the object (the
// delete was acknowledged): it is gone for good (names do not repeat while
// the object node lives, and a listing showing it is of that node).
func (e *Engine) noteGone(name, child string) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		return
	}
	if st.gone == nil {
		st.gone = make(map[string]time.Time)
	}
	if len(st.gone) < 1<<16 {
		st.gone[child] = time.Now()
	}
}

// firstAfter reports whether node, a foreground child of session gen, is
// first in order now that watched (the node it watched) is gone: every child
// that sorted ahead of it in the latest completed listing showing it is
// watched or a child this engine has since deleted. Only children with a
// lower sequence number can sort ahead of a foreground node, and all of them
// existed when that listing was answered.
func (e *Engine) firstAfter(name string, gen uint64, node, watched string) bool {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	return firstAfterLocked(e.objs[name], gen, node, watched)
}

// firstAfterLocked is firstAfter with e.objMu held. It costs O(1) per
// handoff of a local drain, not O(queue): the listing's gonePrefix skips
// the children already seen gone (a 10,000-waiter drain spent a quarter of
// the sidecar's CPU here rescanning them). A node that is itself gone is
// never first.
func firstAfterLocked(st *objState, gen uint64, node, watched string) bool {
	if st == nil || st.list == nil || st.list.gen != gen {
		return false
	}
	l := st.list
	if l.queued { // the latest sent is the one it waits for
		l = l.prev
	}
	if !l.isDone() {
		return false
	}
	if l.err != nil {
		return false
	}
	if _, ok := st.gone[node]; ok {
		return false
	}
	if l.goneDrops != st.goneDrops {
		l.gonePrefix, l.goneDrops = 0, st.goneDrops
	}
	c := l.gonePrefix
	for c < len(l.queue) {
		if _, ok := st.gone[l.queue[c]]; !ok {
			break
		}
		c++
	}
	l.gonePrefix = c
	rest := l.queue[c:]
	idx := slices.Index(rest, node)
	if idx < 0 {
		return false
	}
	for _, a := range rest[:idx] {
		if a == watched {
			continue
		}
		if _, ok := st.gone[a]; !ok {
			return false
		}
	}
	return true
}

// pluginOnly refuses a native protocol's child under a plugin root: the
// plugin's order cannot place it, and it would never be a grant.
func (e *Engine) pluginOnly(objPath string, kids []string) error {
	for _, k := range kids {
		if _, ok := e.parseNative(k); ok {
			return fmt.Errorf("%w: %s/%s (a native protocol node) under the plugin root %s (this root is zookeeper.lock.protocol=plugin)", ErrForeignNode, path.Base(objPath), k, e.opts.Root)
		}
	}
	return nil
}
