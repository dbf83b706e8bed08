package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/singleflight"

	"github.com/batonhq/baton/internal/notify"
)

// MaxInfoBytes bounds the caller-supplied info stored in every node.
const MaxInfoBytes = 4096

// Sequence numbers are signed 32-bit and wrap after 2^31 creates under one
// parent; "-2147483648" would sort before every other name. Past seqDrain a
// releaser deletes the emptied object node (resetting the counter); past
// seqRefuse no new child is created until the object node has been renewed.
var (
	seqDrain  int64 = 1<<31 - 1<<24
	seqRefuse int64 = 1<<31 - 1<<20
)

// Engine acquires and releases locks on one ZooKeeper ensemble through one
// session at a time. It is safe for concurrent use.
type Engine struct {
	opts    Options
	servers []string
	root    string // chroot + root
	acl     []zk.ACL
	log     *slog.Logger

	mu   sync.Mutex
	sess *session
	// replaced is notified (under mu) when a new session becomes current:
	// callers that found the current one lost wait for it
	replaced notify.Broadcast
	gen      uint64
	closed   bool
	closing  chan struct{}
	ctx      context.Context // done when closing
	stop     context.CancelFunc
	wg       sync.WaitGroup

	rootReady atomic.Bool
	objMu     sync.Mutex
	objs      map[string]*objState

	waiting atomic.Int64
	held    atomic.Int64
	lists   atomic.Int64 // getChildren requests of the acquire path (listShared), for tests
	// inspects: the reads of an object's holder and first waiters for a
	// failed wait's error, shared by the waits failing on it meanwhile
	// (inspectForError), by object path
	inspects singleflight.Group
	// relLists: listings a native release sent itself, not knowing whom
	// to hand over to (endNative), for tests
	relLists atomic.Int64
	// learnLists: listings a native holder sent to learn arrivals behind
	// it (learnNative), for tests
	learnLists atomic.Int64
	// watchReads: reads a holder watch sent (watch, watchNative), for tests
	watchReads atomic.Int64
	// refusedTakes: native takes refused by the data version (another
	// write landed since the view), for tests
	refusedTakes atomic.Int64
	// preReads: native acquires that read the holders before creating
	// anything, for tests
	preReads atomic.Int64
	// firstSplit (tests): a first touch makes the object node in a write
	// of its own, then takes it guarded by version 0 (the path a first
	// touch's fallbacks take), not in one multi
	firstSplit atomic.Bool
	predScore  atomic.Int32 // native predictions: stale ones up, held ones down (predOutcome)
	watch      watchSet     // watched objects (watch.go)
	delays     atomic.Int64 // vanished holders waited out (lock-delay)
	// handoffs: the native protocol's local waiters (*nreq, waiting with a
	// child: slow) by request id, for in-process handoffs (see
	// nativeHandoff) and the parked queue a release moves behind one
	// (parkMove); local counts the grants handed over in process.
	handoffs sync.Map
	natHeld  sync.Map // native grants held here, by request id
	local    atomic.Int64
	// parks: requests parked behind a local holder; parkGrants: those a
	// release multi granted (park.go)
	parks      atomic.Int64
	parkGrants atomic.Int64
	parkedNow  atomic.Int64 // parked at this moment

	dialMu   sync.Mutex
	dialErr  string    // last connection error, "" after a success
	dialWarn time.Time // when it was last logged at WARN
}

// dialFailed records a failed connection attempt: logged at WARN the first
// time and then at most every 30 s while it keeps failing (go-zookeeper
// retries about every second), naming the server and the error.
func (e *Engine) dialFailed(addr string, err error) {
	e.dialMu.Lock()
	msg := err.Error()
	warn := e.dialErr != msg || time.Since(e.dialWarn) >= 30*time.Second
	e.dialErr = msg
	if warn {
		e.dialWarn = time.Now()
	}
	e.dialMu.Unlock()
	if warn {
		e.log.Warn("cannot connect to zookeeper; retrying", "server", addr, "servers", strings.Join(e.serverList(), ","), "err", err)
	}
}

