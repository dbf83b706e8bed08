package lock

// PreviewParked reports how many requests are parked on obj, and whether
// its parking host is a request a release multi is granting (parkTake
// took it: the multi is under way or its answer not yet handled).
func (e *Engine) PreviewParked(obj string) (parked int, hostIsReq bool) {
	name, err := EscapeObject(obj)
	if err != nil {
		return 0, false
	}
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		return 0, false
	}
	_, hostIsReq = st.parkHost.(*nreq)
	return len(st.parked), hostIsReq
}
