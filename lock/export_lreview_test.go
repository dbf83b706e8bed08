package lock

// LearnListings counts the listings native holders sent to learn arrivals
// behind them (learnNative).
func (e *Engine) LearnListings() int64 { return e.learnLists.Load() }

// SetLearnListHook runs f in learnNative with its listing in flight
// (learnList set), just before the listing is sent, until the returned
// function is called.
func SetLearnListHook(f func()) func() {
	learnListHook.Store(&f)
	return func() { learnListHook.Store(nil) }
}

// Releasing reports whether the grant's release (or abandon) has begun.
func (g *Grant) Releasing() bool { return g.isReleasing() }

// KnownNext returns the waiters a native grant knows it may hand over to.
func (g *Grant) KnownNext() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.native == nil {
		return nil
	}
	return append([]string(nil), g.native.next...)
}

// Learning reports whether a native grant follows arrivals (learnNative).
func (g *Grant) Learning() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.native != nil && g.native.learning
}