// dialOK logs the recovery after failed attempts.
func (e *Engine) dialOK(addr string) {
	e.dialMu.Lock()
	failed := e.dialErr != ""
	e.dialErr, e.dialWarn = "", time.Time{}
	e.dialMu.Unlock()
	if failed {
		e.log.Info("connected to zookeeper again", "server", addr)
	}
}

// objState is the engine's local knowledge of one object, for the fast path.
//
// A prediction is only as good as the object node it was made on: a
// container can be reaped and created again by someone else, whose creates
// could bring the new node's counter to the predicted value. So a prediction
// carries the node's czxid, and the fast multi's setData on the object node
// answers with the czxid of the node it applied to: a renewed node is seen in
// the multi's own answer, before anything is reported.
type objState struct {
	active    int                  // this engine's acquires in flight or held
	contended bool                 // others were seen here: skip create-then-verify until we are seen alone again
	list      *listing             // the latest listing sent (see listShared)
	gone      map[string]time.Time // children this engine deleted since (see noteGone)
	goneDrops uint64               // counts removals from gone (firstAfterLocked's cursor is valid while it stands)
	predict   int64                // sequence number the next create gets if nobody else creates; -1 unknown
	gen       uint64               // session generation the prediction was made in
	czxid     int64                // creation zxid of the object node the prediction belongs to
	version   int32                // the object node's data version our clean release left; -1 unknown
	info      map[string]childInfo // children read for the aging order (see ordered)
	infoCzxid int64                // the object node incarnation info belongs to
	sentinel  bool                 // native: the object's sentinel is known to exist (ensureNative)
	nq        []nchild             // native: the children in grant order, as this engine last listed them (topUp)
	missed    bool                 // native: another engine's write refused our last predicted one: read first
	learnList chan struct{}        // native: a local holder's listing of arrivals in flight (learnNative)
	// native: the exclusive holder of this engine that requests park
	// behind (a *Grant, or the *nreq a holder's release multi grants), and
	// the requests parked there in order (park.go)
	parkHost any
	parked   []*parkWait

	// behind (plugin protocol): local waiters offered a handoff, by the
	// child each watches (handoff.go).
	behind map[string]*plHandoff
}

// prediction is what objEnter hands to one request.
type prediction struct {
	seq       int64 // -1: none
	czxid     int64
	version   int32 // the object node's data version our release left (-1: unknown)
	contended bool
	missed    bool // native: read before using the prediction (see objState.missed)
	// first (native): no object node was there; the multi creates it,
	// its sentinel, our child, and names us (nreq.fast)
	first bool
}

func (st *objState) invalidate() { st.predict = -1 }

// New starts an engine; it connects in the background (Acquire waits for the
// connection within its own timeout). A bad option is an error naming it.
func New(opts Options) (*Engine, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	e := &Engine{
		opts:    opts,
		servers: opts.Servers,
		root:    opts.Chroot + opts.Root,
		log:     opts.Logger.With("component", "lock"),
		closing: make(chan struct{}),
		objs:    make(map[string]*objState),
		acl:     zk.WorldACL(zk.PermAll),
	}
	e.ctx, e.stop = context.WithCancel(context.Background())
	if opts.AuthDigest != "" {
		user, pass, _ := strings.Cut(opts.AuthDigest, ":")
		e.acl = zk.DigestACL(zk.PermAll, user, pass)
	}
	s, err := newSession(e, 0, e.servers)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.sess = s
	s.start()
	e.mu.Unlock()
	return e, nil
}

// Close ends the session (the server deletes its nodes at once), ends every
// grant with ErrClosed as the cause, and waits for the engine's goroutines.
// It is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	s := e.sess
	e.mu.Unlock()
	s.fail(ErrClosed)
	close(e.closing)
	e.stop()
	s.shutConn()
	e.wg.Wait()
	return nil
}

