package sidecar

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/batonhq/baton/api"
)

// check answers GET /v1/locks/{object}/check?token=N, Chubby's
// CheckSequencer: whether N is the object's current grant, read through
// ZooKeeper after a sync (lock.Engine.Check), from any sidecar. valid_for_ms
// is given only by the holder's own sidecar, the one that knows the validity
// it told.
func (v *views) check(w http.ResponseWriter, r *http.Request) error {
	obj := r.PathValue("object")
	if err := validObject(obj); err != nil {
		return err
	}
	q, err := queryParams(r, "token")
	if err != nil {
		return err
	}
	if !q.Has("token") {
		return badRequest("token", "missing: give the fencing token to check as ?token=N (the \"token\" of the lease, a decimal int64)")
	}
	raw := q.Get("token")
	token, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || token <= 0 || raw[0] == '+' {
		return badRequest("token", "%q is not a positive decimal int64; give the \"token\" of the lease (a fencing token), e.g. ?token=4294967302", raw)
	}
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	current, holder, err := v.eng.Check(ctx, obj, token)
	if err != nil {
		return err
	}
	out := api.CheckResult{Current: current, Token: holder}
	if holder != 0 {
		if l := v.leases.byToken(obj, holder); l != nil {
			out.ValidForMS = l.toldFor()
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// toldFor returns the time left of the validity told to the lease's holder,
// nil if the lease has ended or was never told one.
func (l *lease) toldFor() *int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.told.IsZero() {
		return nil
	}
	ms := msUntil(l.told, time.Now())
	return &ms
}
