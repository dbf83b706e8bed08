package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// Operator revocation (a session blacklist, as in Alibaba's lock service):
// POST /v1/locks/{object}/revoke on any sidecar writes a "revoke" signal
// into the holder's privateLock (lock.Engine.Signal); the holder's sidecar
// learns it through the watch it keeps on privateLock anyway (or at once,
// when it is the sidecar asked), ends the lease as lost with reason
// "revoked: <reason>" — renewals answer 410, long-polls return, the Go
// client and `baton lock` stop the holder — and frees the lock only after
// the last valid_until it told the holder. Nothing is deleted under a
// holder that may still believe it holds.

// SignalRevoke is the lock.Signal kind of a revocation.
const SignalRevoke = "revoke"

// maxRevokeReason bounds the reason of a revocation (it goes into the
// holder's node and every answer about the lease).
const maxRevokeReason = 1024

func newRevokeMetric() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_revocations_total",
		Help: "Operator revocations: requested (through this sidecar's API), applied (to a lease this sidecar holds), refused (plugin holder, no holder).",
	}, []string{"result"})
	for _, r := range []string{"requested", "applied", "refused"} {
		c.WithLabelValues(r)
	}
	return c
}

func revokeReason(text string) string {
	if text == "" {
		return api.ReasonRevoked
	}
	return api.ReasonRevoked + ": " + text
}

// revoke is POST /v1/locks/{object}/revoke.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) error {
	obj := r.PathValue("object")
	if err := validObject(obj); err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	var req api.RevokeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if len(req.Reason) > maxRevokeReason {
		return badRequest("reason", "%d bytes, at most %d", len(req.Reason), maxRevokeReason)
	}
	if req.Token < 0 {
		return badRequest("token", "%d is not a fencing token", req.Token)
	}
	caller := who(r.Context())
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	// An orphan privateLock (issue 23: no grant behind it, its holder's
	// node gone) has nobody to tell and no validity to wait out: it is
	// deleted now, guarded by the versions read.
	switch n, err := s.eng.FreeOrphan(ctx, obj, req.Token); {
	case err == nil:
		s.leases.revokes.WithLabelValues("requested").Inc()
		s.log.Warn("audit: orphan privateLock freed by revocation", "object", obj, "token", n.Token,
			"session", fmt.Sprintf("0x%x", n.Session), "holder_sidecar", n.Sidecar, "reason", req.Reason, "caller", caller)
		now := api.NewTime(time.Now())
		writeJSON(w, http.StatusAccepted, api.RevokeResponse{Object: obj, Token: n.Token, Reason: revokeReason(req.Reason),
			Holder: holderOf(n), FreedAfter: &now, Orphan: true})
		return nil
	case errors.Is(err, lock.ErrNotOrphan), errors.Is(err, lock.ErrNoNode):
		// a grant (or nothing): revoke it as below
	default:
		return err
	}
	sig := lock.Signal{Kind: SignalRevoke, Reason: req.Reason, Who: caller, From: s.config().NodeID}
	n, err := s.eng.Signal(ctx, obj, req.Token, sig)
	switch {
	case errors.Is(err, lock.ErrNotSignallable):
		s.leases.revokes.WithLabelValues("refused").Inc()
		s.log.Warn("audit: revocation refused: the holder is not a Baton grant", "object", obj, "token", n.Token,
			"holder", n.Name, "reason", req.Reason, "caller", caller)
		he := newError(api.Conflict, "the holder of %q (node %s, token %d) is not a Baton grant (the plugin's): it cannot be revoked safely — Baton "+
			"cannot tell it, refuse its renewals or know the validity it relies on; stop that process, or let its ZooKeeper "+
			"session expire", obj, n.Name, n.Token)
		he.Body.Object, he.Body.Holder = obj, holderOf(n)
		return he
	case errors.Is(err, lock.ErrNoNode):
		s.leases.revokes.WithLabelValues("refused").Inc()
		if req.Token != 0 {
			return newError(api.NoNode, "%q is not held with token %d (free, or held by a later grant): nothing revoked", obj, req.Token)
		}
		return newError(api.NoNode, "%q is not held: nothing to revoke", obj)
	case err != nil:
		return err
	}
	s.leases.revokes.WithLabelValues("requested").Inc()
	reason := revokeReason(req.Reason)
	s.log.Warn("audit: revocation requested", "object", obj, "token", n.Token, "holder", n.Name, "holder_sidecar", n.Sidecar,
		"holder_info", n.Info, "reason", reason, "caller", caller)
	out := api.RevokeResponse{Object: obj, Token: n.Token, Reason: reason, Holder: holderOf(n)}
	if told, ok := s.leases.revokeToken(obj, n.Token, sig); ok {
		out.Local = true
		if !told.IsZero() {
			t := api.NewTime(told)
			out.FreedAfter = &t
		}
	}
	writeJSON(w, http.StatusAccepted, out)
	return nil
}

