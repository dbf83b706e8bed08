package client

import "time"

// WithLockDelay sets this acquire's lock-delay (lock_delay_ms), overriding
// the sidecar's zookeeper.lock.delay: when the previous holder vanished
// without releasing (its ZooKeeper session expired, its sidecar was
// killed), the lock is not granted until d after the request saw the
// holder gone; a clean release is not delayed. 0 turns the delay off for
// this acquire; at most 10 minutes (else a 400 naming lock_delay_ms). The
// acquire's wait still bounds it.
func WithLockDelay(d time.Duration) Option {
	return func(o *acquireOptions) { o.lockDelay = &d }
}
