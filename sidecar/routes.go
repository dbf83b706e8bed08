package sidecar

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

// inspectTimeout bounds reads of ZooKeeper for GET /v1/locks[/{object}].
const inspectTimeout = 5 * time.Second

// defaultLongPoll is the long-poll bound when timeout_ms is not given.
const defaultLongPoll = 30 * time.Second

// validObject checks the object path value (the check EscapeObject makes,
// without building the node name the engine builds again).
func validObject(obj string) error {
	if err := lock.ValidateObject(obj); err != nil {
		return badRequest("object", "%v", err)
	}
	return nil
}

// renewLease is POST /v1/leases/{id}/renew: the lease extended to lease_ms
// (else its own length) from now, never before a valid_until told.
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
	l, err := s.leases.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.auth.checkOwner(r, l, actRenew); err != nil {
		return err
	}
	if length == 0 {
		length = l.length
	}
	v, err := s.leases.renew(l, length)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, (*leaseJSON)(&v))
	return nil
}

// deleteLease is DELETE /v1/leases/{id}: the holder's release of one hold.
// ?wait=false answers 202 before the release's write lands (leaseTable.release).
func (s *Server) deleteLease(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, "wait")
	if err != nil {
		return err
	}
	wait := true
	switch v := q.Get("wait"); {
	case !q.Has("wait"), v == "true":
	case v == "false":
		wait = false
	default:
		return badRequest("wait", "%q is not true or false (false: answer before the release's ZooKeeper write lands)", v)
	}
	l, err := s.leases.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.auth.checkOwner(r, l, actRelease); err != nil {
		return err
	}
	res, err := s.leases.release(r.Context(), l, wait)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res.Releasing {
		status = http.StatusAccepted
	}
	writeJSON(w, status, (*releaseJSON)(&res))
	return nil
}

// queryParams rejects parameters other than the allowed ones (every
// endpoint calls it: a parameter it ignored would look accepted).
func queryParams(r *http.Request, allowed ...string) (url.Values, error) {
	if r.URL.RawQuery == "" { // the usual request: nothing to parse or sort
		return url.Values{}, nil
	}
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

// getLease is GET /v1/leases/{id}: the lease (telling its valid_until);
// with wait=lost, a long-poll (leaseTable.waitChange) of at most
// timeout_ms, counted against sidecar.max.polls.per.uid.
func (s *Server) getLease(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r, "wait", "timeout_ms", "state")
	if err != nil {
		return err
	}
	wait := q.Get("wait")
	if wait != "" && wait != "lost" {
		return badRequest("wait", "%q is not \"lost\"", wait)
	}
	known := q.Get("state") // the state the caller last saw: a poll that finds another answers at once
	switch {
	case q.Has("state") && wait == "":
		return badRequest("state", "only applies with wait=lost")
	case q.Has("state") && !slices.Contains(pollStates, known):
		return badRequest("state", "%q is not one of %s", known, strings.Join(pollStates, ", "))
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
	l, err := s.leases.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.auth.checkOwner(r, l, actInspect); err != nil {
		return err
	}
	if wait == "lost" {
		p := peerFrom(r.Context())
		if err := s.caps.takeFor(p, capPolls); err != nil {
			return err
		}
		defer s.caps.put(p.uid, capPolls)
		s.polls.Add(1)
		defer s.polls.Add(-1)
		if err := s.leases.waitChange(r.Context(), l, timeout, known, s.sess.changed); err != nil {
			return err
		}
	}
	v := s.leases.view(l, true)
	writeJSON(w, http.StatusOK, (*leaseJSON)(&v))
	return nil
}

// pollStates are the states a lease long-poll's state= may name: those of a
// lease not ended.
var pollStates = []string{api.StateHeld, api.StateSuspect, api.StateDraining, api.StatePreempted}

// inspect is GET /v1/locks/{object}: the holder and the waiters as
// ZooKeeper has them; a holder this sidecar leased shows its holds and
// whether it is preemptible.
func (v *views) inspect(w http.ResponseWriter, r *http.Request) error {
	if r.URL.RawQuery != "" { // with a query: the long-poll for a change (watch.go)
		return v.watch(w, r)
	}
	obj := r.PathValue("object")
	if err := validObject(obj); err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	st, err := v.eng.Inspect(ctx, obj)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v.leases.status(obj, st))
	return nil
}

