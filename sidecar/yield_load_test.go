package sidecar_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// TestYieldUnderLoad: the overlap/fencing checker under preemption,
// revocation and re-entry, with faults: on two sidecars, eight holders take
// three objects over and over — preemptible background holders (some stuck:
// they ignore being preempted and keep renewing), forceful preempting
// foreground ones, holders that re-enter — while an operator revokes a
// random object every 150 ms through a random sidecar. Each grant's window
// runs from its acquired_at to the earliest of its release and the latest
// valid_until it was ever told; per object, in token order, no window may
// begin before the previous one ended.
func TestYieldUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "sc-a"))
	b := start(t, testConfig(t, root, "sc-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	objs := []string{"o1", "o2", "o3"}

	type window struct {
		obj        string
		token      int64
		start, end time.Time
		how        string
	}
	var (
		mu      sync.Mutex
		windows []window
		counts  = map[string]int{}
	)
	note := func(w window) {
		mu.Lock()
		windows = append(windows, w)
		counts[w.how]++
		mu.Unlock()
	}
	stop := make(chan struct{})
	var revokes atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		s := []*sc{a, b}[i%2]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 42))
			for {
				select {
				case <-stop:
					return
				default:
				}
				obj := objs[r.IntN(len(objs))]
				preempter := i%4 == 0
				stuck := !preempter && r.IntN(4) == 0
				body := `{"type":"background","preemptible":true,"cleanup_ms":300,"wait_ms":5000,"lease_ms":60000}`
				if preempter {
					body = `{"preempt":true,"forceful":true,"wait_ms":5000,"lease_ms":60000}`
				}
				st, raw := s.call("POST", "/v1/locks/"+obj+"/acquire", body)
				if st == 423 {
					continue
				}
				if st != 200 {
					t.Errorf("acquire: %d %s", st, raw)
					return
				}
				var l api.Lease
				_ = json.Unmarshal(raw, &l)
				told := l.ValidUntil.Time
				w := window{obj: obj, token: l.Token, start: l.AcquiredAt.Time}
				if r.IntN(3) == 0 { // re-enter and leave once
					st, raw := s.call("POST", "/v1/locks/"+obj+"/acquire", `{"lease_id":"`+l.LeaseID+`"}`)
					if st == 200 {
						var l2 api.Lease
						_ = json.Unmarshal(raw, &l2)
						if l2.Token != l.Token || l2.Holds != 2 {
							t.Errorf("re-entry = %+v, want token %d holds 2", l2, l.Token)
						}
						if l2.ValidUntil.After(told) {
							told = l2.ValidUntil.Time
						}
						s.call("DELETE", "/v1/leases/"+l.LeaseID, "")
					}
				}
				work := time.Duration(50+r.IntN(350)) * time.Millisecond
				if stuck {
					work = 1500 * time.Millisecond
				}
				deadline := time.Now().Add(work)
				lost := false
				for time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
					st, raw := s.call("POST", "/v1/leases/"+l.LeaseID+"/renew", "")
					if st != 200 {
						lost = true
						break
					}
					var v api.Lease
					_ = json.Unmarshal(raw, &v)
					if v.ValidUntil.After(told) {
						told = v.ValidUntil.Time
					}
					if v.State == api.StatePreempted && !stuck {
						break // roll back and yield
					}
				}
				if lost {
					w.end, w.how = told, "lost"
				} else {
					w.end, w.how = time.Now(), "released"
					if told.Before(w.end) {
						w.end = told
					}
					if st, _ := s.call("DELETE", "/v1/leases/"+l.LeaseID, ""); st != 200 {
						w.how = "lost at release"
					}
				}
				note(w)
			}
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(7, 7))
		tk := time.NewTicker(150 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			s := []*sc{a, b}[r.IntN(2)]
			if st, _ := s.call("POST", "/v1/locks/"+objs[r.IntN(len(objs))]+"/revoke", `{"reason":"load test"}`); st == 202 {
				revokes.Add(1)
			}
		}
	})
	time.Sleep(12 * time.Second)
	close(stop)
	wg.Wait()

	overlaps := 0
	for _, obj := range objs {
		var ws []window
		for _, w := range windows {
			if w.obj == obj {
				ws = append(ws, w)
			}
		}
		slices.SortFunc(ws, func(x, y window) int { return int(x.token - y.token) })
		for k := 1; k < len(ws); k++ {
			// api times are truncated to the millisecond
			if ws[k].start.Before(ws[k-1].end.Add(-time.Millisecond)) {
				overlaps++
				t.Errorf("%s: grant %d began %v before grant %d's window ended (%s)", obj, ws[k].token,
					ws[k-1].end.Sub(ws[k].start), ws[k-1].token, ws[k-1].how)
			}
			if ws[k].token == ws[k-1].token {
				t.Errorf("%s: token %d granted twice", obj, ws[k].token)
			}
		}
	}
	t.Logf("%d grants (%v), %d revocations delivered, %d overlaps", len(windows), counts, revokes.Load(), overlaps)
	if counts["lost"] == 0 || counts["released"] == 0 {
		t.Errorf("the load did not exercise both ends: %v", counts)
	}
}
