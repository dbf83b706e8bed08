package lock

// NreviewObjState reports what the engine knows of an object (its escaped
// name): seen contended lately, its native sentinel known, and the
// fast-path prediction (-1: none). A native acquire with contended and
// sentinel true and no prediction queues without reading the holders
// first (run).
func (e *Engine) NreviewObjState(object string) (contended, sentinel bool, predict int64) {
	name, _ := EscapeObject(object)
	e.objMu.Lock()
	defer e.objMu.Unlock()
	st := e.objs[name]
	if st == nil {
		return false, false, -1
	}
	return st.contended, st.sentinel, st.predict
}
