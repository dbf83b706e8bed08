package lock

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestPendingRingMatchesSlice: the ring answers exactly as the slice it
// replaced (find the oldest with xid, drop it and everything older) over
// random traffic: repeated xids (pings are all -2), answers for unknown
// xids, bursts that grow the ring, wrapping, xids crossing int32's end.
func TestPendingRingMatchesSlice(t *testing.T) {
	t.Parallel()
	// 20 seeds: each burst bound (seed%20) once; 50 took 30 s of CPU under -race
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var r pendingRing
		var old []pending
		xid := int32(2147483647 - 300) // wraps to negative on the way
		for step := range 5000 {
			if rng.IntN(3) > 0 || len(old) == 0 {
				for range 1 + rng.IntN(1+int(seed%20)) {
					p := pending{xid: -2, op: int32(step), sent: time.Unix(int64(step), 0)}
					if rng.IntN(4) > 0 {
						xid++
						p.xid = xid
					}
					r.push(p)
					old = append(old, p)
				}
				continue
			}
			var want int32
			switch k := rng.IntN(10); {
			case k < 7: // an answer in flight, usually the oldest
				want = old[min(rng.IntN(3), len(old)-1)].xid
			case k < 9:
				want = -2
			default:
				want = xid + 1000 // never sent
			}
			var wp pending
			for k, q := range old {
				if q.xid == want {
					wp, old = q, old[k+1:]
					break
				}
			}
			gp, ok := r.popThrough(want)
			if gp != wp || ok != !wp.sent.IsZero() || r.n != len(old) {
				t.Fatalf("seed %d step %d popThrough(%d) = %+v %v (%d left), want %+v (%d left)", seed, step, want, gp, ok, r.n, wp, len(old))
			}
			for i := range r.n {
				if r.buf[(r.head+i)%len(r.buf)] != old[i] {
					t.Fatalf("seed %d step %d: ring[%d] differs", seed, step, i)
				}
			}
		}
	}
}
