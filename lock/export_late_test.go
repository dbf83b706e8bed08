package lock

import (
	"sync"
	"sync/atomic"
	"time"
)

// ReviewLateState reports a native grant's late and arrived flags
// (de3c84d): learning began at the holder watch's arming, and whether its
// children watch fired since its last listing was sent.
func (g *Grant) ReviewLateState() (late, arrived bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.native == nil {
		return false, false
	}
	return g.native.late, g.native.arrived
}

// ReviewLateStaleView snapshots the object's data as the native grant saw
// it last; the returned func puts that snapshot back, as if the holder
// watch had not yet read the writes made since (its read is a separate
// goroutine from learnNative's listing), and sets the names the grant
// would hand over to, as a listing that ran meanwhile would.
func (g *Grant) ReviewLateStaleView() (restore func(next []string)) {
	g.mu.Lock()
	d, v, z := g.native.d, g.native.version, g.native.mzxid
	g.mu.Unlock()
	return func(next []string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.native.d, g.native.version, g.native.mzxid = d, v, z
		g.native.next = append([]string(nil), next...)
	}
}

// ReviewStallAfterRegister makes the next grant registered on e stall
// for d right after its registration's holder-watch timer is set, in the
// acquiring goroutine's next use of the engine's object state (as a
// goroutine descheduled under load would), and counts the learnNative
// goroutines started from then on (starts). remove ends both.
func ReviewStallAfterRegister(e *Engine, d time.Duration) (starts *atomic.Int64, remove func()) {
	starts = new(atomic.Int64)
	var once sync.Once
	f := func(*session) {
		once.Do(func() {
			e.objMu.Lock()
			time.AfterFunc(d, e.objMu.Unlock)
		})
	}
	grantRegisteredHook.Store(&f)
	count := func() { starts.Add(1) }
	learnStartHook.Store(&count)
	return starts, func() { grantRegisteredHook.Store(nil); learnStartHook.Store(nil) }
}
