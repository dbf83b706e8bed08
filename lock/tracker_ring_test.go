package lock

import (
	"testing"
	"time"
)

// TestPendingRing: requests come out in order, an answer drops the older
// requests with it, the ring survives wrapping and growing, and steady
// traffic allocates nothing.
func TestPendingRing(t *testing.T) {
	var r pendingRing
	xid := int32(0)
	push := func(n int) {
		for range n {
			xid++
			r.push(pending{xid: xid, sent: time.Unix(int64(xid), 0)})
		}
	}
	push(5)
	if p, ok := r.popThrough(1); !ok || p.xid != 1 || p.sent.Unix() != 1 || r.n != 4 {
		t.Fatalf("popThrough(1) = %+v %v, %d left", p, ok, r.n)
	}
	if p, ok := r.popThrough(3); !ok || p.xid != 3 || r.n != 2 { // 2 goes with it
		t.Fatalf("popThrough(3) = %+v %v, %d left", p, ok, r.n)
	}
	if _, ok := r.popThrough(2); ok {
		t.Fatal("popThrough(2) found a request dropped before")
	}
	push(20) // wraps, then grows
	for want := int32(4); want <= xid; want++ {
		if p, ok := r.popThrough(want); !ok || p.xid != want {
			t.Fatalf("popThrough(%d) = %+v %v", want, p, ok)
		}
	}
	if r.n != 0 {
		t.Fatalf("%d left, want 0", r.n)
	}
	if a := testing.AllocsPerRun(1000, func() { push(3); r.popThrough(xid) }); a != 0 {
		t.Errorf("%v allocations per round of steady traffic, want 0", a)
	}
}
