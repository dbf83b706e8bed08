package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Watching an object (etcd's Election.Observe, Curator's participant
// nodes): WaitChange long-polls for a change of an object's holder or
// queue. The engine keeps one ZooKeeper watch per watched object, however
// many callers wait on it: one goroutine (an objWatch) holds a children
// watch on the object node (an exists watch while the node does not
// exist), re-reads the object when it fires and publishes the new state to
// every waiter. privateLock is a child of the object node, so its creation
// and deletion (every grant and release) fire the children watch too; its
// data (signals, asks) is not a change of holder or queue and is not
// watched. No loop polls ZooKeeper: a read happens when a watch fires, when
// a session is replaced, and when a caller's view is not the watcher's
// (then after a sync, see WaitChange).

// watchHistory is how many states an objWatch keeps, so that a caller
// chaining versions steps through each state the engine saw, also those
// published between two of its polls.
const watchHistory = 64

// watchLinger is how long an objWatch stays after its last caller left:
// a caller polling again right after an answer finds its history.
var watchLinger = 10 * time.Second

// Snapshot is an object's holder and waiters as one read saw them, and the
// version of that state.
type Snapshot struct {
	Status
	// Version identifies this state of the object's holder and queue: the
	// object node's pzxid (the zxid of the last child created or deleted,
	// privateLock included) when the engine first read the state, in
	// decimal; "0" while the object node does not exist and never did
	// since the engine watched it, "<pzxid>.gone" after it vanished. A new
	// version means a new holder or queue: the object node's coming and
	// going around an empty queue is not one. Compare versions only for
	// equality.
	Version string
}

// Seen is what a watcher saw last: the Version of a Snapshot, the token of
// the holder (0 = free), both, or neither.
type Seen struct {
	Version string // "" = not given
	Token   *int64 // nil = not given
}

// WatchStats counts the engine's watching, for metrics and tests.
type WatchStats struct {
	Objects  int   // objects watched now (one ZooKeeper watch each)
	Waiters  int   // WaitChange calls in progress
	Arms     int64 // watches set on ZooKeeper (getChildren or exists with a watch), ever
	Versions int64 // states published, ever
}

// watchSet is the engine's watched objects.
type watchSet struct {
	mu       sync.Mutex
	objs     map[string]*objWatch
	waiters  atomic.Int64
	arms     atomic.Int64
	versions atomic.Int64
}

// objWatch watches one object for every caller of WaitChange on it. Its
// goroutine (run) owns the ZooKeeper watch; mu guards the rest.
type objWatch struct {
	e       *Engine
	objPath string
	cancel  context.CancelFunc
	kick    chan struct{} // a caller wants a fresh read (after a sync)
	dead    chan struct{} // closed when run returns (the engine closed)

	mu      sync.Mutex
	refs    int           // callers attached
	linger  *time.Timer   // ends the watch when refs stayed 0
	hist    []*Snapshot   // oldest first; the last is the current state
	changed chan struct{} // closed and replaced after every read
	kicks   uint64        // fresh reads asked for
	done    uint64        // fresh reads completed: every kick up to it was served
	lastErr error         // the last read's error, nil after a success
	pzxid   int64         // of the object node when last seen, 0 if never
}

// WatchStats reports the engine's watching.
func (e *Engine) WatchStats() WatchStats {
	w := &e.watch
	w.mu.Lock()
	n := len(w.objs)
	w.mu.Unlock()
	return WatchStats{Objects: n, Waiters: int(w.waiters.Load()), Arms: w.arms.Load(), Versions: w.versions.Load()}
}

// WaitChange returns the object's state once it differs from seen, or,
// when timeout passes first, the current state with changed false.
//
//   - seen.Version is a state this or another engine returned, and this
//     engine has seen a later one: the state right after it (so a caller
//     passing back each answer's Version sees every state the engine saw,
//     in order, also those published between two of its calls).
//   - Otherwise, if the current state differs from seen (another Version,
//     or a holder whose token is not seen.Token): the current state, at
//     once, read after a sync so that it is not older than anything the
//     caller learnt before calling (another sidecar's answer, its own
//     acquire). With neither field given: the current state, at once.
//   - Otherwise the next state: a change of holder or of the queue.
//
// An answer that nothing changed is given after a fresh read agrees, so it
// is not older than the call either. States that last less than a
// ZooKeeper round trip can be missed: a watch
// fires once, and the read after it sees the latest state. ctx bounds the
// whole call (reading the state included); timeout only the wait for a
// change. It is safe for concurrent use; callers on one object share one
// watch. Errors: ErrInvalidObject for a bad name; ErrClosed once the engine
// is closed (also for a call waiting then); ErrUnavailable when the
// state could not be read before ctx ended (the wait for a change is never
// an error); ctx's error when it ends first otherwise.
func (e *Engine) WaitChange(ctx context.Context, object string, seen Seen, timeout time.Duration) (snap *Snapshot, changed bool, err error) {
	name, err := EscapeObject(object)
	if err != nil {
		return nil, false, err
	}
	if timeout < 0 {
		return nil, false, fmt.Errorf("lock: watch timeout %v is negative", timeout)
	}
	ow, err := e.watchAttach(name)
	if err != nil {
		return nil, false, err
	}
	defer e.watchDetach(name, ow)
	e.watch.waiters.Add(1)
	defer e.watch.waiters.Add(-1)
	defer func() {
		if snap != nil {
			c := *snap
			c.Object = object
			snap = &c
		}
	}()

	// Where the caller is: after a state in the history, at the current
	// state, or elsewhere (then read afresh and answer at once).
	ow.mu.Lock()
	next, current := ow.position(seen)
	ow.mu.Unlock()
	if next != nil {
		return next, true, nil
	}
	if !current {
		if err := ow.fresh(ctx); err != nil {
			return nil, false, err
		}
		ow.mu.Lock()
		next, current = ow.position(seen)
		cur := ow.hist[len(ow.hist)-1]
		ow.mu.Unlock()
		if next != nil {
			return next, true, nil
		}
		if !current {
			return cur, true, nil
		}
	}

	// The caller has the current state: wait for the next. When the
	// timeout passes, "unchanged" is said only after a fresh read agrees
	// (the watcher may not have heard of a change yet).
	t := time.NewTimer(timeout)
	defer t.Stop()
	ow.mu.Lock()
	base := ow.hist[len(ow.hist)-1].Version
	over := false
	for {
		cur := ow.hist[len(ow.hist)-1]
		if n := ow.after(base); n != nil || cur.Version != base {
			ow.mu.Unlock()
			if n == nil { // base fell out of the history
				n = cur
			}
			return n, true, nil
		}
		ch := ow.changed
		ow.mu.Unlock()
		if over {
			return cur, false, nil
		}
		select {
		case <-ch:
		case <-t.C:
			if err := ow.fresh(ctx); err != nil {
				return nil, false, err
			}
			over = true
		case <-ow.dead:
			return nil, false, ErrClosed
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		ow.mu.Lock()
	}
}

// position says where seen is: the state after it when seen.Version is an
// earlier state of the history (next), or whether seen is the current
// state. ow.mu must be held.
func (ow *objWatch) position(seen Seen) (next *Snapshot, current bool) {
	if len(ow.hist) == 0 || seen.Version == "" && seen.Token == nil {
		return nil, false
	}
	cur := ow.hist[len(ow.hist)-1]
	if seen.Version != "" && seen.Version != cur.Version {
		return ow.after(seen.Version), false
	}
	if seen.Token != nil && *seen.Token != cur.token() {
		return nil, false
	}
	return nil, true
}

// after returns the state published right after version, nil if version is
// the current state or not in the history. ow.mu must be held.
func (ow *objWatch) after(version string) *Snapshot {
	for i := len(ow.hist) - 2; i >= 0; i-- {
		if ow.hist[i].Version == version {
			return ow.hist[i+1]
		}
	}
	return nil
}

// key is what a change is a change of: the holders (token and node) and
// the waiters' nodes, in order.
func (s *Snapshot) key() string {
	var b strings.Builder
	if h := s.Holder; h != nil {
		fmt.Fprintf(&b, "%d/%s", h.Token, h.Name)
	}
	for _, h := range s.Holders[min(1, len(s.Holders)):] { // shared holders beside the first
		fmt.Fprintf(&b, "+%d/%s", h.Token, h.Name)
	}
	for _, w := range s.Waiters {
		b.WriteString(" " + w.Name)
	}
	return b.String()
}

func (s *Snapshot) token() int64 {
	if s.Holder == nil {
		return 0
	}
	return s.Holder.Token
}

// fresh asks the watch goroutine for a read after a sync and waits for it.
func (ow *objWatch) fresh(ctx context.Context) error {
	ow.mu.Lock()
	ow.kicks++
	want := ow.kicks
	ow.mu.Unlock()
	select {
	case ow.kick <- struct{}{}:
	default: // a kick is pending: the read it causes starts after ours
	}
	for {
		ow.mu.Lock()
		done, ch, lastErr := ow.done, ow.changed, ow.lastErr
		ow.mu.Unlock()
		if done >= want {
			return nil
		}
		select {
		case <-ch:
		case <-ow.dead:
			return ErrClosed
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%w: watch %s: %v", ErrUnavailable, ow.objPath, lastErr)
			}
			return fmt.Errorf("%w: watch %s: not read in time: %v", ErrUnavailable, ow.objPath, ctx.Err())
		}
	}
}

// watchAttach returns the object's watch, started if needed, with one more
// caller.
func (e *Engine) watchAttach(name string) (*objWatch, error) {
	w := &e.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.ctx.Err() != nil {
		return nil, ErrClosed
	}
	ow := w.objs[name]
	if ow == nil {
		// Added to e.wg under e.mu while not closed: before Close waits.
		e.mu.Lock()
		closed := e.closed
		if !closed {
			e.wg.Add(1)
		}
		e.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if w.objs == nil {
			w.objs = make(map[string]*objWatch)
		}
		ctx, cancel := context.WithCancel(e.ctx)
		ow = &objWatch{e: e, objPath: e.root + "/" + name, cancel: cancel, kick: make(chan struct{}, 1), dead: make(chan struct{}), changed: make(chan struct{})}
		w.objs[name] = ow
		go func() {
			defer e.wg.Done()
			defer close(ow.dead)
			ow.run(ctx)
		}()
	}
	ow.mu.Lock()
	ow.refs++
	if ow.linger != nil {
		ow.linger.Stop()
		ow.linger = nil
	}
	ow.mu.Unlock()
	return ow, nil
}

// watchDetach drops a caller; the watch ends watchLinger after its last.
func (e *Engine) watchDetach(name string, ow *objWatch) {
	ow.mu.Lock()
	defer ow.mu.Unlock()
	ow.refs--
	if ow.refs > 0 {
		return
	}
	ow.linger = time.AfterFunc(watchLinger, func() {
		w := &e.watch
		w.mu.Lock()
		defer w.mu.Unlock()
		ow.mu.Lock()
		idle := ow.refs == 0
		ow.mu.Unlock()
		if idle && w.objs[name] == ow {
			delete(w.objs, name)
			ow.cancel()
		}
	})
}

// run keeps a watch on the object and publishes each state it reads, until
// ctx ends (the last caller left, or the engine closed). The one-shot
// watch it leaves on ZooKeeper then fires once, into a buffered channel.
func (ow *objWatch) run(ctx context.Context) {
	e := ow.e
	for ctx.Err() == nil {
		s, err := e.connectedSession(ctx)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return
			}
			continue // ctx ended, or the session was replaced: the loop decides
		}
		ow.mu.Lock()
		kicks := ow.kicks
		syncFirst := kicks > ow.done
		ow.mu.Unlock()
		snap, ev, err := ow.read(ctx, s, syncFirst)
		if err != nil {
			ow.mu.Lock()
			ow.lastErr = err
			close(ow.changed)
			ow.changed = make(chan struct{})
			ow.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			e.log.Debug("watch: read failed; retrying", "object_path", ow.objPath, "err", err)
			if retry(err) {
				continue // disconnected: connectedSession waits for it
			}
			select { // anything else: a pause, not a loop
			case <-time.After(time.Second):
			case <-s.lost:
			case <-ctx.Done():
			}
			continue
		}
		ow.publish(snap, kicks)
		select {
		case <-ev:
		case <-ow.kick:
		case <-s.lost:
		case <-ctx.Done():
			return
		}
	}
}

