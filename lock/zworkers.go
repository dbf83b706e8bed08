package lock

import "time"

// zcall runs each go-zookeeper call on a goroutine other than its caller's,
// so that the caller can stop waiting when its context ends. A goroutine
// started per call begins with a 2 KiB stack, which go-zookeeper's select
// and the request's encoding (a marker's JSON) outgrow: the runtime copied
// the stack on every call (`runtime.copystack` under `runtime.newstack`,
// about 4 % of the sidecar's CPU per W1 cycle). So a goroutine that has run
// a call waits up to zworkerIdle for the next one, with the stack it grew;
// a call that finds none idle starts one.

// zworkerIdle is how long a call's goroutine waits for another call.
const zworkerIdle = 100 * time.Millisecond

// zjobs hands a call to an idle goroutine (unbuffered: only to one that
// is waiting).
var zjobs = make(chan func())

// goCall runs f on a goroutine other than the caller's: an idle one, else
// a new one.
func goCall(f func()) {
	select {
	case zjobs <- f:
	default:
		go zworker(f)
	}
}

// zworker runs f, then the calls handed to it while it is idle, and
// returns after zworkerIdle without one.
func zworker(f func()) {
	idle := time.NewTimer(zworkerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil // not kept alive while idle
		idle.Reset(zworkerIdle)
		select {
		case f = <-zjobs:
		case <-idle.C:
			return
		}
	}
}
