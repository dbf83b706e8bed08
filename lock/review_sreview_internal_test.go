package lock

import (
	"sort"
	"testing"
	"time"
)

// reviewExact is the validity base by its definition, kept independently of
// the one in session_internal_test.go: over every touch since the last
// reset, a leader-path answer moves the base to the send time of the newest
// request acknowledged no later than tickTime before its own send.
type reviewExact struct {
	touches []touch
	base    time.Time
}

func (x *reviewExact) acked(sent, at time.Time, leader bool, tick time.Duration) {
	x.touches = append(x.touches, touch{sent, at}) // in acknowledgement order
	if !leader {
		return
	}
	cut := sent.Add(-tick)
	if i := sort.Search(len(x.touches), func(i int) bool { return x.touches[i].acked.After(cut) }) - 1; i >= 0 {
		if b := x.touches[i].sent; b.After(x.base) {
			x.base = b
		}
	}
}

// TestReviewSessionBaseMovesWhenSlowerThanTick: requests pipelined on a
// session whose answers take longer than tickTime (a loaded ZooKeeper, a
// fsync stall; zookeeper.tick.time may be as low as 100 ms) keep the base
// where its definition puts it. ee26b1d dropped on every answer the touches
// acknowledged more than twice tickTime before the answer but the newest:
// with answers 250 ms after their send at a 100 ms tick, that dropped every
// touch a leader-path answer's cut (its send - tickTime) could find, and
// the base never moved (the session is given up after its timeout). The
// code before ee26b1d passes.
func TestReviewSessionBaseMovesWhenSlowerThanTick(t *testing.T) {
	tick := 100 * time.Millisecond
	const latency = 250 * time.Millisecond
	s := &session{e: &Engine{opts: Options{TickTime: tick}}}
	var want reviewExact
	start := time.Unix(1_700_000_000, 0)
	for i := range 10_000 {
		sent := start.Add(time.Duration(i) * time.Millisecond)
		at := sent.Add(latency)
		leader := i%3 != 0
		s.acked(sent, at, leader)
		want.acked(sent, at, leader, tick)
		if s.base.After(want.base) {
			t.Fatalf("ack %d: base %v newer than its definition's %v", i, s.base, want.base)
		}
		if leader && at.Sub(start) > latency+3*tick {
			if lag := want.base.Sub(s.base); lag > 2*time.Millisecond {
				t.Fatalf("after %v: the base is %v behind its definition's (%v behind the answer)", at.Sub(start), lag, at.Sub(s.base))
			}
		}
	}
}
