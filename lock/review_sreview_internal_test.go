package lock

import (
	"math/rand/v2"
	"testing"
	"time"
)

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
	var want exactBase
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

// TestReviewSessionThinnedBaseMoves: a session whose tickTime holds several
// times maxTouches answers (zookeeper.tick.time 60 s, the largest allowed,
// at 6,000 answers a second, or 10 s at 40,000) keeps its base about
// tickTime behind, close to its definition's. ee26b1d's thinTouches
// dropped every second touch of the older half each time the touches
// passed maxTouches: a touch went through one such halving per 16,000 or
// so answers, so within a tick (hundreds of thousands) every touch older
// than a fraction of it was gone but the very first one after the
// handshake (always kept): each cut found only that one, and the base
// stopped for good (a minute behind its definition after 2 ticks).
func TestReviewSessionThinnedBaseMoves(t *testing.T) {
	for _, c := range []struct {
		tick    time.Duration
		rate    int           // answers a second, each through the leader
		latency time.Duration // from send to answer
		run     time.Duration
	}{
		{60 * time.Second, 6000, 300 * time.Microsecond, 180 * time.Second},
		{10 * time.Second, 40000, 300 * time.Microsecond, 30 * time.Second},
		// answers 5 s late at a 100 ms tick: the touches span 5 s (coarser grains)
		{100 * time.Millisecond, 20000, 5 * time.Second, 12 * time.Second},
	} {
		s := &session{e: &Engine{opts: Options{TickTime: c.tick}}}
		var want exactBase
		start := time.Unix(1_700_000_000, 0)
		step := time.Second / time.Duration(c.rate)
		keep := int((2*c.tick+c.latency)/step) + 2 // what want needs of its touches
		for i := range int(c.run / step) {
			at := start.Add(time.Duration(i) * step)
			sent := at.Add(-c.latency)
			s.acked(sent, at, true)
			want.acked(sent, at, true, c.tick)
			if n := len(want.touches); n > 2*keep {
				want.touches = append(want.touches[:0], want.touches[n-keep:]...)
			}
			if len(s.touches) > maxTouches {
				t.Fatalf("tick %v: ack %d: %d touches kept, want at most %d", c.tick, i, len(s.touches), maxTouches)
			}
			if s.base.After(want.base) {
				t.Fatalf("tick %v: ack %d: base %v newer than its definition's %v", c.tick, i, s.base, want.base)
			}
			if at.Sub(start) > 2*c.tick+c.latency {
				if lag := want.base.Sub(s.base); lag > max(c.tick/1000, time.Millisecond) {
					t.Fatalf("tick %v, %d answers a second: after %v the base is %v behind its definition's (%v behind the answer)",
						c.tick, c.rate, at.Sub(start), lag, at.Sub(s.base))
				}
			}
		}
	}
}

// TestReviewSessionAckedExactInOrder: on acknowledgements as a connection
// gives them (a server answers a session's requests in order: sends and
// acknowledgements both in order), with latencies from nothing to three
// ticks (stalls), a coarse clock (equal times everywhere), phases of reads
// only for several ticks, and reconnects, the base is its definition's
// exactly while no thinning happens: what acked drops no later cut needs.
// Fails on ee26b1d (answers slower than tickTime: the base stops) and on
// a leadingAckedBy that does not count a touch acknowledged at the cut
// itself (older: an equal time is common on a coarse clock).
func TestReviewSessionAckedExactInOrder(t *testing.T) {
	tick := 100 * time.Millisecond
	r := rand.New(rand.NewPCG(7, 8))
	for run := range 40 {
		s := &session{e: &Engine{opts: Options{TickTime: tick}}}
		var want exactBase
		now := time.Unix(1_700_000_000, 0)
		var inflight []time.Time // sent, oldest first
		stallUntil := now
		readsOnly := false
		for i := range 30_000 {
			if r.IntN(4) == 0 { // a coarse clock: many events at one time
				now = now.Add(time.Duration(r.IntN(3)) * time.Millisecond)
			}
			if r.IntN(3000) == 0 {
				stallUntil = now.Add(time.Duration(r.IntN(int(3 * tick))))
			}
			if r.IntN(2000) == 0 {
				readsOnly = !readsOnly
			}
			if r.IntN(8000) == 0 { // a new connection: nothing in flight, touches reset
				inflight = inflight[:0]
				s.touches, want.touches = s.touches[:0], want.touches[:0]
			}
			if len(inflight) < 200 && (len(inflight) == 0 || r.IntN(2) == 0) {
				inflight = append(inflight, now)
				continue
			}
			if now.Before(stallUntil) {
				continue
			}
			sent := inflight[0]
			inflight = inflight[1:]
			leader := !readsOnly && r.IntN(3) != 0
			s.acked(sent, now, leader)
			want.acked(sent, now, leader, tick)
			if !s.base.Equal(want.base) {
				t.Fatalf("run %d, step %d: base %v, its definition's %v (answer %v after its send)", run, i, s.base, want.base, now.Sub(sent))
			}
		}
	}
}
