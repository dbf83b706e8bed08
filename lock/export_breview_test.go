package lock

// CreateSlots reports how many of the current session's create slots are
// taken (session.create): a create sent and not yet answered, or one about
// to be sent. 0 once every waiter's create has been answered.
func (e *Engine) CreateSlots() int {
	s, err := e.current()
	if err != nil || s == nil {
		return 0
	}
	return len(s.creates)
}
