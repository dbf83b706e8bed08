package sidecar

import (
	"context"

	"github.com/batonhq/baton/api"
)

// SplitReleaseNoWait is SplitRelease for DELETE ?wait=false: releaseHold
// now (it must fall through: one hold left), and the rest (releaseLast
// without waiting for the write) when the returned func is called; it
// returns the answer the DELETE would give.
func SplitReleaseNoWait(s *Server, id string) func() (api.ReleaseResponse, error) {
	l, err := s.leases.lookup(id)
	if err != nil {
		panic(err)
	}
	if _, done, _ := s.leases.releaseHold(l); done {
		panic("releaseHold answered")
	}
	return func() (api.ReleaseResponse, error) { return s.leases.releaseLast(context.Background(), l, false) }
}
