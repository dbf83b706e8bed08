package sidecar_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// Review of 38b12b5 (lock/session.go: the monitor is no longer woken by the
// base moving, nor by a grant while it is armed) at the sidecar's boundary:
// after acquire/release cycles through the sidecar (the monitor armed,
// re-armed by its own timer only), a lease held when ZooKeeper goes silent
// must be reported lost no later than the latest valid_until the sidecar
// told for it. The sidecar declares a tickTime of 2 s (the server's is
// 500 ms; a longer one only makes the engine count validity more
// cautiously), so that the deadline comes before go-zookeeper's own
// disconnect (2/3 of the 4 s session timeout with no answer), which would
// wake the monitor whatever it waits for.
func TestReviewMonLeaseLostByValidUntil(t *testing.T) {
	root := testRoot(t)
	cfg, p := proxiedConfig(t, root, "sc-mon")
	cfg.ZKTickTime = 2 * time.Second
	a := start(t, cfg)
	defer func() { p.Heal(); p.ResetConnections() }()

	cycles := 0
	for start := time.Now(); time.Since(start) < 5*time.Second; cycles++ {
		a.release(a.acquire("mon-cycle", `{}`).LeaseID)
	}
	l := a.acquire("mon-held", `{"lease_ms":60000}`)

	// Follow the lease as a client polling it: the latest valid_until told
	// while held (or suspect), and when it is first answered as ended by
	// the session's loss (410, or lost with that reason). A view of a lease
	// whose grant is past its deadline but not yet failed by the monitor
	// said lost with another reason (lostReason(nil): "lock node deleted")
	// until the view named the session for it: counted, and an error.
	type seen struct {
		told, lostAt time.Time
		lost         api.Lease
		early        int // lost with another reason before that
		err          string
	}
	done := make(chan seen, 1)
	go func() {
		var v seen
		defer func() { done <- v }()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			st, raw := a.call("GET", "/v1/leases/"+l.LeaseID, "")
			now := time.Now()
			switch st {
			case 200:
				var r api.Lease
				if err := json.Unmarshal(raw, &r); err != nil {
					v.err = err.Error()
					return
				}
				switch {
				case r.State == api.StateLost && r.Reason == api.ReasonSessionLost:
					v.lostAt, v.lost = now, r
					return
				case r.State == api.StateLost:
					v.early++
				case r.ValidUntil.After(v.told):
					v.told = r.ValidUntil.Time
				}
			case 410:
				var e api.Error
				if json.Unmarshal(raw, &e) != nil || e.Reason != api.ReasonSessionLost {
					v.err = "410 " + string(raw)
				}
				v.lostAt = now
				return
			default:
				v.err = fmt.Sprintf("%d %s", st, raw)
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
		v.err = "never reported lost"
	}()
	time.Sleep(50 * time.Millisecond)
	p.BlackHole()
	cut := time.Now()
	v := <-done
	if v.err != "" {
		t.Fatalf("following the lease: %s", v.err)
	}
	t.Logf("%d cycles; after the cut: told valid until cut+%v, reported lost (session) at cut+%v (%v after); %d views said lost with another reason first",
		cycles, v.told.Sub(cut).Round(time.Millisecond), v.lostAt.Sub(cut).Round(time.Millisecond), v.lostAt.Sub(v.told).Round(time.Millisecond), v.early)
	if v.early > 0 {
		t.Errorf("%d views said the lease was lost for another reason than the session's", v.early)
	}
	// an HTTP round trip after the engine's fail; a monitor not armed is
	// late by ~0.8 s (go-zookeeper's disconnect wakes it)
	if late := v.lostAt.Sub(v.told); late > 400*time.Millisecond {
		t.Errorf("the lease was reported lost %v after the latest valid_until told for it", late)
	}
}
