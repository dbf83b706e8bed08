package sidecar

import (
	"context"
	"time"
)

// SplitRelease runs DELETE /v1/leases/{id} (Server.release) in its two
// steps: releaseHold now (it must fall through: one hold left), and the
// rest when the returned func is called, so a test can put a re-entry
// between them.
func SplitRelease(s *Server, id string) func() {
	l, err := s.leases.lookup(id)
	if err != nil {
		panic(err)
	}
	if _, done, _ := s.leases.releaseHold(l); done {
		panic("releaseHold answered")
	}
	return func() { _, _ = s.leases.releaseLast(context.Background(), l, true) }
}

// SetDetach sets, before Run, from how many acquires in flight and after
// how long a waiting acquire leaves net/http (detach.go); waiters 0: never.
func SetDetach(s *Server, waiters int64, after time.Duration) {
	s.detach.waiters, s.detach.after = waiters, after
}

// Detached is how many acquires have left net/http so far.
func Detached(s *Server) int64 { return s.detach.n.Load() }

// DetachWaiters is the default detach threshold (acquires in flight).
const DetachWaiters = detachWaiters

// LeanCounts is how many requests the lean path answered and how many
// connections it handed to net/http so far (lean.go).
func LeanCounts(s *Server) (served, handed int64) { return s.leanServed.Load(), s.leanHanded.Load() }
