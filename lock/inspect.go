package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Status is an object's holder and waiters, cluster-wide, in grant order.
type Status struct {
	Object string
	Holder *Node // nil when free; with shared holders, the first of Holders
	// Holders are every holder: one, or (native protocol) several shared
	// holders. Empty when free.
	Holders []Node
	Waiters []Node
	// Parked counts this engine's requests parked behind its holder of
	// the object (native protocol): waiting, and not in Waiters (not in
	// ZooKeeper yet). Other engines' are not known here.
	Parked int
}

// Inspect returns the object's holder and waiters in grant order. Nodes Baton
// did not create are listed with Known false.
func (e *Engine) Inspect(ctx context.Context, object string) (*Status, error) {
	s, objPath, err := e.objectPath(ctx, object)
	if err != nil {
		return nil, err
	}
	st, err := e.inspect(ctx, s, objPath, 0)
	if err != nil {
		return nil, err
	}
	st.Object = object
	st.Parked = e.parkedOn(path.Base(objPath))
	return st, nil
}

// errorInspect bounds the read of an object for a failed wait's error.
const errorInspect = 2 * time.Second

// inspectForError reads the object's holder and first 16 waiters for a
// failed wait's InstanceLockError, one read shared by every wait of this
// engine failing on the object while it is in flight: a burst of waits
// timing out together (thousands queued with one wait_ms) would otherwise
// send a listing of the whole queue each, and the session's requests,
// its keepers' included, would queue behind them. shared reports that
// the view was another wait's too: it may have been read before our
// node was created.
func (e *Engine) inspectForError(ctx context.Context, s *session, objPath string) (st *Status, shared bool, err error) {
	ch := e.inspects.DoChan(objPath, func() (any, error) {
		ictx, cancel := context.WithTimeout(e.ctx, errorInspect)
		defer cancel()
		return e.inspect(ictx, s, objPath, 16)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Shared, r.Err
		}
		return r.Val.(*Status), r.Shared, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

type nodeRead struct {
	data []byte
	stat *zk.Stat
	err  error
}

// inspect reads the object's children (the first max in order; 0 = all).
func (e *Engine) inspect(ctx context.Context, s *session, objPath string, max int) (*Status, error) {
	if e.opts.Protocol == Native {
		return e.inspectNative(ctx, s, objPath, max)
	}
	children, err := s.children(ctx, objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return &Status{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock: inspect %s: %w", objPath, err)
	}
	return e.describe(ctx, s, objPath, children, max)
}

// describe reads the nodes of an object's children (the first max in
// order; 0 = all): the holder and the waiters in grant order.
func (e *Engine) describe(ctx context.Context, s *session, objPath string, children []string, max int) (*Status, error) {
	if e.opts.Protocol == Native { // the holders are in the object node's data: read it all
		return e.inspectNative(ctx, s, objPath, max)
	}
	queue, locked := sortedQueue(children)
	if max > 0 && len(queue) > max {
		queue = queue[:max]
	}
	names := queue
	if locked {
		names = append([]string{privateLock}, queue...)
	}
	reads := make([]nodeRead, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			r, err := zcall(ctx, func() (nodeRead, error) {
				d, st, err := s.conn.Get(objPath + "/" + n)
				return nodeRead{d, st, err}, err
			}, nil)
			if err != nil {
				r.err = err
			}
			reads[i] = r
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, r := range reads { // a node gone meanwhile is fine; a failed read is not "free"
		if r.err != nil && !errors.Is(r.err, zk.ErrNoNode) {
			return nil, fmt.Errorf("lock: inspect %s/%s: %w", objPath, names[i], r.err)
		}
	}
	// Grant order with aging, from the reads just made.
	byName := make(map[string]nodeRead, len(queue))
	for i, n := range queue {
		byName[n] = reads[len(names)-len(queue)+i]
	}
	order, aged, _ := ageOrder(queue, e.opts.ForegroundPrefix, e.opts.BackgroundPrefix, func(n string) (childInfo, bool, error) {
		r := byName[n]
		if r.err != nil {
			return childInfo{}, false, nil
		}
		return infoOf(r.data, r.stat), true, nil
	})
	out := &Status{}
	var holderReq string
	if locked {
		if r := reads[0]; r.err == nil {
			h := toNode("", r.data, r.stat)
			h.Token = r.stat.Czxid
			out.Holder = &h
			holderReq = h.RequestID
		}
		reads = reads[1:]
	}
	for _, n := range order {
		r := byName[n]
		if r.err != nil { // gone meanwhile
			continue
		}
		node := toNode(n, r.data, r.stat)
		node.Aged = aged[n]
		if out.Holder != nil && out.Holder.Name == "" && holderReq != "" && node.RequestID == holderReq && node.Session == out.Holder.Session {
			out.Holder.Name = n
			continue
		}
		out.Waiters = append(out.Waiters, node)
	}
	if h := out.Holder; h != nil && h.Known && h.Name == "" && max == 0 {
		verdict, _, err := e.orphanCheck(ctx, s, objPath, h)
		if err != nil {
			return nil, fmt.Errorf("lock: inspect %s: %w", objPath, err)
		}
		h.Orphan = verdict == isOrphan
	}
	if out.Holder != nil {
		out.Holders = []Node{*out.Holder}
	}
	return out, nil
}

func toNode(name string, data []byte, st *zk.Stat) Node {
	n := Node{Name: name, Since: time.UnixMilli(st.Ctime).UTC(), Session: st.EphemeralOwner}
	var d nodeData
	if json.Unmarshal(data, &d) == nil && d.V == 1 && d.Req != "" {
		n.Known, n.RequestID, n.Sidecar, n.Type, n.Info, n.Signal = true, d.Req, d.Sidecar, d.Type, d.Info, d.Signal
		if d.Cleanup != nil {
			n.Preemptible, n.Cleanup = true, time.Duration(*d.Cleanup)*time.Millisecond
		}
		n.Asks = d.Asks
	}
	return n
}

// Summary is one object of List.
type Summary struct {
	Object  string
	Holder  *Node
	Waiters int
}

// List returns objects under the root whose names start with prefix and sort
// after after, at most limit (default 100, at most 1000), with the next
// cursor ("" at the end). Node names that are not Baton's escaping are
// skipped.
func (e *Engine) List(ctx context.Context, prefix, after string, limit int) ([]Summary, string, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	s, err := e.connectedSession(ctx)
	if err != nil {
		return nil, "", err
	}
	names, err := s.children(ctx, e.root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("lock: list %s: %w", e.root, err)
	}
	var objs []string
	for _, n := range names {
		o, err := UnescapeObject(n)
		if err != nil || !strings.HasPrefix(o, prefix) || o <= after {
			continue
		}
		objs = append(objs, o)
	}
	sort.Strings(objs)
	next := ""
	if len(objs) > limit {
		objs = objs[:limit]
		next = objs[limit-1]
	}
	out := make([]Summary, len(objs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make([]error, len(objs))
	for i, o := range objs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			name, _ := EscapeObject(o)
			st, err := e.inspect(ctx, s, e.root+"/"+name, 0)
			errs[i] = err
			if err == nil {
				out[i] = Summary{Object: o, Holder: st.Holder, Waiters: len(st.Waiters)}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, "", err
	}
	return out, next, nil
}
