package lock

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
