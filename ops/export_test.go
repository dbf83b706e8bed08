package ops

import "github.com/batonhq/baton/queue"

// Event is a finished attempt, as reported to a test hook.
type Event = event

// SetHook installs f, called after every attempt; call it before Run.
func SetHook(d *Dispatcher, f func(Event)) { d.hook = f }

// StoreOf returns the dispatcher's queue (nil when ops are disabled).
func StoreOf(d *Dispatcher) *queue.Store { return d.store }