// revokeToken revokes this sidecar's lease holding object with token
// (revoke), or finds the one this same revocation already ended: the
// signal can reach the holder's watch (preempt.go) and end the lease
// before the request's own lookup, which then finds it among the revoked
// leases whose grant is not freed yet. ok false: no lease of this
// sidecar holds it.
func (t *leaseTable) revokeToken(object string, token int64, sig lock.Signal) (told time.Time, ok bool) {
	t.mu.Lock()
	var live *lease
	for _, l := range t.leases {
		if holdsToken(l.g, object, token) {
			live = l
			break
		}
	}
	if live == nil {
		for l, at := range t.revoked {
			if holdsToken(l.g, object, token) {
				t.mu.Unlock()
				return at, true
			}
		}
		t.mu.Unlock()
		return time.Time{}, false
	}
	t.mu.Unlock()
	told, _ = t.revoke(live, sig)
	return told, true
}

// revokeLease ends l as lost ("revoked: …"): the holder is told at once
// (long-polls return, renewals answer 410) and the grant is released after
// the last valid_until told to it, which no renewal moves any more. It
// returns that instant, and false if l had already ended (with the instant
// if a revocation ended it and its grant is not freed yet).
func (t *leaseTable) revoke(l *lease, sig lock.Signal) (time.Time, bool) {
	// An op delivery's lease (re-entered by the app, or not) is taken too:
	// its holders are told at once; the dispatcher cancels the delivery on
	// the signal and frees the grant after the validity told.
	reason := revokeReason(sig.Reason)
	msg := fmt.Sprintf("revoked by an operator (%s, through sidecar %s)", sig.Who, sig.From)
	told, ok := t.take(l, reason, msg)
	if !ok {
		// Already ended: by this same revocation seen the other way (the
		// signal through the holder's watch, preempt.go, can beat the
		// revoke request's own answer), its grant freed after told.
		t.mu.Lock()
		told = t.revoked[l]
		t.mu.Unlock()
		return told, false
	}
	t.revokes.WithLabelValues("applied").Inc()
	t.log.Warn("audit: lease revoked; its holder is told, the lock is freed after the validity told to it",
		"object", l.g.Object(), "token", l.g.Token(), "lease", logID(l.id), "holder_pid", l.pid, "holder_info", l.g.Info(),
		"reason", reason, "caller", sig.Who, "requested_through", sig.From, "freed_in", max(0, time.Until(told)).Round(time.Millisecond))
	return told, true
}

// takeLease ends l as lost with reason (the holder is told at once:
// long-polls return, renewals answer 410) and releases its grant after the
// last valid_until told to the holder, which nothing moves any more. It
// returns that instant, and false if l had already ended.
func (t *leaseTable) take(l *lease, reason, msg string) (time.Time, bool) {
	ended, told := t.end(l, api.StateLost, reason, msg, nil, true)
	if !ended {
		return time.Time{}, false
	}
	if !l.external { // an op delivery's grant: the dispatcher frees it after its done (HoldDelivery) waited
		t.freeAfter(l, told)
	}
	return told, true
}

// freeAfter releases l's grant, which end recorded in revoked, after
// told, in the background.
func (t *leaseTable) freeAfter(l *lease, told time.Time) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if t.waitTold(l, told) {
			t.releaseGrant(l.g)
		}
		t.unrevoke(l)
	}()
}

// waitTold waits until told has passed (true), or l's grant is lost (no
// node to free) or the engine closes (it ends the session and its nodes).
func (t *leaseTable) waitTold(l *lease, told time.Time) bool {
	tm := time.NewTimer(time.Until(told))
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-nothingToFree(l.g): // lost meanwhile (session): nothing to free
	case <-t.drain.closing: // the engine's Close ends the session and its nodes
	}
	return false
}

// waitRevoked waits, at shutdown, until the revoked leases' grants are
// freed (after the validity told), unless the shutdown is hurried.
func (t *leaseTable) waitRevoked() {
	for {
		t.mu.Lock()
		var last time.Time
		for _, told := range t.revoked {
			if told.After(last) {
				last = told
			}
		}
		t.mu.Unlock()
		if last.IsZero() {
			return
		}
		tm := time.NewTimer(time.Until(last) + 10*time.Millisecond)
		select {
		case <-tm.C:
		case <-t.drain.hurry:
			tm.Stop()
			return
		}
	}
}

// unrevoke drops l from revoked once its grant is freed (or needs no
// freeing).
func (t *leaseTable) unrevoke(l *lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.revoked, l)
}
