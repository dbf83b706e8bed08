package sidecar

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// drainState is how far the shutdown has come, which answers about leases
// read: the drain begins (nothing more is granted; no validity is told past
// its end), its grace ends (the leases left are told lost), it may be cut
// short (Close, or a Shutdown whose ctx ended), and teardown begins. Each
// step happens once and is never undone. Its methods are safe for
// concurrent use.
type drainState struct {
	ctx      context.Context // cancelled when the drain begins
	cancel   context.CancelFunc
	once     sync.Once
	asked    atomic.Bool   // Drain was called (POST /v1/drain): see Server.DrainRequested
	end      time.Time     // set before ctx is cancelled: no validity is told past it
	grace    time.Duration // sidecar.shutdown.grace when the drain began
	over     chan struct{} // closed at the end of the grace: the leases left are told lost
	overOnce sync.Once
	hurry    chan struct{} // closed to cut the grace short
	hurryOne sync.Once
	closing  chan struct{} // closed when teardown begins
}

func newDrainState() *drainState {
	ctx, cancel := context.WithCancel(context.Background())
	return &drainState{ctx: ctx, cancel: cancel, over: make(chan struct{}), hurry: make(chan struct{}), closing: make(chan struct{})}
}

// stopping reports whether the drain has begun: nothing more is granted.
func (d *drainState) stopping() bool { return d.ctx.Err() != nil }

// graceOver reports whether the drain's grace has ended: the leases left
// are told lost and no more renewed.
func (d *drainState) graceOver() bool {
	select {
	case <-d.over:
		return true
	default:
		return false
	}
}

// begin starts the drain once, with grace, and returns the end of its
// grace: from now on nothing is granted, and no lease is told a validity
// past the end. A later call returns the first end.
func (d *drainState) begin(grace time.Duration) time.Time {
	d.once.Do(func() {
		d.grace = grace
		d.end = time.Now().Add(grace)
		d.cancel()
	})
	return d.end
}

// endGrace tells the leases left that they are lost (reason "shutdown").
func (d *drainState) endGrace() { d.overOnce.Do(func() { close(d.over) }) }

// cutShort ends the waits for holders (the drain's and the revoked leases').
func (d *drainState) cutShort() { d.hurryOne.Do(func() { close(d.hurry) }) }