// status renders an object's holders and waiters for the API; a holder
// this sidecar leased shows its holds and whether it is preemptible.
// Holder is the first of Holders (what a client older than shared locks
// reads).
func (t *leaseTable) status(obj string, st *lock.Status) api.LockStatus {
	holders := st.Holders
	if len(holders) == 0 && st.Holder != nil {
		holders = []lock.Node{*st.Holder}
	}
	out := api.LockStatus{Object: obj, Holders: make([]api.Holder, 0, len(holders)), Waiters: make([]api.Waiter, 0, len(st.Waiters)), Parked: st.Parked}
	for i := range holders {
		h := holderOf(&holders[i])
		if l := t.byToken(obj, h.Token); l != nil {
			h.Holds = l.holdsOf()
			h.Preemptible = l.preemptibleOf()
		}
		out.Holders = append(out.Holders, *h)
	}
	if len(out.Holders) > 0 {
		h := out.Holders[0]
		out.Holder = &h
	}
	for _, n := range st.Waiters {
		out.Waiters = append(out.Waiters, waiterOf(n))
	}
	return out
}

// waiterOf renders a waiting request's node for the API.
func waiterOf(n lock.Node) api.Waiter {
	return api.Waiter{Node: n.Name, Type: n.Type, Info: n.Info, Sidecar: n.Sidecar, Since: api.NewTime(n.Since), Aged: n.Aged, Mode: modeOf(n.Shared)}
}

// holderOf renders a holder's node for the API (nil: none), with its
// standing revocation or preemption.
func holderOf(n *lock.Node) *api.Holder {
	if n == nil {
		return nil
	}
	h := &api.Holder{Node: n.Name, Type: n.Type, Info: n.Info, Sidecar: n.Sidecar, Token: n.Token, Since: api.NewTime(n.Since), Mode: modeOf(n.Shared)}
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

// list is GET /v1/locks?prefix=&after=&limit=: a page of held or awaited
// objects, counted against sidecar.max.lists.per.uid while it reads.
func (v *views) list(w http.ResponseWriter, r *http.Request) error {
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
	if err := v.caps.takeFor(p, capLists); err != nil {
		return err
	}
	defer v.caps.put(p.uid, capLists)
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	sums, next, err := v.eng.List(ctx, q.Get("prefix"), q.Get("after"), limit)
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
	m := s.ops.get()
	eh := s.eng.Health()
	cfg := s.config()
	h = api.Health{
		Status: "serving", Sidecar: cfg.NodeID, Incarnation: s.inc, Leases: s.leases.active(),
		PID: os.Getpid(), Reload: s.lastReload.Load(), LockProtocol: s.proto.String(),
		ZooKeeper: api.ZKInfo{
			Connected: eh.Connected, TimeoutMS: eh.Timeout.Milliseconds(),
			LocksHeld: eh.Held, Waiting: eh.Waiting, Parked: eh.Parked, CleanupPending: eh.CleanupPending,
			Servers: zkServers(cfg), LastError: eh.LastError,
		},
	}
	if eh.SessionID != 0 {
		h.ZooKeeper.Session = "0x" + strconv.FormatInt(eh.SessionID, 16)
	}
	if !eh.Connected {
		h.ZooKeeper.DisconnectedForMS = s.sess.disconnectedFor().Milliseconds()
	}
	limit := time.Duration(cfg.ZKConnectionRetry) * cfg.ZKConnectionDelay
	switch {
	case s.drain.graceOver():
		h.Status = "shutting_down"
		kind, h.Reason = api.ShuttingDown, "shutting down: the drain's grace is over; the leases left are released after the validity told to their holders"
	case s.drain.stopping():
		h.Status = "shutting_down"
		kind, h.Reason = api.ShuttingDown, "draining: no new grants; "+strconv.Itoa(h.Leases)+" leases held, valid at most until the grace ends in "+
			time.Until(s.drain.end).Round(time.Millisecond).String()
	case !eh.Connected:
		kind = api.ZooKeeperUnavailable
		d := s.sess.disconnectedFor().Round(time.Millisecond)
		if d >= limit {
			h.Reason = "zookeeper unreachable for " + d.String() + " (zookeeper.connection.retry × delay = " + limit.String() + ")"
		} else {
			h.Reason = "zookeeper not connected for " + d.String() + "; held locks are suspect"
		}
		h.Reason += " (servers " + strings.Join(h.ZooKeeper.Servers, ",") + ")"
		if eh.LastError != "" {
			h.Reason += "; last error: " + eh.LastError
		}
	case m != nil:
		if err := m.Ready(); err != nil {
			kind, h.Reason = api.QueueUnavailable, "queue: "+err.Error()
		}
	}
	h.Ready = kind == ""
	if m != nil {
		h.Queue = m.QueueInfo()
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

// probe is GET /healthz (ready false: always 200) or GET /readyz (ready:
// 503 with the reason when not ready).
func (s *Server) probe(ready bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := queryParams(r); err != nil {
			return err
		}
		h, kind := s.health()
		if !ready || kind == "" {
			writeJSON(w, http.StatusOK, h)
			return nil
		}
		h.Error, h.Message = kind, "not ready: "+h.Reason
		writeJSON(w, api.Status(kind), h)
		return nil
	}
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
		"caller", who(r.Context()), "grace", s.drain.grace)
	writeJSON(w, http.StatusAccepted, d)
	return nil
}
