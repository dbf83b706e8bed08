package lock

// ReviewMonFlags reports, for e's current session, whether its monitor
// waits with no deadline (monitorIdle), whether its keeper waits in its
// idle case (keeperIdle), and how many grants it holds: the preconditions
// the review of 38b12b5 (register's wake only when one of them waits for
// it) sets up before a grant.
func ReviewMonFlags(e *Engine) (monitorIdle, keeperIdle bool, grants int, ok bool) {
	s, err := e.current()
	if err != nil || s == nil {
		return false, false, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.monitorIdle, s.keeperIdle, len(s.grants), true
}