// track runs f on a goroutine Close waits for, unless the engine is
// closed (false: f is not run). Added to e.wg under e.mu while not closed,
// so the Add comes before Close's Wait: a bare e.wg.Go from a caller's
// goroutine (an acquire or a release racing Close) could Add after the
// counter reached zero with Wait begun, which sync.WaitGroup forbids.
func (e *Engine) track(f func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Go(f)
	return true
}

// replace opens a new session after s was lost. go-zookeeper's Connect
// resolves every server name first (up to 3 s) and fails if one does not
// resolve: a ZooKeeper pod's DNS name is gone while the pod restarts, which
// is when sessions are lost. So the lookup runs without e.mu, and a failed
// open is retried, with backoff, until it works or the engine closes;
// meanwhile the lost session stays current and callers wait for its
// successor (connectedSession) until their own deadlines.
func (e *Engine) replace(s *session) {
	e.mu.Lock()
	if e.closed || e.sess != s || s.replacing {
		e.mu.Unlock()
		return
	}
	s.replacing = true // one successor per session (openSession may call this too)
	e.gen++
	gen := e.gen
	e.mu.Unlock()
	if !e.openSession(gen) {
		e.track(func() { e.reopen(gen) })
	}
}

// openSession opens session gen and makes it current; false if it could
// not be opened (logged). If the engine closed meanwhile, the new session
// is shut and true returned: nothing to retry.
func (e *Engine) openSession(gen uint64) bool {
	servers := e.serverList()
	ns, err := newSession(e, gen, servers)
	if err != nil {
		// as a failed dial: Health's LastError, a WARN at most every 30 s
		e.dialFailed(strings.Join(servers, ","), fmt.Errorf("opening a session: %w", err))
		return false
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		ns.shutConn()
		return true
	}
	e.sess = ns
	ns.start()
	e.replaced.Notify()
	e.mu.Unlock()
	if ns.isLost() {
		// lost before it was current: its fail's replace found another
		// session current and did nothing
		e.replace(ns)
	}
	return true
}

// reopen retries openSession, from 100 ms apart doubling to 5 s, until it
// works or the engine closes.
func (e *Engine) reopen(gen uint64) {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMultiplier(2),
		backoff.WithMaxInterval(5*time.Second), backoff.WithRandomizationFactor(0),
		backoff.WithMaxElapsedTime(0))
	for {
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-e.closing:
			t.Stop()
			return
		case <-t.C:
		}
		if e.openSession(gen) {
			return
		}
	}
}

// serverList is the ZooKeeper servers new sessions connect to (e.mu: a
// test changes them).
func (e *Engine) serverList() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.servers
}

func (e *Engine) current() (*session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	return e.sess, nil
}

// connectedSession waits until a session is connected or ctx ends.
func (e *Engine) connectedSession(ctx context.Context) (*session, error) {
	for {
		s, err := e.current()
		if err != nil {
			return nil, err
		}
		err = s.waitConnected(ctx)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: not connected within the wait (%v)", ErrUnavailable, ctx.Err())
		}
		// s was lost; take the next one. It stays current until its
		// successor is open: a moment after fail told its grants (a caller
		// woken by a grant's Done finds it so), longer while a server name
		// does not resolve (replace).
		e.mu.Lock()
		ch, still := e.replaced.Wait(), e.sess == s && !e.closed
		e.mu.Unlock()
		if still {
			select {
			case <-ch:
			case <-e.closing:
			case <-ctx.Done():
			}
		}
	}
}

func (e *Engine) observe(f func(Observer)) {
	if e.opts.Observer != nil {
		f(e.opts.Observer)
	}
}

// Health describes the engine's ZooKeeper session.
type Health struct {
	Connected      bool          // established and connected
	SessionID      int64         // 0 before the first session
	Timeout        time.Duration // negotiated session timeout
	Deadline       time.Time     // validity deadline of the current session's grants
	Held           int           // grants held
	Waiting        int           // acquires waiting
	Parked         int           // of them, parked behind a holder of this engine (not in ZooKeeper)
	CleanupPending int           // deletes waiting for a reconnect
	Syncs          int64         // syncs the keeper sent in this session (see TickTime)
	LastError      string        // the last connection error while it keeps failing; "" once connected
	LockDelays     int64         // vanished holders acquires have waited out (see "Lock-delay")
}

