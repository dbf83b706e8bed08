package sidecar

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

// acquireSpec is an acquire request checked by parseAcquire, its defaults
// applied.
type acquireSpec struct {
	object string // a set: its first object; a semaphore: its name
	// objects is a set's objects in canonical order (POST
	// /v1/locks/acquire), nil otherwise.
	objects []string
	// permits is a semaphore's permits (POST
	// /v1/semaphores/{name}/acquire), 0 otherwise.
	permits int
	typ     lock.Type
	info    string
	bind    bool // "bind": "process": the lease ends when the caller's process exits
	// wait is wait_ms, else the type's zookeeper.*.task.timeout: the one
	// place the wait is defaulted. 0 means try once (the API's meaning);
	// lockOptions converts it to the engine's.
	wait      time.Duration
	waitGiven bool          // wait_ms was given (else wait is the type's default)
	length    time.Duration // lease_ms, else sidecar.lease.default

	// leaseID, when set, names the lease to re-enter; nothing below applies.
	leaseID string
	// reenterLength is lease_ms as given for a re-entry; 0: the lease's own.
	reenterLength time.Duration

	preemptible bool
	cleanup     time.Duration // the cleanup window of a preemptible grant: cleanup_ms, else DefaultCleanup
	preempt     bool
	forceful    bool           // preempt forcefully: only with preempt, and the caller may (an admin action)
	preemptWait time.Duration  // preempt_wait_ms, else wait
	preemptGiv  *time.Duration // preempt_wait_ms when given (preemptWaits)
	// lockDelay is the engine's AcquireOptions.LockDelay: lock_delay_ms, else
	// zookeeper.lock.delay; -1 none (lockDelayOf, delay.go).
	lockDelay time.Duration
	// shared is "mode":"shared" (default exclusive): the engine's
	// AcquireOptions.Shared; for a re-entry, the mode the lease must have.
	shared bool
}

// keyForegroundTimeout names the default wait of a foreground acquire (the
// only type that may preempt) in refusals.
const keyForegroundTimeout = "zookeeper.foreground.task.timeout"

// parseAcquire checks POST /v1/locks/{object}/acquire (the path value
// "object", the query, the body) against cfg and returns what it asks for.
// It is the one place an acquire request is refused for what it says:
// every refusal is a 400 naming the field (413 for a body over
// api.MaxBody), except a forceful preemption the caller may not ask for, a
// 403 (authorization of actForceful: cfg's allow-lists and the caller in
// r's context), and preempt or preemptible on a native-protocol sidecar, a
// 409 NotNative naming the field. Two refusals need state and are decided later: a lease_id
// this sidecar does not hold (Server.reentrant) and a holder whose cleanup
// window outlasts the wait (preemptWaits at the ask). With lease_id, the
// preemption fields are not checked (a re-entry never waits). It reads the
// body and nothing else: no ZooKeeper, no lease, no log.
func parseAcquire(r *http.Request, cfg *props.Config) (acquireSpec, error) {
	return parseAcquireAs(r, cfg, acquireObject)
}

// parseAcquireAs is parseAcquire for the acquire route of kind (recipes.go:
// a set's objects and a semaphore's permits are checked there).
func parseAcquireAs(r *http.Request, cfg *props.Config, kind acquireKind) (acquireSpec, error) {
	sp := acquireSpec{typ: lock.Foreground, wait: cfg.ForegroundTimeout, length: cfg.LeaseDefault}
	switch kind {
	case acquireObject:
		sp.object = r.PathValue("object")
		if err := validLockObject(sp.object); err != nil {
			return sp, err
		}
	case acquirePermit:
		sp.object = r.PathValue("name")
	}
	if _, err := queryParams(r); err != nil {
		return sp, err
	}
	var req api.AcquireRequest
	if err := decodeBody(nil, r, &req); err != nil {
		return sp, err
	}
	if err := sp.parseRecipe(kind, req); err != nil {
		return sp, err
	}
	switch req.Mode {
	case "", api.ModeExclusive:
	case api.ModeShared:
		if kind == acquirePermit {
			return sp, badRequest("mode", "%q is not supported for a semaphore (its permits are exclusive locks; leave mode out)", req.Mode)
		}
		sp.shared = true
	default:
		return sp, badRequest("mode", "%q is not %q or %q", req.Mode, api.ModeExclusive, api.ModeShared)
	}
	switch req.Bind {
	case api.BindNone, api.BindProcess:
		sp.bind = req.Bind == api.BindProcess
	default:
		return sp, badRequest("bind", "%q is not %q (omit it for a lease that lives until released or expired)", req.Bind, api.BindProcess)
	}
	switch req.Type {
	case "", api.Foreground:
	case api.Background:
		sp.typ, sp.wait = lock.Background, cfg.BackgroundTimeout
	default:
		return sp, badRequest("type", "%q is not %q or %q", req.Type, api.Foreground, api.Background)
	}
	if len(req.Info) > lock.MaxInfoBytes {
		return sp, badRequest("info", "%d bytes, at most %d", len(req.Info), lock.MaxInfoBytes)
	}
	sp.info = req.Info
	var err error
	if req.WaitMS != nil {
		if sp.wait, err = msParam("wait_ms", *req.WaitMS, 0, api.MaxWaitMS); err != nil {
			return sp, err
		}
		sp.waitGiven = true
	}
	if req.LeaseMS != nil {
		if sp.length, err = msParam("lease_ms", *req.LeaseMS, 1, cfg.LeaseMax.Milliseconds()); err != nil {
			return sp, err
		}
		sp.reenterLength = sp.length
	}
	if sp.lockDelay, err = lockDelayOf(req.LockDelayMS, cfg); err != nil {
		return sp, err
	}
	if req.LeaseID != "" {
		sp.leaseID = req.LeaseID
		return sp, nil
	}
	return sp, sp.parsePreemption(r, cfg, req)
}

