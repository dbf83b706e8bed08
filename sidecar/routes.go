package sidecar

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

type handlerFunc func(http.ResponseWriter, *http.Request) error

// methods maps an HTTP method to its handler for one path.
type methods map[string]handlerFunc

// inspectTimeout bounds reads of ZooKeeper for GET /v1/locks[/{object}].
const inspectTimeout = 5 * time.Second

// defaultLongPoll is the long-poll bound when timeout_ms is not given.
const defaultLongPoll = 30 * time.Second

type router struct {
	s                                                                                                   *Server
	healthz, readyz, metrics, list, inspect, acquire, lease, renew, drain, opsSubmit, opsGet, opsReplay methods
	revoke                                                                                              methods
	leases                                                                                              methods // GET /v1/leases (leases.go)
	opsDiscard                                                                                          methods
	check                                                                                               methods // GET /v1/locks/{object}/check (check.go)
}

func (s *Server) routes() http.Handler {
	prom := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return &router{
		s:         s,
		healthz:   methods{http.MethodGet: s.healthz},
		readyz:    methods{http.MethodGet: s.readyz},
		metrics:   methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error { prom.ServeHTTP(w, r); return nil }},
		list:      methods{http.MethodGet: s.as(actInspect, s.list)},
		inspect:   methods{http.MethodGet: s.as(actInspect, s.inspect)},
		acquire:   methods{http.MethodPost: s.as(actAcquire, s.acquire)},
		revoke:    methods{http.MethodPost: s.as(actRevoke, s.revoke)},
		lease:     methods{http.MethodGet: s.as(actInspect, s.getLease), http.MethodDelete: s.as(actRelease, s.deleteLease)},
		renew:     methods{http.MethodPost: s.as(actRenew, s.renewLease)},
		drain:     methods{http.MethodPost: s.as(actDrain, s.startDrain)},
		opsSubmit: methods{http.MethodPost: s.as(actSubmit, s.serveOps), http.MethodGet: s.as(actListOps, s.serveOps)},
		opsGet:    methods{http.MethodGet: s.as(actGetOp, s.serveOps)},
		opsReplay: methods{http.MethodPost: s.as(actReplay, s.auditReplay)},
		leases:    methods{http.MethodGet: s.as(actListLeases, s.listLeases)},
		// An admin action (SPEC §7): deletes a dead-lettered op for good.
		opsDiscard: methods{http.MethodPost: s.as(actDiscard, s.serveOps)},
		check:      methods{http.MethodGet: s.as(actCheck, s.check)},
	}
}

