package sidecar

// Freeing is the lease table's record of no-wait releases in flight: the
// objects recorded and the counter the acquire path reads without the
// table's mutex (they must agree).
func Freeing(s *Server) (objects int, counter int32) {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	return len(s.leases.freeing), s.leases.nfreeing.Load()
}

// CloseLeaseTable marks the lease table closed (as teardown's first step
// does) without ending its leases: a release that then reaches releaseLast
// finds spawn refusing.
func CloseLeaseTable(s *Server) {
	s.leases.mu.Lock()
	s.leases.closed = true
	s.leases.mu.Unlock()
}
