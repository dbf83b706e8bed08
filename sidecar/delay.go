package sidecar

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

// Lock-delay and aging (issue 22 §4, §7): the engine does the work (see
// "Lock-delay" and "Aging" in package lock); the sidecar passes
// zookeeper.lock.delay with every acquire, so that a reload applies to
// later acquires, and an acquire's lock_delay_ms overrides it.

// lockDelayOf returns the engine's AcquireOptions.LockDelay for an acquire:
// lock_delay_ms if given (0 = none), else zookeeper.lock.delay. A value out
// of 0..600000 is a 400 naming lock_delay_ms.
func lockDelayOf(ms *int64, cfg *props.Config) (time.Duration, error) {
	d := cfg.LockDelay
	if ms != nil {
		v, err := msParam("lock_delay_ms", *ms, 0, lock.MaxLockDelay.Milliseconds())
		if err != nil {
			return 0, err
		}
		d = v
	}
	if d <= 0 {
		return -1, nil // none, whatever the engine started with
	}
	return d, nil
}

// lockDelaysMetric counts the vanished holders acquires waited out.
func lockDelaysMetric(s *Server) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "baton_lock_delays_total",
		Help: "Holders that vanished without releasing (session expired, sidecar killed) and that an acquire waited out its lock-delay for (zookeeper.lock.delay, lock_delay_ms).",
	}, func() float64 { return float64(s.eng.Health().LockDelays) })
}
