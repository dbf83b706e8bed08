package lock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/go-zookeeper/zk"
)

// nativeTestView is a view of an object with the children kids (in grant
// order) whose data names holders.
func nativeTestView(kids []nchild, holders []nativeHolder) *nativeView {
	v := &nativeView{d: nativeData{V: 1, H: holders}, st: &zk.Stat{Mzxid: 7}}
	v.setKids(kids)
	return v
}

// nativeTestKid is the parsed child of request req.
func nativeTestKid(t *testing.T, e *Engine, fg, shared bool, req string, seq int) nchild {
	t.Helper()
	p := e.opts.BackgroundPrefix
	if fg {
		p = e.opts.ForegroundPrefix
	}
	m := "x"
	if shared {
		m = "s"
	}
	c, ok := e.parseNative(fmt.Sprintf("%s_%s_%s_%010d", p, m, req, seq))
	if !ok {
		t.Fatalf("parseNative(%s, %s, %s)", p, m, req)
	}
	return c
}

// A waiting acquire decides from a view of the whole queue without copying
// it: eligible and target allocate nothing. Each copied the waiters (48
// bytes a child) on every waiting acquire's arrival: with 10,000 waiters
// queueing on one object, gigabytes of garbage, the native sidecar over its
// GOMEMLIMIT and collecting all the time, and the GC assists that those
// copies and every other allocation of the waiting goroutine ran in the
// mark phase doubled about half the waiters' stacks (4 → 8 KiB); see
// BENCHMARKS.md "Native waiter memory (nmem)".
func TestNativeWaiterDecidesWithoutCopy(t *testing.T) {
	e := &Engine{opts: Options{ForegroundPrefix: "A", BackgroundPrefix: "B"}}
	for _, shared := range []bool{false, true} {
		var kids []nchild
		for i := range 2000 {
			kids = append(kids, nativeTestKid(t, e, true, shared, fmt.Sprintf("r%d", i), i))
		}
		v := nativeTestView(kids, []nativeHolder{{R: "r0", S: shared}})
		n := &nreq{request: &request{e: e, reqID: "r1500"}, shared: shared}
		var el bool
		var tg string
		allocs := testing.AllocsPerRun(20, func() {
			el, tg = n.eligible(v), n.target(v)
		})
		if allocs != 0 {
			t.Errorf("shared %v: eligible and target allocate %v times a call (the queue copied)", shared, allocs)
		}
		want := kids[1499].name
		if shared {
			want = kids[0].name // only shared waiters ahead: eligible; target is the holder
		}
		if el != shared || tg != want {
			t.Errorf("shared %v: eligible %v, target %s; want %v, %s", shared, el, tg, shared, want)
		}
	}
}

// eligible and target against their former definitions over v.waiters()
// (a copy of the queue), on random views: exclusive and shared, foreground
// and background, live and dead holders, a request that is not queued.
func TestNativeEligibleTargetAsBefore(t *testing.T) {
	e := &Engine{opts: Options{ForegroundPrefix: "A", BackgroundPrefix: "B"}}
	oldEligible := func(n *nreq, v *nativeView) bool {
		if !n.shared {
			if len(v.live) > 0 {
				return false
			}
			w := v.waiters()
			return len(w) > 0 && w[0].req == n.reqID
		}
		if _, ok := v.exclusiveHolder(); ok {
			return false
		}
		for _, w := range v.waiters() {
			if w.req == n.reqID {
				return true
			}
			if !w.shared {
				return false
			}
		}
		return false
	}
	oldTarget := func(n *nreq, v *nativeView) string {
		w := v.waiters()
		i := slices.IndexFunc(w, func(c nchild) bool { return c.req == n.reqID })
		for j := i - 1; j >= 0; j-- {
			if !n.shared || !w[j].shared {
				return w[j].name
			}
		}
		if h, ok := v.exclusiveHolder(); ok {
			return v.childOf(h.R)
		}
		if len(v.live) > 0 {
			return v.childOf(v.live[0].R)
		}
		return ""
	}
	rng := rand.New(rand.NewPCG(21, 3))
	eligibles, targets := 0, 0
	for round := range 5000 {
		nk := rng.IntN(8)
		var kids []nchild
		for i := range nk {
			kids = append(kids, nativeTestKid(t, e, rng.IntN(4) > 0, rng.IntN(2) == 0, fmt.Sprintf("r%d", i), i))
		}
		slices.SortStableFunc(kids, func(a, b nchild) int { // grant order: foreground first
			if a.fg == b.fg {
				return 0
			}
			if a.fg {
				return -1
			}
			return 1
		})
		var holders []nativeHolder
		for i := range nk + 1 { // r<nk> is named with no child: a dead holder
			if rng.IntN(4) == 0 {
				holders = append(holders, nativeHolder{R: fmt.Sprintf("r%d", i), S: rng.IntN(2) == 0, T: int64(i + 1)})
			}
		}
		v := nativeTestView(kids, holders)
		for i := range nk + 1 { // r<nk>: not queued
			req := fmt.Sprintf("r%d", i)
			shared := i < nk && kids[slices.IndexFunc(kids, func(c nchild) bool { return c.req == req })].shared
			n := &nreq{request: &request{e: e, reqID: req}, shared: shared}
			if got, want := n.eligible(v), oldEligible(n, v); got != want {
				t.Fatalf("round %d, %s (shared %v), kids %v, holders %v: eligible %v, was %v", round, req, shared, kids, holders, got, want)
			} else if got {
				eligibles++
			}
			if got, want := n.target(v), oldTarget(n, v); got != want {
				t.Fatalf("round %d, %s (shared %v), kids %v, holders %v: target %q, was %q", round, req, shared, kids, holders, got, want)
			} else if got != "" {
				targets++
			}
		}
	}
	if eligibles < 1000 || targets < 1000 {
		t.Fatalf("the random views exercised too little: %d eligible, %d with a target", eligibles, targets)
	}
}

// listed: a local release cuts the names it hands on only when the
// engine's listing holds every name it drops (topUp gets them back from
// it); one it lacks (handed on by another engine's release) keeps them
// all. Not a safety rule: a name lost costs the chain a listing.
func TestNativeListedNames(t *testing.T) {
	e := &Engine{opts: Options{ForegroundPrefix: "A", BackgroundPrefix: "B"}, objs: map[string]*objState{}}
	var kids []nchild
	for i := range 5 {
		kids = append(kids, nativeTestKid(t, e, true, false, fmt.Sprintf("r%d", i), i+1))
	}
	late := nativeTestKid(t, e, true, false, "late", 9)
	bg := nativeTestKid(t, e, false, false, "bg", 6)
	e.objs["o"] = &objState{nq: append(slices.Clone(kids), bg)}
	names := func(cs ...nchild) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.name)
		}
		return out
	}
	if !e.listed("o", names(kids[1], kids[3], bg)) {
		t.Error("names all in the listing: not listed")
	}
	if e.listed("o", names(kids[1], late)) {
		t.Error("a name the listing lacks (a later arrival): listed")
	}
	if e.listed("o", []string{"not-a-native-name"}) {
		t.Error("an unparsable name: listed")
	}
	if e.listed("other", names(kids[0])) {
		t.Error("an object the engine has no state for: listed")
	}
}