// Health reports the current session's state.
func (e *Engine) Health() Health {
	s, err := e.current()
	if err != nil {
		return Health{}
	}
	s.mu.Lock()
	h := Health{
		Connected: s.id != 0 && s.state == zk.StateHasSession && s.lostErr == nil,
		SessionID: s.id,
		Timeout:   s.timeout,
		Deadline:  s.deadlineLocked(),
	}
	s.mu.Unlock()
	h.Held = int(e.held.Load())
	h.Waiting = int(e.waiting.Load())
	h.Parked = int(e.parkedNow.Load())
	h.CleanupPending = int(s.pending.Load())
	h.Syncs = s.syncs.Load()
	h.LockDelays = e.delays.Load()
	e.dialMu.Lock()
	h.LastError = e.dialErr
	e.dialMu.Unlock()
	return h
}

// AcquireOptions refine one Acquire.
type AcquireOptions struct {
	// Info is recorded in the node for inspection (at most 4 KiB).
	Info string
	// Wait bounds the wait for the lock; 0 means the type's default.
	Wait time.Duration
	// TryOnce grants only if the request is first in order and privateLock
	// is free right away (HTTP wait_ms: 0).
	TryOnce bool
	// RequestID identifies the request in its nodes; default random.
	// Under the native protocol a given id gets a unique suffix
	// ("~" and 12 hex digits; Grant.RequestID shows it): holders are named
	// by request id there, and a caller's id may repeat. Under the plugin
	// protocol an id must not repeat among one engine's acquires in
	// progress and grants held: the recovery of a create whose reply was
	// lost owns the nodes of its session by request id, and would take a
	// grant of the same id for its own (NewRequestID gives a fresh one;
	// the sidecar names each acquire so, for its ask: Signal.Req).
	RequestID string
	// OnSignal, if set, is called (from the grant's holder watch; it must
	// not block) when a Signal reaches the grant. See Engine.Signal.
	OnSignal func(Signal)
	// Preemptible records in the nodes that the grant yields to a
	// preemption within Cleanup, for a preempting requester to read
	// (Engine.Ask returns it in Node.Preemptible and Node.Cleanup).
	Preemptible bool
	Cleanup     time.Duration
	// LockDelay overrides Options.LockDelay for this request: 0 means the
	// engine's, negative means none (see "Lock-delay" in the package doc).
	LockDelay time.Duration
	// Shared asks for a shared (read) lock: any number of shared holders
	// together, none with an exclusive one. Native protocol only
	// (ErrSharedNeedsNative otherwise).
	Shared bool
	// Since, if set and before the call, is when the caller's wait began
	// (it waited for something else first): Grant.Waited and
	// InstanceLockError.Waited count from it. Wait still counts from the
	// call.
	Since time.Time
}

type nodeData struct {
	V       int     `json:"v"`
	Req     string  `json:"req"`
	Sidecar string  `json:"sidecar"`
	Type    string  `json:"type"`
	Info    string  `json:"info,omitempty"`
	Signal  *Signal `json:"signal,omitempty"` // privateLock only: see Engine.Signal
	// Cleanup is set (ms, may be 0) on a preemptible grant's nodes.
	Cleanup *int64 `json:"cleanup_ms,omitempty"`
	// Asks are the standing asks (preemptions) not withdrawn: see Engine.Ask.
	Asks []Signal `json:"asks,omitempty"`
	// AgeMs (background children only) is the aging bound of the sidecar
	// that created the node, Options.BackgroundMaxWait; every engine orders
	// the node by it (see "Aging").
	AgeMs int64 `json:"age_ms,omitempty"`
}

