package lock

// SetFastMultiHook runs f (with the object node's path) in every native
// fast acquire just before its multi is sent, until undo is called.
func SetFastMultiHook(f func(objPath string)) (undo func()) {
	fastMultiHook.Store(&f)
	return func() { fastMultiHook.Store(nil) }
}

// SplitFirstTouch makes e's first touches make the object node in a write
// of their own and take it with the one-write grant guarded by version 0
// (the path a first touch falls back to when its one multi finds the node
// made meanwhile or no root), instead of in one multi.
func SplitFirstTouch(e *Engine) { e.firstSplit.Store(true) }
