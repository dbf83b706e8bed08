package lock

import (
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
