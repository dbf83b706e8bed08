package sidecar_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// BenchmarkCycle measures one uncontended acquire+release through the
// socket (HTTP over the unix socket, lease bookkeeping) and through the
// engine directly, on the same engine; the difference is the sidecar's
// overhead. p50/p99 are reported in µs.
func BenchmarkCycle(b *testing.B) {
	s := start(b, testConfig(b, testRoot(b), "sc-bench"))
	report := func(b *testing.B, d []time.Duration) {
		slices.Sort(d)
		if len(d) == 0 {
			return
		}
		b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("engine", func(b *testing.B) {
		e := s.srv.Engine()
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			g, err := e.Acquire(context.Background(), "bench-engine", lock.Foreground, lock.AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Release(context.Background()); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		report(b, d)
	})
	b.Run("socket", func(b *testing.B) {
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			st, raw := s.call("POST", "/v1/locks/bench-socket/acquire", `{"wait_ms":10000}`)
			if st != 200 {
				b.Fatalf("acquire: %d %s", st, raw)
			}
			var l api.Lease
			if err := json.Unmarshal(raw, &l); err != nil {
				b.Fatal(err)
			}
			if st, raw := s.call("DELETE", "/v1/leases/"+l.LeaseID, ""); st != 200 {
				b.Fatalf("release: %d %s", st, raw)
			}
			d = append(d, time.Since(t0))
		}
		report(b, d)
	})
}
