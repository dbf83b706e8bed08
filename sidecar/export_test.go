package sidecar

import "context"

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
	return func() { _, _ = s.leases.releaseLast(context.Background(), l) }
}