// marshal is json.Marshal(d), by hand for a child's usual data (plain
// strings, no signal or asks): encoding/json's reflection was about 2 % of
// `baton serve`'s CPU per W1 cycle (perf).
func (d nodeData) marshal() []byte {
	if d.Signal == nil && d.Asks == nil {
		b := make([]byte, 0, 64+len(d.Req)+len(d.Sidecar)+len(d.Type)+len(d.Info))
		b = append(b, `{"v":`...)
		b = strconv.AppendInt(b, int64(d.V), 10)
		ok := true
		for _, f := range [...]struct {
			key, v string
			omit   bool
		}{{`,"req":`, d.Req, false}, {`,"sidecar":`, d.Sidecar, false}, {`,"type":`, d.Type, false}, {`,"info":`, d.Info, true}} {
			if f.omit && f.v == "" {
				continue
			}
			b = append(b, f.key...)
			if b, ok = appendPlainString(b, f.v); !ok {
				break
			}
		}
		if ok {
			if d.Cleanup != nil {
				b = append(b, `,"cleanup_ms":`...)
				b = strconv.AppendInt(b, *d.Cleanup, 10)
			}
			if d.AgeMs != 0 {
				b = append(b, `,"age_ms":`...)
				b = strconv.AppendInt(b, d.AgeMs, 10)
			}
			return append(b, '}')
		}
	}
	b, _ := json.Marshal(d)
	return b
}

// NewRequestID returns a new random request id, for an AcquireOptions.RequestID
// chosen before the acquire (e.g. to name it in an Ask's Signal.Req).
func NewRequestID() string { return newRequestID() }

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Acquire waits until the object is granted to this request, the wait
// (AcquireOptions.Wait or the type's default) runs out, or ctx ends. A wait
// that ends without a grant returns *InstanceLockError and leaves no node
// behind, also when it races a grant. ZooKeeper unreachable for the whole
// wait, or the session lost during it, returns an error wrapping
// ErrUnavailable or ErrSessionLost.
func (e *Engine) Acquire(ctx context.Context, object string, typ Type, o AcquireOptions) (*Grant, error) {
	name, err := EscapeObject(object)
	if err != nil {
		return nil, err
	}
	if typ != Foreground && typ != Background {
		return nil, fmt.Errorf("lock: unknown type %v", typ)
	}
	if len(o.Info) > MaxInfoBytes {
		return nil, fmt.Errorf("lock: info is %d bytes, at most %d", len(o.Info), MaxInfoBytes)
	}
	if o.Wait < 0 {
		return nil, fmt.Errorf("lock: wait %v is negative", o.Wait)
	}
	if o.LockDelay > MaxLockDelay {
		return nil, fmt.Errorf("lock: lock-delay %v is over %v", o.LockDelay, MaxLockDelay)
	}
	if o.Shared && e.opts.Protocol != Native {
		return nil, ErrSharedNeedsNative
	}
	delay := e.opts.LockDelay
	if o.LockDelay != 0 {
		delay = max(o.LockDelay, 0)
	}
	wait := o.Wait
	if wait == 0 {
		wait = e.opts.ForegroundWait
		if typ == Background {
			wait = e.opts.BackgroundWait
		}
	}
	start := time.Now()
	if !o.Since.IsZero() && o.Since.Before(start) {
		start = o.Since
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()

	s, err := e.connectedSession(wctx)
	if err != nil {
		return nil, err
	}
	prefix := e.opts.ForegroundPrefix
	if typ == Background {
		prefix = e.opts.BackgroundPrefix
	}
	if o.RequestID == "" {
		o.RequestID = newRequestID()
	} else if e.opts.Protocol == Native {
		// The native protocol names holders by request id, and a caller's
		// id may repeat (two engines, a retry): make it this request's.
		o.RequestID += "~" + newRequestID()[:12]
	}
	nd := nodeData{V: 1, Req: o.RequestID, Sidecar: e.opts.NodeID, Type: typ.String(), Info: o.Info}
	if o.Preemptible {
		ms := o.Cleanup.Milliseconds()
		nd.Cleanup = &ms
	}
	if typ == Background && e.opts.BackgroundMaxWait > 0 {
		nd.AgeMs = max(e.opts.BackgroundMaxWait.Milliseconds(), 1)
	}
	data := nd.marshal()
	r := &request{
		e: e, s: s, object: object, name: name, typ: typ, info: o.Info, reqID: o.RequestID,
		start: start, objPath: e.root + "/" + name, prefix: prefix, data: data, tryOnce: o.TryOnce,
		onSignal: o.OnSignal, delay: delay, guard: -1,
	}
	r.plPath = r.objPath + "/" + privateLock
	if e.opts.Protocol == Native {
		return e.acquireNative(wctx, r, o.Shared)
	}
	g, err := r.run(wctx, e.objEnter(name, s.gen))
	if err != nil {
		if !r.registered {
			e.objLeave(name, -1, s.gen, 0, -1)
		}
		return nil, err
	}
	return g, nil
}

// objEnter registers a local acquire on the object and returns the fast-path
// prediction, if one is valid for this request alone.
func (e *Engine) objEnter(name string, gen uint64) prediction {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		st = &objState{predict: -1}
		e.objs[name] = st
	}
	st.active++
	if st.active > 1 || st.gen != gen || e.opts.DisableFastPath {
		st.invalidate() // our own concurrent creates are not accounted for
	}
	if st.predict < 0 {
		return prediction{seq: -1, contended: st.contended || st.active > 1 || e.opts.DisableFastPath}
	}
	return prediction{seq: st.predict, czxid: st.czxid, version: st.version, missed: st.missed || e.predScore.Load() >= predReadFirst}
}

