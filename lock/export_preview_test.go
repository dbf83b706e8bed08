package lock

import (
	"fmt"
	"sync"
)

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

// PreviewHoldLearnStart keeps every learnNative that starts from running
// (as if its goroutine were not scheduled yet) until the returned func is
// called.
func PreviewHoldLearnStart() (release func()) {
	gate := make(chan struct{})
	f := func() { <-gate }
	learnStartHook.Store(&f)
	var once bool
	return func() {
		if !once {
			once = true
			learnStartHook.Store(nil)
			close(gate)
		}
	}
}

// PreviewLoseOnRegister makes the session of the next grant registered
// lost just after its registration (before grant looks at its state);
// the returned func removes the hook.
func PreviewLoseOnRegister() (remove func()) {
	var once sync.Once
	f := func(s *session) {
		once.Do(func() { s.fail(fmt.Errorf("%w: the test's", ErrSessionLost)) })
	}
	grantRegisteredHook.Store(&f)
	return func() { grantRegisteredHook.Store(nil) }
}
