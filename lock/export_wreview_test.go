package lock

// WreviewReleasing reports whether the grant's release is under way (set
// by Release or Abandon, cleared when it fails and leaves the grant held).
func (g *Grant) WreviewReleasing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.releasing && g.state == Held
}

// WreviewAwaitingRelease reports whether a holder watch waits for the
// outcome of the release under way (awaitRelease made relFailed).
func (g *Grant) WreviewAwaitingRelease() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.relFailed != nil
}
