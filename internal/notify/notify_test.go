package notify

import (
	"sync"
	"testing"
)

// TestBroadcast: Notify wakes every goroutine that took Wait's channel
// before it, and only those; a channel taken after it stays open until the
// next Notify.
func TestBroadcast(t *testing.T) {
	var (
		mu sync.Mutex
		b  Broadcast
		wg sync.WaitGroup
	)
	const waiters = 20
	var ready sync.WaitGroup
	ready.Add(waiters)
	for range waiters {
		wg.Go(func() {
			mu.Lock()
			ch := b.Wait()
			mu.Unlock()
			ready.Done()
			<-ch
		})
	}
	ready.Wait()
	mu.Lock()
	before := b.Wait()
	b.Notify()
	after := b.Wait()
	mu.Unlock()
	wg.Wait() // every waiter woke (a missed wake would hang the test)
	select {
	case <-before:
	default:
		t.Fatal("the channel taken before Notify is still open")
	}
	select {
	case <-after:
		t.Fatal("the channel taken after Notify is already closed")
	default:
	}
	var zero Broadcast
	zero.Notify() // nobody waits: nothing to close
	b.Notify()
	select {
	case <-after:
	default:
		t.Fatal("the second Notify did not close the channel taken after the first")
	}
}
