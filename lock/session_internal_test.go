package lock

import (
	"math/rand/v2"
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

// TestSessionAckedMatchesCopy: acked with the reslice keeps exactly what
// the copying version (kept here) kept — the base, the newest leader-path
// send and the touches — on random sequences of acknowledgements: leader
// and not, sends out of order, long runs without the leader (the 4096
// trim), and reconnects (touches reset).
func TestSessionAckedMatchesCopy(t *testing.T) {
	type ref struct {
		touches          []touch
		base, leaderSent time.Time
	}
	tick := 100 * time.Millisecond
	refAcked := func(s *ref, sent, at time.Time, leader bool) { // the version before the reslice
		s.touches = append(s.touches, touch{sent, at})
		if !leader {
			if len(s.touches) > 4096 {
				s.touches = append(s.touches[:0], s.touches[len(s.touches)-1024:]...)
			}
			return
		}
		if sent.After(s.leaderSent) {
			s.leaderSent = sent
		}
		cut := sent.Add(-tick)
		k := -1
		for i, t := range s.touches {
			if t.acked.After(cut) {
				break
			}
			k = i
		}
		if k < 0 {
			return
		}
		if b := s.touches[k].sent; b.After(s.base) {
			s.base = b
		}
		s.touches = append(s.touches[:0], s.touches[k:]...)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for run := range 50 {
		e := &Engine{opts: Options{TickTime: tick}}
		s := &session{e: e}
		var want ref
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
			refAcked(&want, sent, now, leader)
			if !s.base.Equal(want.base) || !s.leaderSent.Equal(want.leaderSent) || len(s.touches) != len(want.touches) {
				t.Fatalf("run %d, ack %d: base %v leaderSent %v touches %d; want %v %v %d",
					run, i, s.base, s.leaderSent, len(s.touches), want.base, want.leaderSent, len(want.touches))
			}
		}
		for i := range s.touches {
			if s.touches[i] != want.touches[i] {
				t.Fatalf("run %d: touch %d = %v, want %v", run, i, s.touches[i], want.touches[i])
			}
		}
	}
}
