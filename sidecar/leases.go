package sidecar

import (
	"net/http"
	"time"

	"github.com/batonhq/baton/api"
)

// actReenter is an acquire naming the lease_id of a lease to re-enter.
var actReenter = action{"re-enter", false}

// listLeases is GET /v1/leases: the caller's leases (an admin's: every
// lease of this sidecar, each with its owner's uid), oldest grant first.
// Op deliveries' leases are not listed. Showing a lease tells its
// valid_until, as any read of it does.
func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r); err != nil {
		return err
	}
	p := peerFrom(r.Context())
	all := s.auth.policy().isAdmin(p)
	mine := s.leases.owned(p.uid, p.known, all)
	out := api.LeaseList{Leases: make([]api.Lease, 0, len(mine)), All: all}
	for _, l := range mine {
		v := s.leases.view(l, true)
		uid := l.owner.uid
		v.UID = &uid
		if l.pid > 0 {
			pid := l.pid
			v.PID = &pid
		}
		out.Leases = append(out.Leases, v)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readHeaderTimeout bounds reading a request's header; Options.ReadTimeout
// (default defaultReadTimeout) the whole request, body included. net/http
// lifts that deadline once the body is read (its background read for the
// client's close clears it), so waits and long-polls last as long as they
// ask (TestReadTimeout).
const (
	readHeaderTimeout  = 10 * time.Second
	defaultReadTimeout = 30 * time.Second
)

func (o Options) readTimeout() time.Duration {
	if o.ReadTimeout > 0 {
		return o.ReadTimeout
	}
	return defaultReadTimeout
}