// Native predictions engine-wide: an engine whose predictions mostly turn
// out stale (objects taken by turns on several sidecars, W3: another
// sidecar wrote since our release 7 times in 8) reads before using one,
// as after a refused one on that object (objState.missed); the read
// still says whether it held, so the score recovers when they hold again.
// A held prediction costs one write, a stale one a refused write, a read
// and a write; read first, two requests either way: so read first when
// more than half are stale. predScore counts stale ones up and held ones
// down, within [0, predScoreMax].
const (
	predScoreMax  = 8
	predReadFirst = 4
)

// predOutcome records whether a native prediction held.
func (e *Engine) predOutcome(held bool) {
	for {
		s := e.predScore.Load()
		n := s + 1
		if held {
			n = s - 1
		}
		n = min(max(n, 0), predScoreMax)
		if n == s || e.predScore.CompareAndSwap(s, n) {
			return
		}
	}
}

// objMissed records whether the native fast path's prediction of the
// object was refused (another engine writes here too: read first).
func (e *Engine) objMissed(name string, missed bool) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil {
		st.missed = missed
	}
}

// objContended notes that others were seen on the object.
func (e *Engine) objContended(name string) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil {
		st.contended = true
	}
}

// objLeave ends a local acquire. next, if ≥ 0, is the sequence number the
// next create gets if nobody else created since this request's anchor, on
// the object node whose creation zxid is czxid; version is the object
// node's data version the request's clean release left (-1: unknown).
func (e *Engine) objLeave(name string, next int64, gen uint64, czxid int64, version int32) {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		return
	}
	st.active--
	if st.active != 0 || next < 0 || e.opts.DisableFastPath {
		st.invalidate()
	} else {
		st.predict, st.gen, st.czxid, st.version, st.contended = next, gen, czxid, version, false
	}
	if st.active == 0 {
		st.list, st.gone, st.info, st.behind, st.nq = nil, nil, nil, nil, nil // only active requests use them
		st.goneDrops++
		if st.predict < 0 && !st.contended && !st.sentinel {
			delete(e.objs, name)
		}
	}
	if len(e.objs) > 65536 { // bound the cache: forget idle predictions
		for k, v := range e.objs {
			if v.active == 0 {
				delete(e.objs, k)
			}
			if len(e.objs) <= 32768 {
				break
			}
		}
	}
}

