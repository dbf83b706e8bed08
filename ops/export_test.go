package ops

// Event is a finished attempt, as reported to a test hook.
type Event = event

// SetHook installs f, called after every attempt; call it before Run.
func SetHook(d *Dispatcher, f func(Event)) { d.hook = f }
