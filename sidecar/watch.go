package sidecar

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// watchParams are the query parameters of the watch long-poll.
var watchParams = []string{"wait", "after", "version", "timeout_ms"}

// views answers what the API reads of ZooKeeper's state, through the
// engine: GET /v1/locks (list), GET /v1/locks/{object} (inspect, and with a
// query the watch long-poll), its /check, and GET /v1/semaphores/{name}.
// Nothing it does changes a lock; a holder this sidecar leased is shown
// with what only the lease table knows (holds, preemptible).
type views struct {
	eng    *lock.Engine
	leases *leaseTable
	caps   *uidCaps
	drain  *drainState
}

// watchQuery is a parsed watch request.
type watchQuery struct {
	seen    lock.Seen
	timeout time.Duration
}

// parseWatch parses the query of GET /v1/locks/{object}?wait=change
// [&after=TOKEN][&version=V][&timeout_ms=N]; a bad one is a 400 naming the
// parameter.
func parseWatch(rawQuery string) (watchQuery, error) {
	q, err := queryParams(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/v1/locks/{object}", RawQuery: rawQuery}}, watchParams...)
	if err != nil {
		return watchQuery{}, err
	}
	out := watchQuery{timeout: defaultLongPoll}
	if !q.Has("wait") {
		for _, k := range watchParams[1:] {
			if q.Has(k) {
				return watchQuery{}, badRequest(k, "only applies with wait=change (the long-poll for a change of holder or queue)")
			}
		}
	}
	if v := q.Get("wait"); v != "change" {
		return watchQuery{}, badRequest("wait", "%q is not \"change\"; omit the query for the current state at once", v)
	}
	if q.Has("after") {
		raw := q.Get("after")
		tok, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || tok < 0 || raw == "" || raw[0] == '+' {
			return watchQuery{}, badRequest("after", "%q is not a fencing token: give the holder's \"token\" as last seen (a decimal int64), or 0 for free", raw)
		}
		out.seen.Token = &tok
	}
	if q.Has("version") {
		v := q.Get("version")
		if v == "" || len(v) > api.MaxVersionLen || strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'z') && r != '.' }) >= 0 {
			return watchQuery{}, badRequest("version", "%.80q is not a version: pass back the \"version\" of an earlier answer as it was", v)
		}
		out.seen.Version = v
	}
	if q.Has("timeout_ms") {
		raw := q.Get("timeout_ms")
		v, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return watchQuery{}, badRequest("timeout_ms", "%q is not a whole number of milliseconds", raw)
		}
		if out.timeout, err = msParam("timeout_ms", v, 0, api.MaxWaitMS); err != nil {
			return watchQuery{}, err
		}
	}
	return out, nil
}

// watch is the long-poll GET /v1/locks/{object}?wait=change: the object's
// state once it differs from what the caller saw (after=TOKEN, the
// holder's token; version=V, an earlier answer's version), or when
// timeout_ms passes the current state with "changed": false (see
// lock.Engine.WaitChange: every long-poll on one object shares one
// ZooKeeper watch). A long-poll counts against sidecar.max.polls.per.uid;
// at the end of a drain's grace it is answered 503 ShuttingDown.
func (v *views) watch(w http.ResponseWriter, r *http.Request) error {
	obj := r.PathValue("object")
	if err := validObject(obj); err != nil {
		return err
	}
	wq, err := parseWatch(r.URL.RawQuery)
	if err != nil {
		return err
	}
	if v.drain.graceOver() {
		return shuttingDown(nil)
	}
	p := peerFrom(r.Context())
	if err := v.caps.takeFor(p, capPolls); err != nil {
		return err
	}
	defer v.caps.put(p.uid, capPolls)
	// Reading the state is bounded like GET /v1/locks/{object}, the wait
	// for a change by timeout_ms.
	ctx, cancel := context.WithTimeout(r.Context(), wq.timeout+inspectTimeout)
	defer cancel()
	go func() {
		select {
		case <-v.drain.over:
			cancel()
		case <-ctx.Done():
		}
	}()
	snap, changed, err := v.eng.WaitChange(ctx, obj, wq.seen, wq.timeout)
	switch {
	case err == nil:
	case v.drain.graceOver():
		return shuttingDown(err)
	case r.Context().Err() != nil:
		return clientGone(r.Context().Err())
	default:
		return err
	}
	st := v.leases.status(obj, &snap.Status)
	writeJSON(w, http.StatusOK, api.LockWatch{Object: obj, Holder: st.Holder, Holders: st.Holders, Waiters: st.Waiters, Version: snap.Version, Changed: changed})
	return nil
}
