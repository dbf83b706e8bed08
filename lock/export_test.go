package lock

import (
	"context"
	"time"
)

// SetSeqLimits lowers the sequence-wrap thresholds for a test and returns
// a function restoring them.
func SetSeqLimits(drain, refuse int64) func() {
	d, r := seqDrain, seqRefuse
	seqDrain, seqRefuse = drain, refuse
	return func() { seqDrain, seqRefuse = d, r }
}

// Listings reports how many getChildren requests the engine's acquires have
// sent (shared listings count once): the request a herd or a listing per
// handoff would multiply, counted whatever the machine's speed.
func (e *Engine) Listings() int64 { return e.lists.Load() }

// KeeperQuiet reports how many keeper intervals the current session skipped
// because its own leader-path writes had kept the validity base moving.
func (e *Engine) KeeperQuiet() int64 {
	s, err := e.current()
	if err != nil {
		return 0
	}
	return s.quiet.Load()
}

// LocalHandoffs counts grants handed over in process (native, and the
// plugin protocol's local handoffs).
func (e *Engine) LocalHandoffs() int64 { return e.local.Load() }

// HandoffOffers counts the plugin protocol's local waiters on object
// offered a handoff (each watching a child of its own engine).
func (e *Engine) HandoffOffers(object string) int {
	name, _ := EscapeObject(object)
	e.objMu.Lock()
	defer e.objMu.Unlock()
	if st := e.objs[name]; st != nil {
		return len(st.behind)
	}
	return 0
}

// SetHandoffHook runs f at the stages of a plugin local handoff ("offered",
// "send", "answer": see handoffHook) until the returned function is called.
func SetHandoffHook(f func(stage string)) func() {
	handoffHook.Store(&f)
	return func() { handoffHook.Store(nil) }
}

// ReleaseListings counts the listings native releases sent themselves,
// not knowing whom to hand over to (learnBeforeRelease).
func (e *Engine) ReleaseListings() int64 { return e.relLists.Load() }

// WatchReads counts the reads holder watches sent (each arms the watch).
func (e *Engine) WatchReads() int64 { return e.watchReads.Load() }

// RefusedTakes counts native takes the data version refused (a write
// landed between the view and the take: a logged write for nothing).
func (e *Engine) RefusedTakes() int64 { return e.refusedTakes.Load() }

// PreReads counts native acquires that read the holders before creating
// anything (run).
func (e *Engine) PreReads() int64 { return e.preReads.Load() }

// SetLearnPause sets the pause between a native holder's listings of
// arrivals (learnNative) and returns a function restoring it.
func SetLearnPause(d time.Duration) func() {
	old := nativeLearnPause.Swap(int64(d))
	return func() { nativeLearnPause.Store(old) }
}

// FollowsQueue reports whether a native grant knows whom it may hand over
// to or follows arrivals to learn it (a contended grant must do one).
func (g *Grant) FollowsQueue() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.native != nil && (g.native.learning || len(g.native.next) > 0)
}

// Parks counts requests parked behind a local holder; ParkGrants those a
// release multi granted.
func (e *Engine) Parks() int64      { return e.parks.Load() }
func (e *Engine) ParkGrants() int64 { return e.parkGrants.Load() }

// SetBeforeReplaceHook sets fail's hook between telling the grants and
// replacing the session (nil: none); the test's cleanup removes it.
func SetBeforeReplaceHook(t interface{ Cleanup(func()) }, f func()) {
	testHookBeforeReplace = f
	t.Cleanup(func() { testHookBeforeReplace = nil })
}

// Track is track: f on a goroutine Close waits for, unless closed.
func (e *Engine) Track(f func()) bool { return e.track(f) }

// ListSharedLatest runs listShared for object in the engine's latest
// session, closed or not (a caller's acquire racing Close holds it), and
// returns its error.
func (e *Engine) ListSharedLatest(ctx context.Context, object string) error {
	name, err := EscapeObject(object)
	if err != nil {
		return err
	}
	e.mu.Lock()
	s := e.sess
	e.mu.Unlock()
	_, err = e.listShared(ctx, s, name, e.root+"/"+name, time.Now())
	return err
}

// SetServersForTest changes the servers the next session dials (replace),
// as a name's resolution changing would.
func (e *Engine) SetServersForTest(servers []string) {
	e.mu.Lock()
	e.servers = servers
	e.mu.Unlock()
}

// FailSessionForTest fails the current session with cause, as the
// monitor or an expiry would: the engine replaces it.
func (e *Engine) FailSessionForTest(cause error) {
	e.mu.Lock()
	s := e.sess
	e.mu.Unlock()
	s.fail(cause)
}
