package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton/api"
)

// Lock types for WithType.
const (
	Foreground = api.Foreground
	Background = api.Background
)

// Client talks to one sidecar over its unix socket. The zero value uses
// api.DefaultSocket; set Socket before the first call. Methods are safe for
// concurrent use.
type Client struct {
	// Socket is the sidecar's unix socket; default api.DefaultSocket.
	Socket string

	once sync.Once
	tr   *transport

	mu     sync.Mutex
	leases map[*Lease]struct{}
}

// New returns a client of the sidecar listening on socket.
func New(socket string) *Client { return &Client{Socket: socket} }

func (c *Client) init() {
	c.once.Do(func() {
		sock := c.Socket
		if sock == "" {
			sock = api.DefaultSocket
		}
		c.tr = &transport{dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, &dialError{err}
			}
			return conn, nil
		}}
	})
}

// socket is the socket c connects to.
func (c *Client) socket() string {
	if c.Socket == "" {
		return api.DefaultSocket
	}
	return c.Socket
}

// dialError marks a failure to open a connection.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// Close stops the background renewal of every lease of c (without
// releasing them: they end at their lease expiry, or when this process
// exits) and closes idle connections.
func (c *Client) Close() error {
	c.mu.Lock()
	ls := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	for _, l := range ls {
		l.stopBackground()
	}
	if c.tr != nil {
		c.tr.closeIdle()
	}
	return nil
}

// send is the one place requests go through: it encodes in (if not nil),
// decodes a 2xx answer into out (if not nil) and maps error answers.
func (c *Client) send(ctx context.Context, method, path string, in, out any) (int, error) {
	c.init()
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, fmt.Errorf("client: encoding the request: %w", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://baton"+path, nil)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, b, err := c.tr.roundTrip(ctx, req, body)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("client: %s %s: %w", method, path, context.Cause(ctx))
		}
		var de *dialError
		dial := errors.As(err, &de)
		if dial {
			err = de.err
		}
		return 0, &UnreachableError{Request: method + " " + path, Socket: c.socket(), Dial: dial, Err: err}
	}
	notBaton := func() error {
		return &NotBatonError{Request: method + " " + path, Socket: c.socket(), Status: resp.StatusCode,
			ContentType: resp.Header.Get("Content-Type"), Body: b[:min(len(b), 200)]}
	}
	if resp.StatusCode >= 300 {
		if err := decodeError(resp.StatusCode, b); err != nil {
			return resp.StatusCode, err
		}
		return resp.StatusCode, notBaton()
	}
	if out != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, notBaton()
		}
	}
	return resp.StatusCode, nil
}

// Option refines an Acquire.
type Option func(*acquireOptions)

type acquireOptions struct {
	typ     string
	info    string
	wait    time.Duration
	waitSet bool
	lease   time.Duration
	noRenew bool
	reenter string // lease id to re-enter

	preemptible bool
	cleanup     time.Duration
	preempt     bool
	preemptWait time.Duration
	forceful    bool

	stopGrace    time.Duration // Lock only
	stopGraceSet bool
	lockDelay    *time.Duration // WithLockDelay (delay.go)
	shared       bool           // WithShared
}

// WithStopGrace sets the grace of Lock's stop-by signal (Lease.StopBy):
// when the lock's validity is no longer extended (ZooKeeper unreachable,
// the sidecar draining or unreachable), fn's context is cancelled this long
// before the validity ends, so that fn can finish or roll back a write in
// flight while the lock is still valid. 0 cancels it at the end of the
// validity; default DefaultStopGrace (5 s, as `baton lock --kill-grace`).
// Acquire ignores it.
func WithStopGrace(d time.Duration) Option {
	return func(o *acquireOptions) { o.stopGrace, o.stopGraceSet = d, true }
}

// WithPreemptible lets a foreground request with WithPreempt ask this lock
// to yield: the lease's State becomes api.StatePreempted (Lock cancels its
// fn's context, cause ErrPreempted) and it has cleanup to release; its
// validity is never more than cleanup ahead (renewed automatically). If the
// requester gives up first, the State returns to api.StateHeld (a Lock's fn
// stays cancelled). cleanup 0 is the sidecar's default (5 s).
func WithPreemptible(cleanup time.Duration) Option {
	return func(o *acquireOptions) { o.preemptible, o.cleanup = true, cleanup }
}