// ServeHTTP routes on the escaped path, split at "/" and unescaped per
// segment, so an object may contain "/" (as %2F) or be "..".
func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := rt.s
	h := rt.match(r)
	if h == nil {
		s.writeError(w, r, newError(api.NotFound, "no such path %q; the API is under /v1/locks, /v1/leases and /v1/ops, plus /v1/drain, /healthz, /readyz and /metrics (all of it: GET /v1/openapi.json)", r.URL.Path))
		return
	}
	method := r.Method
	if method == http.MethodHead && h[http.MethodGet] != nil {
		method = http.MethodGet
	}
	f := h[method]
	if f == nil {
		allow := make([]string, 0, len(h))
		for m := range h {
			allow = append(allow, m)
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.writeError(w, r, newError(api.MethodNotAllowed, "method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
		return
	}
	if err := f(w, r); err != nil {
		s.writeError(w, r, err)
	}
}

func (rt *router) match(r *http.Request) methods {
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		return nil
	}
	raw := strings.Split(p[1:], "/")
	segs := make([]string, len(raw))
	for i, seg := range raw {
		u, err := url.PathUnescape(seg)
		if err != nil {
			return nil
		}
		segs[i] = u
	}
	n := len(segs)
	if n == 1 {
		switch segs[0] {
		case "healthz":
			return rt.healthz
		case "readyz":
			return rt.readyz
		case "metrics":
			return rt.metrics
		}
		return nil
	}
	if segs[0] != "v1" {
		return nil
	}
	switch segs[1] {
	case "openapi.json":
		if n == 2 {
			return openapiRoute
		}
	case "drain":
		if n == 2 {
			return rt.drain
		}
	case "locks":
		switch {
		case n == 2:
			return rt.list
		case n == 3:
			r.SetPathValue("object", segs[2])
			return rt.inspect
		case n == 4 && segs[3] == "acquire":
			r.SetPathValue("object", segs[2])
			return rt.acquire
		case n == 4 && segs[3] == "revoke":
			r.SetPathValue("object", segs[2])
			return rt.revoke
		case n == 4 && segs[3] == "check":
			r.SetPathValue("object", segs[2])
			return rt.check
		}
	case "leases":
		switch {
		case n == 2:
			return rt.leases
		case n == 3:
			r.SetPathValue("id", segs[2])
			return rt.lease
		case n == 4 && segs[3] == "renew":
			r.SetPathValue("id", segs[2])
			return rt.renew
		}
	case "ops":
		switch {
		case n == 2:
			return rt.opsSubmit
		case n == 3:
			r.SetPathValue("id", segs[2])
			return rt.opsGet
		case n == 4 && segs[3] == "replay":
			r.SetPathValue("id", segs[2])
			return rt.opsReplay
		case n == 4 && segs[3] == "discard":
			r.SetPathValue("id", segs[2])
			return rt.opsDiscard
		}
	}
	return nil
}

func (s *Server) serveOps(w http.ResponseWriter, r *http.Request) error {
	h := s.opsH.Load()
	if h == nil {
		return newError(api.OpsDisabled, "background operations are disabled: set sidecar.app.url to enable them")
	}
	(*h).ServeHTTP(w, r.WithContext(httpapi.WithCaller(r.Context(), who(r.Context()))))
	return nil
}

// validObject checks the object path value.
func validObject(obj string) error {
	if _, err := lock.EscapeObject(obj); err != nil {
		return badRequest("object", "%v", err)
	}
	return nil
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) error {
	obj := r.PathValue("object")
	if err := validObject(obj); err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	var req api.AcquireRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	switch req.Bind {
	case api.BindNone, api.BindProcess:
	default:
		return badRequest("bind", "%q is not %q (omit it for a lease that lives until released or expired)", req.Bind, api.BindProcess)
	}
	typ := lock.Foreground
	if req.Type != "" {
		switch req.Type {
		case api.Foreground:
		case api.Background:
			typ = lock.Background
		default:
			return badRequest("type", "%q is not %q or %q", req.Type, api.Foreground, api.Background)
		}
	}
	if len(req.Info) > lock.MaxInfoBytes {
		return badRequest("info", "%d bytes, at most %d", len(req.Info), lock.MaxInfoBytes)
	}
	cfg := s.config()
	wait := cfg.ForegroundTimeout
	if typ == lock.Background {
		wait = cfg.BackgroundTimeout
	}
	if req.WaitMS != nil {
		d, err := msParam("wait_ms", *req.WaitMS, 0, api.MaxWaitMS)
		if err != nil {
			return err
		}
		wait = d
	}
	length := cfg.LeaseDefault
	if req.LeaseMS != nil {
		d, err := msParam("lease_ms", *req.LeaseMS, 1, cfg.LeaseMax.Milliseconds())
		if err != nil {
			return err
		}
		length = d
	}
	if req.LeaseID != "" {
		l, err := s.reentrant(req.LeaseID, obj)
		if err != nil {
			return err
		}
		if err := s.checkOwner(r, l, actReenter); err != nil {
			return err
		}
		var length time.Duration
		if req.LeaseMS != nil {
			length = time.Duration(*req.LeaseMS) * time.Millisecond
		}
		v, err := s.reenter(l, length)
		if err != nil {
			return err
		}
		s.m.acquire.WithLabelValues(l.g.Type().String(), resReentered).Observe(0)
		writeJSON(w, http.StatusOK, v)
		return nil
	}
	// A revocation written by any sidecar reaches the lease here (set once
	// the lease exists; one arriving before is found by LastSignal below).
	var held atomic.Pointer[lease]
	cleanup := DefaultCleanup
	if req.CleanupMS != nil {
		if !req.Preemptible {
			return badRequest("cleanup_ms", "only applies with \"preemptible\": true")
		}
		d, err := msParam("cleanup_ms", *req.CleanupMS, 1, api.MaxWaitMS)
		if err != nil {
			return err
		}
		cleanup = d
	}
	preemptWait := wait
	var preemptWaitGiven *time.Duration
	if req.PreemptWaitMS != nil {
		if !req.Preempt {
			return badRequest("preempt_wait_ms", "only applies with \"preempt\": true")
		}
		d, err := msParam("preempt_wait_ms", *req.PreemptWaitMS, 0, api.MaxWaitMS)
		if err != nil {
			return err
		}
		preemptWait, preemptWaitGiven = d, &d
	}
	switch {
	case req.Forceful && !req.Preempt:
		return badRequest("forceful", "only applies with \"preempt\": true")
	case req.Preempt && typ != lock.Foreground:
		return badRequest("preempt", "only a foreground acquire may preempt")
	}
	forceful, err := s.forceful(r, req)
	if err != nil {
		return err
	}
	// A preempting request must be able to wait for the yield it asks for
	// (preempt.go): checked here without the holder, at the ask with its
	// cleanup_ms.
	waitsFor := func(cleanup time.Duration) error {
		return preemptWaits(wait, req.WaitMS != nil, "zookeeper.foreground.task.timeout", preemptWaitGiven, cleanup)
	}
	if req.Preempt {
		if err := waitsFor(0); err != nil {
			return err
		}
	}
	caller := peerFrom(r.Context())
	opts := lock.AcquireOptions{Info: req.Info, Wait: wait, OnSignal: func(sig lock.Signal) {
		if l := held.Load(); l != nil {
			s.onSignal(l, sig)
		}
	}}
	if req.Preemptible { // recorded in the nodes for a preempting requester (preemptWaits)
		opts.Preemptible, opts.Cleanup = true, cleanup
	}
	if wait == 0 {
		// try once; the engine's default wait bounds waiting for a connection
		opts.TryOnce, opts.Wait = true, 0
	}
	if opts.LockDelay, err = lockDelayOf(req.LockDelayMS, cfg); err != nil { // delay.go
		return err
	}

	start := time.Now()
	result := resError
	defer func() { s.m.acquire.WithLabelValues(typ.String(), result).Observe(time.Since(start).Seconds()) }()
	if s.stopping() {
		result = resShuttingDown
		return shuttingDown(nil)
	}
	if n := s.waiters.Add(1); n > int64(cfg.MaxWaiters) {
		s.waiters.Add(-1)
		result = resTooManyWaiters
		return newError(api.TooManyWaiters, "%d acquires are already in progress on this sidecar (sidecar.max.waiters = %d); retry later", n-1, cfg.MaxWaiters)
	}
	defer s.waiters.Add(-1)
	if err := s.takeCap(caller, capWaiters); err != nil {
		result = resRefused
		return err
	}
	defer s.caps.put(caller.uid, capWaiters)
	if err := s.takeCap(caller, capLeases); err != nil {
		result = resRefused
		return err
	}
	leaseSlot := true // given to the lease once granted
	defer func() {
		if leaseSlot {
			s.caps.put(caller.uid, capLeases)
		}
	}()
	byType := &s.waitingFG
	if typ == lock.Background {
		byType = &s.waitingBG
	}
	byType.Add(1)
	defer byType.Add(-1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.stopCtx, cancel)
	defer stop()

	var callerPW *pidWatch // bound: watch the caller from now, not from the grant
	if req.Bind == api.BindProcess {
		callerPW = s.holdPID(pidFrom(r.Context()))
		defer s.unholdPID(callerPW)
	}
	var ask *preemptAsk
	if req.Preempt {
		a, err := s.askToYield(ctx, obj, req, forceful, preemptWait, who(r.Context()), waitsFor)
		if err != nil {
			return err
		}
		ask = a
	}
	asked := ask != nil
	if asked && !forceful && preemptWait < opts.Wait && !opts.TryOnce {
		opts.Wait = max(preemptWait, time.Millisecond)
	}
	g, err := s.eng.Acquire(ctx, obj, typ, opts)
	if err != nil {
		he := s.toHTTPError(r, err)
		if asked { // gave up: the holder may go on
			s.withdraw(r.Context(), ask, he.Body.Kind)
		}
		if asked && he.Body.Kind == api.InstanceLockException {
			he.Body.Reason = preemptReason(preemptWait)
		}
		switch he.Body.Kind {
		case api.InstanceLockException:
			result = resTimeout
			if opts.TryOnce {
				result = resNotGranted
			}
		case api.ZooKeeperUnavailable:
			result = resUnavailable
		case api.ShuttingDown:
			result = resShuttingDown
		}
		if r.Context().Err() != nil {
			result = resCanceled
		}
		return he
	}
	if r.Context().Err() != nil { // the caller went away: nobody would hold it
		result = resCanceled
		s.releaseGrant(g)
		return clientGone(r.Context().Err())
	}
	var pid int32 // not bound: the lease alone decides
	if req.Bind == api.BindProcess {
		pid = pidFrom(r.Context())
	}
	l, err := s.addLease(g, pid, callerPW, length, ownerOf(caller))
	if err == nil {
		leaseSlot = false
	}
	if errors.Is(err, errCallerExited) {
		result = resCanceled
		s.releaseGrant(g)
		return clientGone(err)
	}
	if err != nil {
		result = resShuttingDown
		s.releaseGrant(g)
		return err
	}
	if req.Preemptible {
		l.mu.Lock()
		l.preemptible, l.cleanup = true, cleanup
		l.mu.Unlock()
	}
	result = resGranted
	held.Store(l)
	v := s.view(l, true)
	if sig, ok := g.LastSignal(); ok {
		s.onSignal(l, sig) // revoked before the lease existed: told right after this answer
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) renewLease(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	var req api.RenewRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	var length time.Duration
	if req.LeaseMS != nil {
		d, err := msParam("lease_ms", *req.LeaseMS, 1, s.config().LeaseMax.Milliseconds())
		if err != nil {
			return err
		}
		length = d
	}
	l, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.checkOwner(r, l, actRenew); err != nil {
		return err
	}
	if length == 0 {
		length = l.length
	}
	v, err := s.renew(l, length)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) deleteLease(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	l, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.checkOwner(r, l, actRelease); err != nil {
		return err
	}
	res, err := s.release(r.Context(), l)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// queryParams rejects parameters other than the allowed ones (every
// endpoint calls it: a parameter it ignored would look accepted).
func queryParams(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("query", "%v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		v := q[k]
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, badRequest(k, "unknown query parameter: %s %s takes none (the request's fields go in the JSON body)", r.Method, r.URL.Path)
			}
			return nil, badRequest(k, "unknown query parameter; accepted: %s", strings.Join(allowed, ", "))
		}
		if len(v) > 1 {
			return nil, badRequest(k, "given %d times", len(v))
		}
	}
	return q, nil
}

func (s *Server) getLease(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, "wait", "timeout_ms")
	if err != nil {
		return err
	}
	wait := q.Get("wait")
	if wait != "" && wait != "lost" {
		return badRequest("wait", "%q is not \"lost\"", wait)
	}
	timeout := defaultLongPoll
	if q.Has("timeout_ms") {
		if wait == "" {
			return badRequest("timeout_ms", "only applies with wait=lost")
		}
		v, err := strconv.ParseInt(q.Get("timeout_ms"), 10, 64)
		if err != nil {
			return badRequest("timeout_ms", "%q is not a whole number of milliseconds", q.Get("timeout_ms"))
		}
		if timeout, err = msParam("timeout_ms", v, 0, api.MaxWaitMS); err != nil {
			return err
		}
	}
	l, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.checkOwner(r, l, actInspect); err != nil {
		return err
	}
	if wait == "lost" {
		p := peerFrom(r.Context())
		if err := s.takeCap(p, capPolls); err != nil {
			return err
		}
		defer s.caps.put(p.uid, capPolls)
		if err := s.waitChange(r.Context(), l, timeout); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, s.view(l, true))
	return nil
}