// parsePreemption is parseAcquire's part for preemptible, cleanup_ms,
// preempt, forceful and preempt_wait_ms.
func (sp *acquireSpec) parsePreemption(r *http.Request, cfg *props.Config, req api.AcquireRequest) error {
	var err error
	if cfg.LockProtocol == "native" { // the asks live in privateLock's data, which native does not have
		for _, f := range []struct {
			name string
			set  bool
		}{{"preemptible", req.Preemptible}, {"preempt", req.Preempt}} {
			if f.set {
				return notNative(f.name, "preemption asks a holder to yield through its privateLock")
			}
		}
	}
	sp.preemptible, sp.cleanup = req.Preemptible, DefaultCleanup
	if req.CleanupMS != nil {
		if !req.Preemptible {
			return badRequest("cleanup_ms", "only applies with \"preemptible\": true")
		}
		if sp.cleanup, err = msParam("cleanup_ms", *req.CleanupMS, 1, api.MaxWaitMS); err != nil {
			return err
		}
	}
	sp.preempt, sp.preemptWait = req.Preempt, sp.wait
	if req.PreemptWaitMS != nil {
		if !req.Preempt {
			return badRequest("preempt_wait_ms", "only applies with \"preempt\": true")
		}
		if sp.preemptWait, err = msParam("preempt_wait_ms", *req.PreemptWaitMS, 0, api.MaxWaitMS); err != nil {
			return err
		}
		d := sp.preemptWait
		sp.preemptGiv = &d
	}
	switch {
	case req.Forceful && !req.Preempt:
		return badRequest("forceful", "only applies with \"preempt\": true")
	case req.Preempt && sp.typ != lock.Foreground:
		return badRequest("preempt", "only a foreground acquire may preempt")
	}
	if req.Forceful {
		if p := peerFrom(r.Context()); !authPolicyOf(cfg, selfPeer.uid).may(p, actForceful) { // an admin action (SPEC §7)
			return forbidden(p, actForceful)
		}
		sp.forceful = true
	}
	if sp.preempt {
		return sp.canWaitFor(0)
	}
	return nil
}

// canWaitFor checks that a preempting acquire can wait for the yield of a
// holder whose cleanup window is cleanup (0: before the holder is known).
// See preemptWaits.
func (sp *acquireSpec) canWaitFor(cleanup time.Duration) error {
	return preemptWaits(sp.wait, sp.waitGiven, keyForegroundTimeout, sp.preemptGiv, cleanup)
}

// lockOptions converts the spec to the engine's options. It is the one
// place the API's wait becomes the engine's: wait 0 (try once) is TryOnce
// with Wait 0 (the engine's default wait then bounds only the wait for a
// connection); any other wait is passed as it is, so that the engine's own
// default (its Wait 0) never applies to an API acquire. With asked (a
// non-forceful preemption ask stands), the wait is cut to preempt_wait_ms.
func (sp *acquireSpec) lockOptions(asked bool, onSignal func(lock.Signal)) lock.AcquireOptions {
	o := lock.AcquireOptions{Info: sp.info, Wait: sp.wait, OnSignal: onSignal, LockDelay: sp.lockDelay, Shared: sp.shared}
	if sp.preemptible { // recorded in the nodes for a preempting requester (preemptWaits)
		o.Preemptible, o.Cleanup = true, sp.cleanup
	}
	if sp.wait == 0 {
		o.TryOnce = true
		return o
	}
	if asked && !sp.forceful && sp.preemptWait < o.Wait {
		o.Wait = max(sp.preemptWait, time.Millisecond)
	}
	return o
}