// WithPreempt (foreground only) asks a preemptible holder, on any sidecar,
// to yield within its cleanup window. Not released by then: forceful takes
// the lock from the holder (freed after the validity told to it); not
// forceful waits until wait and is then an *InstanceLockError whose Reason
// says the holder did not yield. WithWait and wait (0: the acquire's wait)
// must each be at least the holder's cleanup + 1 s, else the sidecar
// answers a 400 naming the one that is short. An acquire that gives up
// (its context ends, its wait runs out) withdraws the ask.
func WithPreempt(wait time.Duration, forceful bool) Option {
	return func(o *acquireOptions) { o.preempt, o.preemptWait, o.forceful = true, wait, forceful }
}

// ErrPreempted is the cause of Lock's fn context when a preempting request
// asked the (preemptible) lock to yield: roll back and return.
var ErrPreempted = errors.New("client: lock preempted by a higher-priority request")

// WithType asks for a Foreground (default) or Background lock.
func WithType(t string) Option { return func(o *acquireOptions) { o.typ = t } }

// WithShared asks for a shared (read) lock ("mode":"shared"): any number
// of shared holders together, none with an exclusive one (Lease.Mode says
// which). Requests are served in line (foreground first, then by arrival),
// so a waiting exclusive request is not starved by later shared ones. The
// sidecar must run zookeeper.lock.protocol=native: a plugin-protocol
// sidecar answers a 409 *APIError of kind api.SharedNeedsNative. With
// AcquireAll every object is taken shared; AcquirePermit refuses it (400).
// A re-entry keeps the lease's mode: re-entering a shared lease needs
// WithShared, and an exclusive one refuses it (400 naming "mode"): there is
// no upgrade.
func WithShared() Option { return func(o *acquireOptions) { o.shared = true } }

// WithInfo records info (at most 4 KiB) in the lock's node, for inspection.
func WithInfo(info string) Option { return func(o *acquireOptions) { o.info = info } }

// WithWait bounds the wait for the lock (at most 10 minutes). WithWait(0)
// tries once: granted only if first in line and free right away. Without
// it the sidecar waits its type's timeout.
func WithWait(d time.Duration) Option {
	return func(o *acquireOptions) { o.wait, o.waitSet = d, true }
}

// WithLease sets the lease length: the lock is released if the lease is
// not renewed within it. Without it the sidecar's sidecar.lease.default
// applies.
func WithLease(d time.Duration) Option { return func(o *acquireOptions) { o.lease = d } }

// WithReentry re-enters the lease with this id instead of asking for a new
// grant: it must be a lease the same sidecar holds on the same object (e.g.
// BATON_LEASE_ID in a command run by `baton lock`, or the Baton-Lease-Id
// header of an op delivery). The answer is that lease with one more hold
// (Lease.Holds); Release counts one down and the lock is freed at zero.
// Acquire re-enters by itself when ctx carries a lease on the object (see
// LeaseFrom). Type, info and wait do not apply to a re-entry.
func WithReentry(leaseID string) Option { return func(o *acquireOptions) { o.reenter = leaseID } }

// WithoutRenewal turns the automatic renewal and loss watch off: the caller
// renews with Lease.Renew and watches ValidFor itself.
func WithoutRenewal() Option { return func(o *acquireOptions) { o.noRenew = true } }

// ceilMS rounds a duration up to whole milliseconds (so 1ns is not 0 = try once).
func ceilMS(d time.Duration) int64 {
	ms := d.Milliseconds()
	if time.Duration(ms)*time.Millisecond < d {
		ms++
	}
	return ms
}

// Acquire asks for the lock on object and returns its lease. A lock not
// granted in time is an *InstanceLockError. Cancelling ctx abandons the
// wait (the sidecar leaves no node behind).
//
// The lease is bound to this process ("bind":"process"): the sidecar
// releases it at once when the process exits. Its validity is counted from
// when the request was sent plus the time the sidecar says it waited
// (waited_ms), so a long wait does not eat into it, and it never ends
// later than the sidecar's own valid_until.
func (c *Client) Acquire(ctx context.Context, object string, opts ...Option) (*Lease, error) {
	o := optionsOf(opts)
	if o.reenter == "" {
		// Already holding the object (inside Lock's fn): re-enter rather
		// than wait on ourselves.
		if pl := LeaseFrom(ctx); pl != nil && pl.object == object && pl.Err() == nil {
			o.reenter = pl.id
		}
	}
	return c.acquire(ctx, "/v1/locks/"+url.PathEscape(object)+"/acquire", o.request(), o)
}

