package sidecar

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
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
	all := s.policy().isAdmin(p)
	s.mu.Lock()
	mine := make([]*lease, 0, len(s.leases))
	for _, l := range s.leases {
		if l.external || !l.owner.set {
			continue
		}
		if all || (p.known && l.owner.uid == p.uid) {
			mine = append(mine, l)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(mine, func(a, b *lease) int {
		if c := a.g.AcquiredAt().Compare(b.g.AcquiredAt()); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := api.LeaseList{Leases: make([]api.Lease, 0, len(mine)), All: all}
	for _, l := range mine {
		v := s.view(l, true)
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

// auditReplay is POST /v1/ops/{id}/replay through the ops handler, with an
// audit line naming the caller and the answer.
func (s *Server) auditReplay(w http.ResponseWriter, r *http.Request) error {
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	err := s.serveOps(sw, r)
	status := sw.status
	if he, ok := err.(*httpError); ok {
		status = he.Status
	}
	s.log.Warn("audit: op replay requested", "op_id", r.PathValue("id"), "status", status, "caller", who(r.Context()))
	return err
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// readTimeout bounds reading a request's body (after its header, which
// readHeaderTimeout bounds); it is lifted once the body is read, so that
// waits and long-polls run as long as they ask.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
)

// readBody reads the request's body (at most api.MaxBody + 1 bytes: the
// handlers answer 413 beyond api.MaxBody) under the server's ReadTimeout,
// then lifts that deadline: net/http would otherwise cancel the request
// when it passes during a long wait.
func readBody(w http.ResponseWriter, r *http.Request) error {
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, api.MaxBody+1))
		if err != nil {
			return badRequest("body", "reading the body: %v (a body must arrive within %v)", err, readTimeout)
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{}) // ErrNotSupported in process: nothing to lift
	return nil
}
