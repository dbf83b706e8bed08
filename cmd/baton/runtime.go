package main

import (
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
)

// The Go runtime's settings for `baton serve`, unless the environment sets
// them (GOMAXPROCS, GOMEMLIMIT: the runtime reads those itself).
//
// GOMAXPROCS 1: the sidecar's work is short and I/O bound (parse a
// request, one or two ZooKeeper requests, answer); with more Ps every
// request and every ZooKeeper answer also wakes idle threads to steal it.
// On the 2-core machine of BENCHMARKS.md one P cut the sidecar's CPU per W1
// cycle by a third and its context switches by 40 %, and the 10,000-waiter
// drain went faster, not slower.
//
// GOMEMLIMIT 232 MiB: a soft limit that makes the collector work harder as
// the heap approaches it, instead of letting the heap double before each
// collection (GOGC=100) — the peak of a sidecar with thousands of waiting
// acquires (issue 21's budget: 10,000 of them in 256 MiB; without a limit
// an earlier build's peaked at 315 MiB). It sits above what the default
// sidecar.max.waiters (10,000) need: a waiting acquire keeps about 20 KB
// live (half of it its goroutine's stack), so 10,000 of them and an idle
// sidecar are about 215 MiB. A limit below that is a collector that never
// stops: the first limit, 192 MiB, made the 10,000-waiter drain spend three
// quarters of the sidecar's CPU collecting, 2.2 times the CPU per handoff
// (BENCHMARKS.md, eleventh round). It never fails an allocation: near it
// the collector runs more often (the runtime caps that at about half the
// CPU), so a node that admits more than 10,000 waiting acquires (raising
// sidecar.max.waiters) should raise it by about 20 KB each.
const (
	serveMaxProcs = 1
	serveMemLimit = 232 << 20
)

// setServeRuntime applies serveMaxProcs and serveMemLimit where getenv
// (os.Getenv) does not set GOMAXPROCS or GOMEMLIMIT, and returns the
// settings in effect.
func setServeRuntime(getenv func(string) string) (procs int, memLimit int64) {
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(min(serveMaxProcs, runtime.NumCPU()))
	}
	if getenv("GOMEMLIMIT") == "" && debug.SetMemoryLimit(-1) == math.MaxInt64 {
		debug.SetMemoryLimit(serveMemLimit)
	}
	return runtime.GOMAXPROCS(0), debug.SetMemoryLimit(-1)
}

// What a sidecar keeps live (heap and stacks in use): idle, and per waiting
// acquire (the 10,000-waiter probe's live_bytes_per_waiter: 20.2–21.3 KB).
const (
	idleLiveBytes   = 24 << 20
	waiterLiveBytes = 21 << 10
)

// memLimitWarning is the warning for a memory limit below what maxWaiters
// waiting acquires keep live ("" when it is not): near that many waiters
// the collector would run without pause.
func memLimitWarning(maxWaiters int, memLimit int64) string {
	need := idleLiveBytes + int64(maxWaiters)*waiterLiveBytes
	if memLimit == math.MaxInt64 || need <= memLimit {
		return ""
	}
	return fmt.Sprintf("sidecar.max.waiters is %d: that many waiting acquires keep about %d MiB live, above GOMEMLIMIT (%d MiB); "+
		"near that many the collector runs without pause (up to half the CPU, fewer handoffs per second): "+
		"set GOMEMLIMIT to at least %dMiB in baton serve's environment, or lower sidecar.max.waiters",
		maxWaiters, need>>20, memLimit>>20, (need+1<<20-1)>>20)
}

// warnMemLimit logs memLimitWarning against the process's memory limit, if
// there is one to give (at start, and on a reload changing maxWaiters).
func warnMemLimit(log *slog.Logger, maxWaiters int) {
	if w := memLimitWarning(maxWaiters, debug.SetMemoryLimit(-1)); w != "" {
		log.Warn("memory limit below the waiters' need", "key", "sidecar.max.waiters", "warning", w)
	}
}