// AcquireAll asks for the locks of every object of the set, all or
// nothing, within one wait (POST /v1/locks/acquire): the sidecar takes them
// in a canonical order, so two requests for overlapping sets never wait for
// each other in a cycle, and gives back what it took if the wait runs out
// (an *InstanceLockError naming the object it waited for). The lease is one
// lease for the set (one renewal, one Release); Lease.Objects lists each
// object with its own fencing token: fence each object's writes with ITS
// token. The loss of any object is the loss of the lease. A set is not
// re-entrant and not preemptible (WithReentry, WithPreemptible and
// WithPreempt are refused: a 400 *APIError naming the field).
func (c *Client) AcquireAll(ctx context.Context, objects []string, opts ...Option) (*Lease, error) {
	o := optionsOf(opts)
	req := o.request()
	req.Objects = objects
	return c.acquire(ctx, "/v1/locks/acquire", req, o)
}

// AcquirePermit takes one of the permits of the counting semaphore name
// (POST /v1/semaphores/{name}/acquire): at most permits holders at once,
// across every sidecar, among requests that give the same permits. The
// lease is an ordinary lease of the permit's lock object (Lease.Object),
// with its own fencing token; Lease.Permit says which permit. Not
// re-entrant and not preemptible, like AcquireAll.
func (c *Client) AcquirePermit(ctx context.Context, name string, permits int, opts ...Option) (*Lease, error) {
	o := optionsOf(opts)
	req := o.request()
	req.Permits = permits
	return c.acquire(ctx, "/v1/semaphores/"+url.PathEscape(name)+"/acquire", req, o)
}

// Semaphore returns the semaphore's held permits and its waiters,
// cluster-wide (GET /v1/semaphores/{name}).
func (c *Client) Semaphore(ctx context.Context, name string) (*api.SemaphoreStatus, error) {
	var v api.SemaphoreStatus
	if _, err := c.send(ctx, http.MethodGet, "/v1/semaphores/"+url.PathEscape(name), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func optionsOf(opts []Option) acquireOptions {
	var o acquireOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// request is the acquire request the options ask for.
func (o *acquireOptions) request() api.AcquireRequest {
	req := api.AcquireRequest{Type: o.typ, Info: o.info, Bind: api.BindProcess, LeaseID: o.reenter,
		Preemptible: o.preemptible, Preempt: o.preempt, Forceful: o.forceful}
	if o.shared {
		req.Mode = api.ModeShared
	}
	if o.preemptible && o.cleanup > 0 {
		ms := ceilMS(o.cleanup)
		req.CleanupMS = &ms
	}
	if o.preempt && o.preemptWait > 0 {
		ms := ceilMS(o.preemptWait)
		req.PreemptWaitMS = &ms
	}
	if o.lockDelay != nil {
		ms := ceilMS(*o.lockDelay)
		req.LockDelayMS = &ms
	}
	if o.waitSet {
		ms := ceilMS(o.wait)
		req.WaitMS = &ms
	}
	if o.lease > 0 {
		ms := ceilMS(o.lease)
		req.LeaseMS = &ms
	}
	return req
}

// acquire sends an acquire request to path and makes its answer a Lease,
// renewed and watched in the background unless o says not to.
func (c *Client) acquire(ctx context.Context, path string, req api.AcquireRequest, o acquireOptions) (*Lease, error) {
	sent := time.Now()
	var v api.Lease
	if _, err := c.send(ctx, http.MethodPost, path, req, &v); err != nil {
		return nil, err
	}
	// The sidecar granted no earlier than sent + waited_ms (it started
	// waiting after the request was sent, and rounds waited down) and
	// answered valid_for_ms from the grant or later: so this is a lower
	// bound of its valid_until, not counted from the start of the wait.
	// A re-entry did not wait (an older sidecar answers it with the
	// original grant's waited_ms): counted from sent.
	granted := sent
	if o.reenter == "" {
		granted = sent.Add(time.Duration(max(v.WaitedMS, 0)) * time.Millisecond)
	}
	l := newLease(c, v, granted, o)
	if !o.noRenew {
		c.mu.Lock()
		if c.leases == nil {
			c.leases = map[*Lease]struct{}{}
		}
		c.leases[l] = struct{}{}
		c.mu.Unlock()
		l.startBackground()
	}
	return l, nil
}

func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

// leaseKey is the context key of the lease Lock runs fn under.
type leaseKey struct{}

// LeaseFrom returns the lease of the Lock call whose fn got ctx (for its
// fencing token: hand LeaseFrom(ctx).Token() to the storage), or nil.
func LeaseFrom(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// Lock acquires object, runs fn with a context that carries the lease
// (LeaseFrom), and releases the lock when fn returns. fn's context is
// cancelled by the lease's stop-by signal (Lease.StopBy, with the grace of
// WithStopGrace, default DefaultStopGrace): a grace before the lock's
// validity ends when it is no longer extended — ZooKeeper unreachable,
// the sidecar draining or not answering (cause wrapping
// ErrValidityEnding) — and at once when the lock is preempted (ErrPreempted)
// or lost (the loss, wrapping ErrLockLost), or its lease released by
// someone else (ErrNoNode). Once cancelled it stays cancelled, also if the
// lease is held again. Lock returns fn's error, joined with an error
// wrapping ErrLockLost if the lock was lost while fn ran, or the release's
// error. A negative grace is an error (nothing is acquired).
func (c *Client) Lock(ctx context.Context, object string, fn func(ctx context.Context) error, opts ...Option) error {
	var o acquireOptions
	for _, f := range opts {
		f(&o)
	}
	grace := DefaultStopGrace
	if o.stopGraceSet {
		grace = o.stopGrace
	}
	if grace < 0 {
		return fmt.Errorf("client: WithStopGrace: %v is negative; give 0 or more (the time fn has to finish before the lock's validity ends)", grace)
	}
	l, err := c.Acquire(ctx, object, opts...)
	if err != nil {
		return err
	}
	stop := l.StopBy(grace)
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, l))
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case ev := <-stop.Events():
				if ev.Kind == StopNow || ev.Kind == StopReleased {
					cancel(ev.Err)
					return
				}
			case <-fctx.Done():
				return
			}
		}
	})
	ferr := fn(fctx)
	cancel(nil)
	wg.Wait()
	stop.Close()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	rerr := l.Release(rctx)
	if lerr := l.Err(); lerr != nil {
		if errors.Is(ferr, ErrLockLost) || errors.Is(ferr, ErrNoNode) {
			return ferr // fn returned the loss (e.g. context.Cause of its ctx): told once
		}
		return errors.Join(ferr, lerr)
	}
	return errors.Join(ferr, rerr)
}