// acquire is the acquire of kind: POST /v1/locks/{object}/acquire, POST
// /v1/locks/acquire (a set) or POST /v1/semaphores/{name}/acquire. It parses
// (parseAcquireAs), then either re-enters the lease named by lease_id or
// acquires a new lease (acquisition: admission, the bound caller's exit
// watch, the preemption ask, the engine's wait, the lease). Every outcome of
// a new lease is observed in baton_lock_acquire_seconds by result.
func (s *Server) acquire(kind acquireKind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		r.Body = http.MaxBytesReader(w, r.Body, api.MaxBody) // parseAcquire reads it
		sp, err := parseAcquireAs(r, s.config(), kind)
		if err != nil {
			if he, ok := errors.AsType[*httpError](err); ok && he.Body.Kind == api.Forbidden {
				auditRefused(s.log, r, actForceful)
			}
			return err
		}
		if sp.leaseID != "" { // a re-entry: the lease, with one more hold (reentry.go)
			l, err := s.leases.reentrant(sp.leaseID, sp.object, sp.shared)
			if err == nil {
				err = s.auth.checkOwner(r, l, actReenter)
			}
			if err != nil {
				return err
			}
			v, err := s.leases.reenter(l, sp.reenterLength)
			if err != nil {
				return err
			}
			s.m.observeAcquire(l.g.Type().String(), resReentered, 0)
			noteGrant(r.Context(), l) // an answer that cannot be written gives this hold back (unwritten.go)
			writeJSON(w, http.StatusOK, (*leaseJSON)(&v))
			return nil
		}
		a := &acquisition{s: s, r: r, sp: sp, caller: peerFrom(r.Context()), result: resError}
		start := time.Now()
		defer func() { s.m.observeAcquire(sp.typ.String(), a.result, time.Since(start).Seconds()) }()
		defer a.giveBack()
		v, err := a.run()
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, (*leaseJSON)(&v))
		return nil
	}
}

// acquisition is one acquire of a new lease on its way (Server.acquire).
// It is used by the request's goroutine only.
type acquisition struct {
	s      *Server
	r      *http.Request
	sp     acquireSpec
	caller peer
	result string // its baton_lock_acquire_seconds result
	// What admission (and a bound acquire) took, given back by giveBack in
	// the reverse order (fields, not closures: no allocation per acquire).
	waiting   bool          // counted in s.waiters
	capsTaken int           // how many of admitCaps the caller's caps gave
	byType    *atomic.Int64 // s.waitingFG or s.waitingBG, counted
	cancel    func()        // ends the ctx admit returned
	stopDrain func() bool   // stops the drain's cancel of it
	callerPW  *pidWatch     // a bound acquire's watch of the caller
	// held is the lease once granted: a signal written by any sidecar (a
	// revocation, a preemption) reaches it through the engine's OnSignal;
	// one arriving before the lease exists is found by LastSignal.
	held atomic.Pointer[lease]
}

// admitCaps are the per-uid caps an acquire takes, in order: the waiting
// acquire's slot, and the lease's, which the lease takes over once granted.
var admitCaps = [...]capKind{capWaiters, capLeases}

func (a *acquisition) giveBack() {
	s := a.s
	if a.callerPW != nil {
		s.leases.unholdPID(a.callerPW)
	}
	if a.stopDrain != nil {
		a.stopDrain()
	}
	if a.cancel != nil {
		a.cancel()
	}
	if a.byType != nil {
		a.byType.Add(-1)
	}
	for i := a.capsTaken - 1; i >= 0; i-- {
		if k := admitCaps[i]; k != capLeases || a.held.Load() == nil {
			s.caps.put(a.caller.uid, k)
		}
	}
	if a.waiting {
		s.waiters.Add(-1)
	}
}

// run admits the acquire, waits for the grant and makes it a lease.
func (a *acquisition) run() (api.Lease, error) {
	ctx, err := a.admit()
	if err != nil {
		return api.Lease{}, err
	}
	s, sp := a.s, &a.sp
	var callerPW *pidWatch // bound: watch the caller from now, not from the grant
	if sp.bind {
		callerPW = s.leases.holdPID(pidFrom(a.r.Context()))
		a.callerPW = callerPW
	}
	var ask *preemptAsk
	var req string // the acquire's request id, named in its ask (lock.Grant.LiveAsks)
	if sp.preempt {
		req = lock.NewRequestID()
		if ask, err = s.pre.ask(ctx, sp.object, sp.info, sp.forceful, sp.preemptWait, who(a.r.Context()), req, sp.canWaitFor); err != nil {
			return api.Lease{}, err
		}
	}
	opts := sp.lockOptions(ask != nil, func(sig lock.Signal) {
		if l := a.held.Load(); l != nil {
			s.pre.onSignal(l, sig)
		}
	})
	opts.RequestID = req
	g, err := a.take(ctx, opts)
	if err != nil {
		return api.Lease{}, a.notGranted(err, ask, opts.TryOnce)
	}
	return a.lease(g, callerPW)
}