// objShared reports whether another local acquire is active on the object,
// which invalidates any anchor this request could set.
func (e *Engine) objAlone(name string) bool {
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	return st != nil && st.active == 1
}

// ensureObject creates the object node (and the root path when missing). It
// reports whether this call created the object node.
func (e *Engine) ensureObject(ctx context.Context, s *session, objPath string) (bool, error) {
	flags := int32(zk.FlagContainer)
	if e.opts.ObjectNode == Persistent || e.opts.Protocol == Native {
		flags = zk.FlagPersistent
	}
	for range 10 {
		// Within the session's create bound: a burst of arrivals on new (or
		// reaped) objects sends one of these before each waiter's create.
		_, err := bounded(ctx, s, func() (string, error) {
			if flags == zk.FlagContainer {
				return s.conn.CreateContainer(objPath, nil, zk.FlagContainer, e.acl)
			}
			return s.conn.Create(objPath, nil, flags, e.acl)
		}, nil)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, zk.ErrNodeExists):
			return false, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := e.ensureRoot(ctx, s); err != nil {
				return false, err
			}
		default:
			return false, err
		}
	}
	return false, fmt.Errorf("lock: could not create %s: parent keeps vanishing", objPath)
}

// ensureRoot creates the chroot and lock root as persistent nodes.
func (e *Engine) ensureRoot(ctx context.Context, s *session) error {
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(e.root, "/"), "/") {
		p += "/" + part
		_, err := zcall(ctx, func() (string, error) { return s.conn.Create(p, nil, zk.FlagPersistent, e.acl) }, nil)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("lock: create %s: %w", p, err)
		}
	}
	e.rootReady.Store(true)
	return nil
}

// zcall runs f, a blocking go-zookeeper call. If ctx ends first it returns
// ctx's error at once and hands f's eventual result to orphan (if not nil),
// so that a create can be undone.
func zcall[T any](ctx context.Context, f func() (T, error), orphan func(T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	ch := make(chan result, 1)
	goCall(func() { // a goroutine of its own, kept for the next call (zworkers.go)
		v, err := f()
		ch <- result{v, err}
	})
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			r := <-ch
			if orphan != nil {
				orphan(r.v, r.err)
			}
		}()
		return zero, ctx.Err()
	}
}

// zmulti is zcall for a multi, without zcall's goroutine: the caller's
// goroutine hands the request to the connection and waits for its answer
// or for ctx's end (the patched go-zookeeper's MultiCtx), two goroutine
// hand-offs fewer per call. Unlike zcall's, a multi whose ctx ends before
// it is handed to the connection is never sent, so it is never sent behind
// the caller's next request; orphan (if not nil) then gets zk.ErrNotSent
// (notSent), else the answer. orphan is called exactly when
// endedFirst(ctx, err).
func zmulti(ctx context.Context, s *session, ops []any, orphan func([]zk.MultiResponse, error)) ([]zk.MultiResponse, error) {
	return s.conn.MultiCtx(ctx, orphan, ops...)
}

// endedFirst reports whether zmulti returned because ctx ended first (its
// orphan function is then called later): err is ctx.Err() itself. An
// answer's error can wrap a context error too (a connection from
// Options.Dialer failing a write with one), and no orphan call follows
// that (TestReviewZmultiSlotAnswerWrapsCtxErr,
// TestReviewZmultiReleaseAnswerWrapsCtxErr).
func endedFirst(ctx context.Context, err error) bool { return err != nil && err == ctx.Err() }

// isConnErr reports errors after which the request may or may not have been
// applied (the connection dropped with it in flight). go-zookeeper hands a
// request whose write failed the socket's error (*net.OpError: "broken
// pipe", "use of closed network connection", a write timeout) and drops the
// connection: a lost connection like the others.
func isConnErr(err error) bool {
	var op *net.OpError
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionMoved) || errors.As(err, &op)
}

// notSent reports errors of requests that never reached a server.
func notSent(err error) bool {
	return errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrNotSent)
}
