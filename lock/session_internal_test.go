package lock

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// BenchmarkSessionAcked: one leader-path acknowledgement on a session that
// was acknowledged a few thousand times within the last tickTime (a busy
// sidecar's steady state): constant time, not a copy of that window.
func BenchmarkSessionAcked(b *testing.B) {
	e := &Engine{opts: Options{TickTime: 2 * time.Second}}
	s := &session{e: e}
	t0 := time.Now()
	const window = 4000 // acknowledgements per tickTime
	step := e.opts.TickTime / window
	i := 0
	ack := func() {
		at := t0.Add(time.Duration(i) * step)
		s.acked(at.Add(-100*time.Microsecond), at, true)
		i++
	}
	for range 2 * window {
		ack()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ack()
	}
	if n := len(s.touches); n > window+2 {
		b.Fatalf("%d touches kept, want about %d (one tickTime)", n, window)
	}
}

// exactBase is the validity base by its definition, over every touch since
// the last reset (nothing dropped): the send time of the newest request
// acknowledged no later than tickTime before a leader-path request's send.
type exactBase struct {
	touches          []touch
	base, leaderSent time.Time
}

func (x *exactBase) acked(sent, at time.Time, leader bool, tick time.Duration) {
	x.touches = append(x.touches, touch{sent, at})
	if !leader {
		return
	}
	if sent.After(x.leaderSent) {
		x.leaderSent = sent
	}
	cut := sent.Add(-tick) // (the tests acknowledge in time order: a binary search finds the newest by cut)
	if i := sort.Search(len(x.touches), func(i int) bool { return x.touches[i].acked.After(cut) }) - 1; i >= 0 {
		if b := x.touches[i].sent; b.After(x.base) {
			x.base = b
		}
	}
}

// TestSessionAckedMatchesExact: what acked keeps (the touches of the last
// ticks, the newest older one) gives a base never newer than its definition
// over every touch, and older by no more than the requests' spread (a
// leader-path answer drops the touches before its cut, which an answer to
// a request sent before it could still have used), on random sequences of
// acknowledgements: leader and not, sends out of order by up to 3 ms, long
// runs without the leader, reconnects.
func TestSessionAckedMatchesExact(t *testing.T) {
	tick := 100 * time.Millisecond
	r := rand.New(rand.NewPCG(3, 4))
	for run := range 50 {
		s := &session{e: &Engine{opts: Options{TickTime: tick}}}
		var want exactBase
		now := time.Unix(1_700_000_000, 0)
		for i := range 20_000 {
			now = now.Add(time.Duration(r.IntN(200)) * time.Microsecond)
			sent := now.Add(-time.Duration(r.IntN(3000)) * time.Microsecond)
			leader := r.IntN(10) == 0
			if run%5 == 0 && i%7000 < 5000 { // long runs with nothing through the leader
				leader = false
			}
			if r.IntN(5000) == 0 { // a new connection: handshake resets the touches
				s.touches, want.touches = s.touches[:0], want.touches[:0]
			}
			s.acked(sent, now, leader)
			want.acked(sent, now, leader, tick)
			if s.base.After(want.base) || want.base.Sub(s.base) > 3*time.Millisecond || !s.leaderSent.Equal(want.leaderSent) {
				t.Fatalf("run %d, ack %d: base %v leaderSent %v; want %v (at most 3 ms older) %v", run, i, s.base, s.leaderSent, want.base, want.leaderSent)
			}
		}
	}
}

// TestSessionBaseMovesUnderLoad: a session answering thousands of requests
// a second (two in three through the leader) keeps its base about tickTime
// behind. The cap before (4,096 touches, cut to the newest 1,024 on a
// read's answer) kept less than a tickTime of them: the base stopped and
// the session gave itself up as lost after its timeout.
func TestSessionBaseMovesUnderLoad(t *testing.T) {
	tick := 2 * time.Second
	s := &session{e: &Engine{opts: Options{TickTime: tick}}}
	now := time.Unix(1_700_000_000, 0)
	start := now
	const rate = 6000 // answers a second
	for i := range 20 * rate {
		now = now.Add(time.Second / rate)
		s.acked(now.Add(-300*time.Microsecond), now, i%3 != 0)
		if i%3 != 0 && now.Sub(start) > 2*tick {
			if lag := now.Sub(s.base); lag > tick+time.Millisecond {
				t.Fatalf("after %v: the base is %v behind, want about tickTime (%v)", now.Sub(start), lag, tick)
			}
		}
	}
	if n := len(s.touches); n > 2*int(tick/time.Second)*rate+2 {
		t.Errorf("%d touches kept, want at most two ticks' worth", n)
	}
}

// TestSessionTouchesBounded: a session whose twice tickTime holds more
// answers than maxTouches keeps at most that many, and the base it then
// finds is never newer than its definition's (a dropped touch makes it
// older only).
func TestSessionTouchesBounded(t *testing.T) {
	tick := 60 * time.Second // the largest zookeeper.tick.time
	s := &session{e: &Engine{opts: Options{TickTime: tick}}}
	var want exactBase
	now := time.Unix(1_700_000_000, 0)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 400_000 { // 20,000 answers a second for 20 s, then on past a tick
		now = now.Add(50 * time.Microsecond)
		if i == 300_000 {
			now = now.Add(tick)
		}
		leader := i > 300_000 && r.IntN(2) == 0
		sent := now.Add(-time.Duration(r.IntN(1000)) * time.Microsecond)
		s.acked(sent, now, leader)
		want.acked(sent, now, leader, tick)
		if len(s.touches) > maxTouches {
			t.Fatalf("ack %d: %d touches kept, want at most %d", i, len(s.touches), maxTouches)
		}
		if s.base.After(want.base) {
			t.Fatalf("ack %d: base %v newer than its definition's %v", i, s.base, want.base)
		}
	}
	if s.base.IsZero() || want.base.Sub(s.base) > tick {
		t.Errorf("base %v, its definition's %v: want it found, at most tickTime older", s.base, want.base)
	}
}