// Drain asks the sidecar to drain, as SIGTERM does (POST /v1/drain): it stops
// granting, keeps renewing leases but never past the end of
// sidecar.shutdown.grace (their state is api.StateDraining), tells the
// holders left at that end that their lock is lost and then exits. It
// returns at once; the sidecar stops answering when the drain is over.
func (c *Client) Drain(ctx context.Context) (*api.DrainResponse, error) {
	var v api.DrainResponse
	if _, err := c.send(ctx, http.MethodPost, "/v1/drain", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Revoke asks for the holder of object to be revoked (through any sidecar):
// its sidecar refuses its renewals (410, reason "revoked: <reason>"), tells
// it at once, and frees the lock after the last validity it told it. A
// token other than 0 revokes only the grant with that fencing token. No
// holder is an error wrapping ErrNoNode; a holder that is not a Baton grant
// (the plugin's) is a 409 *APIError: it cannot be revoked safely.
func (c *Client) Revoke(ctx context.Context, object, reason string, token int64) (*api.RevokeResponse, error) {
	var v api.RevokeResponse
	req := api.RevokeRequest{Reason: reason, Token: token}
	if _, err := c.send(ctx, http.MethodPost, "/v1/locks/"+url.PathEscape(object)+"/revoke", req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Leases returns the caller's leases on this sidecar (GET /v1/leases), by
// the uid of the calling process; an admin's call returns every lease, each
// with its owner's uid (LeaseList.All).
func (c *Client) Leases(ctx context.Context) (*api.LeaseList, error) {
	var v api.LeaseList
	if _, err := c.send(ctx, http.MethodGet, "/v1/leases", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ReleaseLease releases a lease by id (DELETE /v1/leases/{id}), e.g. one
// Leases listed whose *Lease was lost with the process that acquired it.
// Only the lease's owner uid, or an admin, may (else a 403 *APIError). A
// lease re-entered by several holders has one hold counted down.
func (c *Client) ReleaseLease(ctx context.Context, id string) (*api.ReleaseResponse, error) {
	var v api.ReleaseResponse
	if _, err := c.send(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(id), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Inspect returns the object's holder and waiters, cluster-wide, in grant order.
func (c *Client) Inspect(ctx context.Context, object string) (*api.LockStatus, error) {
	var v api.LockStatus
	if _, err := c.send(ctx, http.MethodGet, "/v1/locks/"+url.PathEscape(object), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Check asks whether token is the object's current grant (GET
// /v1/locks/{object}/check, Chubby's CheckSequencer), through any sidecar:
// Current is true only if ZooKeeper, read after a sync, holds the grant
// with that fencing token right now. ValidForMS is set only by the holder's
// own sidecar. A token that is not positive is a 400 *APIError naming
// "token".
func (c *Client) Check(ctx context.Context, object string, token int64) (api.CheckResult, error) {
	var v api.CheckResult
	p := "/v1/locks/" + url.PathEscape(object) + "/check?token=" + strconv.FormatInt(token, 10)
	if _, err := c.send(ctx, http.MethodGet, p, nil, &v); err != nil {
		return api.CheckResult{}, err
	}
	return v, nil
}

// RequireCurrent is the check storage code calls before a write on behalf
// of the holder of token: nil if token is the object's current grant, a
// *StaleTokenError (errors.Is ErrStaleToken) if it is not, any other error
// if the sidecar could not tell (refuse the write then too). The grant can
// still end between the check and the write; a storage that compares the
// token itself in the write (a fence column, a conditional update) closes
// that gap.
func (c *Client) RequireCurrent(ctx context.Context, object string, token int64) error {
	v, err := c.Check(ctx, object, token)
	if err != nil {
		return err
	}
	if !v.Current {
		return &StaleTokenError{Object: object, Token: token, Current: v.Token}
	}
	return nil
}

// ListOptions select objects for List.
type ListOptions struct {
	Prefix string // object names starting with it
	After  string // object names sorting after it (the previous page's Next)
	Limit  int    // at most this many (1..1000); 0 = the sidecar's default (100)
}

// List returns objects with their holder and number of waiters.
func (c *Client) List(ctx context.Context, o ListOptions) (*api.LockList, error) {
	q := url.Values{}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	p := "/v1/locks"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var v api.LockList
	if _, err := c.send(ctx, http.MethodGet, p, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Health returns the sidecar's /healthz report.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var v api.Health
	if _, err := c.send(ctx, http.MethodGet, "/healthz", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Ready returns nil when the sidecar is ready (/readyz 200), else an
// *APIError (Is ErrUnavailable) whose Message gives the reason.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.send(ctx, http.MethodGet, "/readyz", nil, nil)
	return err
}

// Submit hands a background operation to the sidecar. A known id with the
// same body answers with its state (Duplicate true) and is not run again.
func (c *Client) Submit(ctx context.Context, op api.OpRequest) (*OpAck, error) {
	var v api.OpAck
	status, err := c.send(ctx, http.MethodPost, "/v1/ops", op, &v)
	if err != nil {
		return nil, err
	}
	return &OpAck{OpAck: v, Duplicate: status == http.StatusOK}, nil
}

// OpAck is the answer to Submit and Replay.
type OpAck struct {
	api.OpAck
	Duplicate bool // the id was known with the same body: nothing new was queued
}

// Op returns a background operation's state.
func (c *Client) Op(ctx context.Context, id string) (*api.Op, error) {
	var v api.Op
	if _, err := c.send(ctx, http.MethodGet, "/v1/ops/"+url.PathEscape(id), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// OpsOptions select ops for Ops.
type OpsOptions struct {
	State  string // only ops in this state (api.OpQueued, …)
	Object string // only ops of this object
	After  string // the previous page's Next
	Limit  int    // at most this many (1..1000); 0 = the sidecar's default (100)
}

// Ops returns a page of the sidecar's ops in id order (GET /v1/ops).
func (c *Client) Ops(ctx context.Context, o OpsOptions) (*api.OpList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": o.State, "object": o.Object, "after": o.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	p := "/v1/ops"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var v api.OpList
	if _, err := c.send(ctx, http.MethodGet, p, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Discard deletes a dead-lettered operation and its payload for good
// (POST /v1/ops/{id}/discard): the way out for an op the sidecar keeps
// because its dead letter went out without the payload. Any other state
// is an *APIError 409 Conflict.
func (c *Client) Discard(ctx context.Context, id string) (*api.OpDiscarded, error) {
	var v api.OpDiscarded
	if _, err := c.send(ctx, http.MethodPost, "/v1/ops/"+url.PathEscape(id)+"/discard", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Replay queues a dead-lettered operation again.
func (c *Client) Replay(ctx context.Context, id string) (*OpAck, error) {
	var v api.OpAck
	if _, err := c.send(ctx, http.MethodPost, "/v1/ops/"+url.PathEscape(id)+"/replay", nil, &v); err != nil {
		return nil, err
	}
	if v.ID == "" {
		v.ID = id
	}
	return &OpAck{OpAck: v}, nil
}
