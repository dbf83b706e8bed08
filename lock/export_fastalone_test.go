package lock

// SetFastMultiHook runs f (with the object node's path) in every native
// fast acquire just before its multi is sent, until undo is called.
func SetFastMultiHook(f func(objPath string)) (undo func()) {
	fastMultiHook.Store(&f)
	return func() { fastMultiHook.Store(nil) }
}
