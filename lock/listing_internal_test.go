package lock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// firstAfterScan is firstAfterLocked as it was before its cursor: a scan of
// the listing from its start on every call. The cursor must not change a
// single answer.
func firstAfterScan(st *objState, gen uint64, node, watched string) bool {
	if st == nil || st.list == nil || st.list.gen != gen {
		return false
	}
	l := st.list
	if l.queued {
		l = l.prev
	}
	if !l.isDone() || l.err != nil {
		return false
	}
	idx := slices.Index(l.queue, node)
	if idx < 0 {
		return false
	}
	if _, ok := st.gone[node]; ok { // the cursor's one difference: a gone node is never first
		return false
	}
	for _, a := range l.queue[:idx] {
		if a == watched {
			continue
		}
		if _, ok := st.gone[a]; !ok {
			return false
		}
	}
	return true
}

func doneListing(gen uint64, queue []string) *listing {
	l := &listing{gen: gen, queue: queue, done: make(chan struct{})}
	close(l.done)
	return l
}

// A child the cursor walked past that is dropped from gone (a later listing
// reflects it) must count again: the cursor restarts when goneDrops moves.
func TestFirstAfterCursorRestartsOnDrop(t *testing.T) {
	q := []string{"A-0000000001", "A-0000000002", "A-0000000003", "A-0000000004"}
	st := &objState{list: doneListing(1, q), gone: map[string]time.Time{}}
	if !firstAfterLocked(st, 1, q[1], q[0]) {
		t.Fatalf("%s right behind the holder %s: not first", q[1], q[0])
	}
	if firstAfterLocked(st, 1, q[2], q[1]) {
		t.Fatalf("%s with %s still there: first", q[2], q[0])
	}
	st.gone[q[0]], st.gone[q[1]] = time.Now(), time.Now()
	if !firstAfterLocked(st, 1, q[3], q[2]) {
		t.Fatalf("%s with everything ahead gone or watched: not first", q[3])
	}
	if st.list.gonePrefix != 2 {
		t.Fatalf("cursor at %d, want 2 (both gone children walked)", st.list.gonePrefix)
	}
	delete(st.gone, q[0]) // as listShared drops what a newer listing reflects
	st.goneDrops++
	if firstAfterLocked(st, 1, q[3], q[2]) {
		t.Fatalf("%s first although %s is no longer known gone: the cursor outlived a drop", q[3], q[0])
	}
	if firstAfterLocked(st, 1, q[1], q[0]) {
		t.Fatalf("%s (gone) reported first", q[1])
	}
	if firstAfterLocked(st, 2, q[3], q[2]) {
		t.Fatal("first in another session generation's listing")
	}
}

// The cursor against the scan on random drains: children deleted (mostly
// in order, as a drain does, sometimes out of order, as cancellations do),
// gone entries dropped, listings replaced and queued. Every answer must be
// the scan's.
func TestFirstAfterCursorMatchesScan(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		n := 2 + r.IntN(60)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("A-%010d", i+1)
		}
		st := &objState{list: doneListing(1, slices.Clone(names)), gone: map[string]time.Time{}}
		head := 0
		for step := range 300 {
			switch k := r.IntN(20); {
			case k < 10 && head < n: // the holder's child is deleted: handoff
				st.gone[names[head]] = time.Now()
				head++
			case k < 12: // a waiter further back is cancelled
				st.gone[names[r.IntN(n)]] = time.Now()
			case k < 14 && len(st.gone) > 0: // a listing reflects some: dropped
				for nm := range st.gone {
					if r.IntN(2) == 0 {
						delete(st.gone, nm)
						st.goneDrops++
					}
				}
			case k < 15: // a new listing of what is left (children not yet gone)
				var q []string
				for _, nm := range names[head:] {
					if _, ok := st.gone[nm]; !ok {
						q = append(q, nm)
					}
				}
				st.list = doneListing(1, q)
			case k < 16: // a listing queued behind the current one
				st.list = &listing{gen: 1, queued: true, prev: st.list, done: make(chan struct{})}
			case k < 17 && st.list.queued: // ... which is sent and answered
				st.list = doneListing(1, st.list.prev.queue)
			}
			for range 3 {
				i := r.IntN(n)
				node, watched := names[i], names[max(i-1, 0)]
				if r.IntN(4) == 0 {
					watched = names[r.IntN(n)]
				}
				if got, want := firstAfterLocked(st, 1, node, watched), firstAfterScan(st, 1, node, watched); got != want {
					t.Fatalf("seed %d step %d: firstAfter(%s, watched %s) = %v, the scan says %v (gone %v, drops %d)",
						seed, step, node, watched, got, want, len(st.gone), st.goneDrops)
				}
			}
		}
	}
}
