// Package notify wakes every goroutine waiting for a change of some state
// at once: a channel that is closed and replaced on each change.
package notify

// Broadcast announces changes of a piece of state to any number of
// waiters. It has no lock of its own: the mutex that guards the state
// guards the Broadcast too. A waiter reads the state and takes Wait's
// channel under that mutex, then blocks on the channel outside it; whoever
// changes the state calls Notify under the mutex. So no change between the
// read and the wait goes unseen. The zero value is ready to use.
type Broadcast struct{ ch chan struct{} }

// Wait returns the channel that the next Notify closes.
func (b *Broadcast) Wait() <-chan struct{} {
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify wakes every waiter: it closes the channel Wait returned; later
// calls of Wait get a new one.
func (b *Broadcast) Notify() {
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