// read reads the object and sets a watch that fires on its next change:
// a children watch on the object node, or an exists watch while it does
// not exist. sync first brings the server up to date with the leader.
func (ow *objWatch) read(ctx context.Context, s *session, syncFirst bool) (*Snapshot, <-chan zk.Event, error) {
	e := ow.e
	if syncFirst {
		if _, err := zcall(ctx, func() (string, error) { return s.conn.Sync(ow.objPath) }, nil); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, fmt.Errorf("sync: %w", err)
		}
	}
	for range 10 {
		type childrenW struct {
			kids []string
			st   *zk.Stat
			ev   <-chan zk.Event
		}
		e.watch.arms.Add(1)
		r, err := zcall(ctx, func() (childrenW, error) {
			kids, st, ev, err := s.conn.ChildrenW(ow.objPath)
			return childrenW{kids, st, ev}, err
		}, nil)
		if err == nil && e.opts.Protocol == Native {
			// The holders are in the object node's data: a shared request
			// granted beside others changes it and no child. Watch it too;
			// the version is the newer of the children's and the data's.
			type dataW struct {
				st *zk.Stat
				ev <-chan zk.Event
			}
			e.watch.arms.Add(1)
			d, err := zcall(ctx, func() (dataW, error) {
				_, st, ev, err := s.conn.GetW(ow.objPath)
				return dataW{st, ev}, err
			}, nil)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			st, err := e.describe(ctx, s, ow.objPath, r.kids, 0)
			if err != nil {
				return nil, nil, err
			}
			either := make(chan zk.Event, 1)
			go func() {
				select {
				case ev := <-r.ev:
					either <- ev
				case ev := <-d.ev:
					either <- ev
				}
			}()
			return &Snapshot{Status: *st, Version: strconv.FormatInt(max(r.st.Pzxid, d.st.Mzxid), 10)}, either, nil
		}
		if err == nil {
			st, err := e.describe(ctx, s, ow.objPath, r.kids, 0)
			if err != nil {
				return nil, nil, err
			}
			return &Snapshot{Status: *st, Version: strconv.FormatInt(r.st.Pzxid, 10)}, r.ev, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, err
		}
		type existsW struct {
			ok bool
			ev <-chan zk.Event
		}
		e.watch.arms.Add(1)
		x, err := zcall(ctx, func() (existsW, error) {
			ok, _, ev, err := s.conn.ExistsW(ow.objPath)
			return existsW{ok, ev}, err
		}, nil)
		if err != nil {
			return nil, nil, err
		}
		if x.ok {
			continue // created meanwhile: list it
		}
		ow.mu.Lock()
		v := "0"
		if ow.pzxid != 0 {
			v = strconv.FormatInt(ow.pzxid, 10) + ".gone"
		}
		ow.mu.Unlock()
		return &Snapshot{Version: v}, x.ev, nil
	}
	return nil, nil, fmt.Errorf("lock: watch %s: the object node keeps appearing and vanishing", ow.objPath)
}

// publish records a state read after kicks fresh reads were asked for,
// and wakes the callers.
func (ow *objWatch) publish(snap *Snapshot, kicks uint64) {
	ow.mu.Lock()
	defer ow.mu.Unlock()
	if p, err := strconv.ParseInt(snap.Version, 10, 64); err == nil && p != 0 {
		ow.pzxid = p
	}
	// A new version only for a new holder or queue: not for the object
	// node's coming and going around an empty queue (a container reaped,
	// created again for the next request).
	if n := len(ow.hist); n == 0 || ow.hist[n-1].key() != snap.key() {
		ow.hist = append(ow.hist, snap)
		if len(ow.hist) > watchHistory {
			ow.hist = append([]*Snapshot(nil), ow.hist[len(ow.hist)-watchHistory:]...)
		}
		ow.e.watch.versions.Add(1)
	}
	if kicks > ow.done {
		ow.done = kicks
	}
	ow.lastErr = nil
	close(ow.changed)
	ow.changed = make(chan struct{})
}