// admit refuses an acquire the sidecar cannot take now (draining, 503;
// sidecar.max.waiters, 503; the caller's per-uid caps, 429) and counts it
// as waiting; the counts are given back by giveBack, except the caller's
// lease slot, which the lease takes over. The ctx returned ends with the
// request or when the drain begins.
func (a *acquisition) admit() (context.Context, error) {
	s, cfg := a.s, a.s.config()
	if s.drain.stopping() {
		a.result = resShuttingDown
		return nil, shuttingDown(nil)
	}
	if n := s.waiters.Add(1); n > int64(cfg.MaxWaiters) {
		s.waiters.Add(-1)
		a.result = resTooManyWaiters
		return nil, newError(api.TooManyWaiters, "%d acquires are already in progress on this sidecar (sidecar.max.waiters = %d); retry later",
			n-1, cfg.MaxWaiters)
	}
	a.waiting = true
	for _, k := range admitCaps {
		if err := s.caps.takeFor(a.caller, k); err != nil {
			a.result = resRefused
			return nil, err
		}
		a.capsTaken++
	}
	byType := &s.waitingFG
	if a.sp.typ == lock.Background {
		byType = &s.waitingBG
	}
	byType.Add(1)
	a.byType = byType
	ctx, cancel := context.WithCancel(a.r.Context())
	a.cancel = cancel
	a.stopDrain = context.AfterFunc(s.drain.ctx, cancel)
	return ctx, nil
}

// notGranted is the answer of an acquire the engine did not grant; a
// preemption ask it wrote is withdrawn (the holder may go on).
func (a *acquisition) notGranted(err error, ask *preemptAsk, tryOnce bool) error {
	s, r := a.s, a.r
	he := s.errs.toHTTPError(r, err)
	if ask != nil {
		s.pre.withdraw(r.Context(), ask, he.Body.Kind)
		if he.Body.Kind == api.InstanceLockException {
			he.Body.Reason = preemptReason(a.sp.preemptWait)
		}
	}
	switch he.Body.Kind {
	case api.InstanceLockException:
		a.result = resTimeout
		if tryOnce {
			a.result = resNotGranted
		}
	case api.ZooKeeperUnavailable:
		a.result = resUnavailable
	case api.SharedNeedsNative, api.NotNative:
		a.result = resRefused
	case api.ShuttingDown:
		a.result = resShuttingDown
	}
	if r.Context().Err() != nil {
		a.result = resCanceled
	}
	return he
}

// lease makes grant g a lease and renders it, told to the caller; a grant
// nobody would hold (the caller went away, its bound process exited, the
// drain began) is released instead.
func (a *acquisition) lease(g holding, callerPW *pidWatch) (api.Lease, error) {
	s, r, sp := a.s, a.r, &a.sp
	if r.Context().Err() != nil { // the caller went away: nobody would hold it
		a.result = resCanceled
		s.leases.releaseGrant(g)
		return api.Lease{}, clientGone(r.Context().Err())
	}
	var pid int32 // not bound: the lease alone decides
	if sp.bind {
		pid = pidFrom(r.Context())
	}
	l, err := s.leases.add(g, pid, callerPW, sp.length, ownerOf(a.caller))
	switch {
	case errors.Is(err, errCallerExited):
		a.result = resCanceled
		s.leases.releaseGrant(g)
		return api.Lease{}, clientGone(err)
	case err != nil:
		a.result = resShuttingDown
		s.leases.releaseGrant(g)
		return api.Lease{}, err
	}
	if sp.preemptible {
		l.mu.Lock()
		l.preemptible, l.cleanup = true, sp.cleanup
		l.mu.Unlock()
	}
	a.result = resGranted
	a.held.Store(l)           // from now on the lease has the caller's lease slot
	noteGrant(r.Context(), l) // an answer that cannot be written releases it (unwritten.go)
	v := s.leases.view(l, true)
	if sig, ok := g.LastSignal(); ok {
		s.pre.onSignal(l, sig) // revoked before the lease existed: told right after this answer
	}
	return v, nil
}
