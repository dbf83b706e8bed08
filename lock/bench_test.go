package lock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// reportLatency adds p50/p99 (µs) of the samples to the benchmark.
func reportLatency(b *testing.B, samples []time.Duration, unit string) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	q := func(p float64) float64 {
		return float64(samples[min(len(samples)-1, int(p*float64(len(samples))))].Microseconds())
	}
	b.ReportMetric(q(0.50), "p50-µs/"+unit)
	b.ReportMetric(q(0.99), "p99-µs/"+unit)
}

func benchRoot(b *testing.B) string {
	return fmt.Sprintf("/bench/%s-%d", nonWord.ReplaceAllString(b.Name(), "_"), time.Now().UnixNano())
}

// BenchmarkUncontended is one acquire+release cycle on one object, alone
// (the fast path after the first cycle).
func BenchmarkUncontended(b *testing.B) {
	for _, mode := range []struct {
		name string
		slow bool
	}{{"fast", false}, {"slow", true}} {
		b.Run(mode.name, func(b *testing.B) {
			e := newEngine(b, zkServer.Servers(), benchRoot(b), func(o *lock.Options) { o.DisableFastPath = mode.slow; o.SessionTimeout = 15 * time.Second })
			ctx := context.Background()
			var samples []time.Duration
			for b.Loop() {
				t0 := time.Now()
				g, err := e.Acquire(ctx, "bench", lock.Foreground, lock.AcquireOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Release(ctx); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(t0))
			}
			reportLatency(b, samples, "cycle")
		})
	}
}

// BenchmarkRawCreateDelete is the floor: create an ephemeral-sequential node
// and delete it, two round trips, no lock.
func BenchmarkRawCreateDelete(b *testing.B) {
	conn := rawConn(b, zkServer.Servers())
	root := benchRoot(b)
	if _, err := conn.Create("/bench", nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		b.Fatal(err)
	}
	if _, err := conn.Create(root, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := conn.Create(root+"/A-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			b.Fatal(err)
		}
		if err := conn.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
	}
	reportLatency(b, samples, "cycle")
	_ = conn.Delete(root, -1)
}

// contend runs b.N acquisitions over engines (own sessions) picking objects
// from pick, and reports acquisitions/s and the acquire wait.
func contend(b *testing.B, engines int, pick func(i int64) string) {
	var es []*lock.Engine
	root := benchRoot(b)
	for range engines {
		es = append(es, newEngine(b, zkServer.Servers(), root, func(o *lock.Options) { o.SessionTimeout = 15 * time.Second }))
	}
	var tickets atomic.Int64
	var mu sync.Mutex
	var samples []time.Duration
	var overlaps atomic.Int64
	inside := map[string]*atomic.Int32{}
	for i := range int64(b.N) {
		if _, ok := inside[pick(i)]; !ok {
			inside[pick(i)] = &atomic.Int32{}
		}
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Go(func() {
			var local []time.Duration
			for {
				n := tickets.Add(1) - 1
				if n >= int64(b.N) {
					break
				}
				obj := pick(n)
				t0 := time.Now()
				g, err := e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				local = append(local, time.Since(t0))
				if inside[obj].Add(1) != 1 {
					overlaps.Add(1)
				}
				inside[obj].Add(-1)
				if err := g.Release(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
			mu.Lock()
			samples = append(samples, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "acq/s")
	b.ReportMetric(float64(overlaps.Load()), "overlaps")
	reportLatency(b, samples, "wait")
}

// BenchmarkContention8 is 8 engines on one object.
func BenchmarkContention8(b *testing.B) {
	contend(b, 8, func(int64) string { return "hot" })
}

// BenchmarkManyObjects is 8 engines over 1,000 objects.
func BenchmarkManyObjects(b *testing.B) {
	contend(b, 8, func(i int64) string { return fmt.Sprintf("obj-%d", (i*7919)%1000) })
}