// waitChange is the long-poll of GET /v1/leases/{id}?wait=lost: it blocks
// until the lease is lost or released, or its state differs from the one
// it had when the poll began (held → suspect, suspect → held), or timeout
// passes. A poll that starts while held thus returns as soon as the lease
// is no longer held; one that starts while suspect waits for the outcome
// instead of answering at once.
func (s *Server) waitChange(ctx context.Context, l *lease, timeout time.Duration) error {
	s.polls.Add(1)
	defer s.polls.Add(-1)
	t := time.NewTimer(timeout)
	defer t.Stop()
	// Session events wake us at once; the tick is a backstop.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	initial := s.leaseState(l)
	var drainStarts <-chan struct{} // nil once draining: it would wake us forever
	if !s.stopping() {
		drainStarts = s.stopCtx.Done()
	}
	for {
		sc := s.sessionChanged()
		pc := l.changedCh()
		if st := s.leaseState(l); st != initial || st == api.StateLost || st == api.StateReleased {
			return nil
		}
		select {
		case <-l.done:
		case <-l.g.Done():
		case <-sc:
		case <-pc:
		case <-drainStarts:
			drainStarts = nil
		case <-s.over:
		case <-tick.C:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return clientGone(ctx.Err())
		}
	}
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request) error {
	obj := r.PathValue("object")
	if err := validObject(obj); err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	st, err := s.eng.Inspect(ctx, obj)
	if err != nil {
		return err
	}
	out := api.LockStatus{Object: obj, Holder: holderOf(st.Holder), Waiters: make([]api.Waiter, 0, len(st.Waiters))}
	if h := out.Holder; h != nil {
		if l := s.leaseByToken(obj, h.Token); l != nil {
			h.Holds = l.holdsOf()
			h.Preemptible = l.preemptibleOf()
		}
	}
	for _, n := range st.Waiters {
		out.Waiters = append(out.Waiters, api.Waiter{Node: n.Name, Type: n.Type, Info: n.Info, Sidecar: n.Sidecar, Since: api.NewTime(n.Since), Aged: n.Aged})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func holderOf(n *lock.Node) *api.Holder {
	if n == nil {
		return nil
	}
	h := &api.Holder{Node: n.Name, Type: n.Type, Info: n.Info, Sidecar: n.Sidecar, Token: n.Token, Since: api.NewTime(n.Since)}
	if n.Orphan {
		h.Orphan, h.Session = true, "0x"+strconv.FormatInt(n.Session, 16)
	}
	if n.Signal != nil {
		switch n.Signal.Kind {
		case SignalRevoke:
			h.Revocation = revokeReason(n.Signal.Reason)
		case SignalPreempt, SignalPreemptForceful:
			if n.Signal.ID == "" { // an earlier Baton's, never withdrawn
				h.Preemption = n.Signal.Kind + " by a request through sidecar " + n.Signal.From + ": " + n.Signal.Reason
			}
		}
	}
	for _, a := range n.Asks { // the latest preemption still standing (not withdrawn)
		if a.Kind == SignalPreempt || a.Kind == SignalPreemptForceful {
			h.Preemption = a.Kind + " by a request through sidecar " + a.From + ": " + a.Reason
		}
	}
	return h
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, "prefix", "after", "limit")
	if err != nil {
		return err
	}
	limit := 100
	if q.Has("limit") {
		v, err := strconv.Atoi(q.Get("limit"))
		if err != nil || v < 1 || v > 1000 {
			return badRequest("limit", "%q is not a whole number from 1 to 1000", q.Get("limit"))
		}
		limit = v
	}
	p := peerFrom(r.Context())
	if err := s.takeCap(p, capLists); err != nil {
		return err
	}
	defer s.caps.put(p.uid, capLists)
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	sums, next, err := s.eng.List(ctx, q.Get("prefix"), q.Get("after"), limit)
	if err != nil {
		return err
	}
	out := api.LockList{Locks: make([]api.LockSummary, 0, len(sums)), Next: next}
	for _, sm := range sums {
		out.Locks = append(out.Locks, api.LockSummary{Object: sm.Object, Holder: holderOf(sm.Holder), Waiters: sm.Waiters})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// health reports the server's state and whether it is ready, with the kind
// and reason when it is not.
func (s *Server) health() (h api.Health, kind string) {
	eh := s.eng.Health()
	cfg := s.config()
	h = api.Health{
		Status: "serving", Sidecar: cfg.NodeID, Incarnation: s.inc, Leases: s.activeLeases(),
		PID: os.Getpid(), Reload: s.lastReload.Load(),
		ZooKeeper: api.ZKInfo{
			Connected: eh.Connected, TimeoutMS: eh.Timeout.Milliseconds(),
			LocksHeld: eh.Held, Waiting: eh.Waiting, CleanupPending: eh.CleanupPending,
			Servers: zkServers(cfg), LastError: eh.LastError,
		},
	}
	if eh.SessionID != 0 {
		h.ZooKeeper.Session = "0x" + strconv.FormatInt(eh.SessionID, 16)
	}
	if !eh.Connected {
		h.ZooKeeper.DisconnectedForMS = s.disconnectedFor().Milliseconds()
	}
	limit := time.Duration(cfg.ZKConnectionRetry) * cfg.ZKConnectionDelay
	switch {
	case s.graceOver():
		h.Status = "shutting_down"
		kind, h.Reason = api.ShuttingDown, "shutting down: the drain's grace is over; the leases left are released after the validity told to their holders"
	case s.stopping():
		h.Status = "shutting_down"
		kind, h.Reason = api.ShuttingDown, "draining: no new grants; "+strconv.Itoa(h.Leases)+" leases held, valid at most until the grace ends in "+
			time.Until(s.drainEnd).Round(time.Millisecond).String()
	case !eh.Connected:
		kind = api.ZooKeeperUnavailable
		d := s.disconnectedFor().Round(time.Millisecond)
		if d >= limit {
			h.Reason = "zookeeper unreachable for " + d.String() + " (zookeeper.connection.retry × delay = " + limit.String() + ")"
		} else {
			h.Reason = "zookeeper not connected for " + d.String() + "; held locks are suspect"
		}
		h.Reason += " (servers " + strings.Join(h.ZooKeeper.Servers, ",") + ")"
		if eh.LastError != "" {
			h.Reason += "; last error: " + eh.LastError
		}
	case s.opts.OpsReady != nil:
		if err := s.opts.OpsReady(); err != nil {
			kind, h.Reason = api.QueueUnavailable, "queue: "+err.Error()
		}
	}
	h.Ready = kind == ""
	if s.opts.OpsQueue != nil {
		h.Queue = s.opts.OpsQueue()
	}
	return h, kind
}

// zkServers is zookeeper.servers as configured, the chroot after the last.
func zkServers(cfg *props.Config) []string {
	out := slices.Clone(cfg.ZKServers)
	if n := len(out); n > 0 && cfg.ZKChroot != "" {
		out[n-1] += cfg.ZKChroot
	}
	return out
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	h, _ := s.health()
	writeJSON(w, http.StatusOK, h)
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	h, kind := s.health()
	if kind == "" {
		writeJSON(w, http.StatusOK, h)
		return nil
	}
	h.Error, h.Message = kind, "not ready: "+h.Reason
	writeJSON(w, api.Status(kind), h)
	return nil
}

// startDrain is POST /v1/drain: start the drain SIGTERM starts (for
// `baton drain` and a Kubernetes preStop hook); 202 with its end.
func (s *Server) startDrain(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	var req struct{}
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	d := s.Drain()
	s.log.Warn("audit: drain requested through the API; the sidecar exits when it is over (baton serve: status 3, which the shipped unit restarts on)",
		"caller", who(r.Context()), "grace", s.drainGrace)
	writeJSON(w, http.StatusAccepted, d)
	return nil
}
