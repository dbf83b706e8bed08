package lock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// Waits queued on one object that time out together read the object for
// their InstanceLockError (holder, position) once between them, not a
// listing of the whole queue each: 300 such listings are 300 × 300
// children through the session's connection, ahead of its keepers.
// Every wait still fails with an InstanceLockError naming the holder,
// and leaves no node behind.
func TestTimeoutBurstSharesInspect(t *testing.T) {
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		t.Run(proto.String(), func(t *testing.T) {
			root := testRoot(t, zkServer)
			var received atomic.Int64 // bytes from ZooKeeper
			e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
				o.Protocol = proto
				o.Dialer = func(network, addr string, timeout time.Duration) (net.Conn, error) {
					c, err := net.DialTimeout(network, addr, timeout)
					if err != nil {
						return nil, err
					}
					return &countingConn{Conn: c, n: &received}, nil
				}
			})
			other := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Protocol = proto })
			gate := acquire(t, other, "tb", lock.Foreground, lock.AcquireOptions{})
			const n = 300
			conn := rawConn(t, zkServer.Servers())
			start := make(chan struct{})
			var wg sync.WaitGroup
			var bad atomic.Int64
			var b0 atomic.Int64
			for range n {
				wg.Go(func() {
					<-start
					_, err := e.Acquire(context.Background(), "tb", lock.Foreground, lock.AcquireOptions{Wait: 3 * time.Second})
					var ile *lock.InstanceLockError
					if !errors.As(err, &ile) || ile.Holder == nil || ile.Holder.Token != gate.Token() {
						bad.Add(1)
						if bad.Load() <= 3 {
							t.Errorf("want an InstanceLockError naming the holder, got %v", err)
						}
					}
				})
			}
			close(start)
			waitFor(t, 30*time.Second, "every waiter queued", func() bool { return len(children(t, conn, root, "tb")) >= n+1+pl(proto) })
			b0.Store(received.Load())
			wg.Wait()
			perWaiter := (received.Load() - b0.Load()) / n
			t.Logf("%d waits timing out together: %d bytes from ZooKeeper per wait", n, perWaiter)
			// A listing of 300 children is ≈ 15 KB, read by each wait for
			// its error when unshared (measured: 19.7 KB per wait). Shared,
			// what is left is the wait's own answers (its delete, ≈ 0.5 KB
			// with the plugin protocol) and, native, the re-reads of the
			// waiters whose waiter ahead left (shared reads, ≈ 3.3 KB).
			if perWaiter > 8000 {
				t.Errorf("%d bytes from ZooKeeper per timed-out wait; want the error's read shared (at most 8000)", perWaiter)
			}
			waitFor(t, 10*time.Second, "no node left behind", func() bool { return len(children(t, conn, root, "tb")) == 1+pl(proto) })
			release(t, gate)
		})
	}
}
