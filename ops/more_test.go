package ops_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// TestLockLostDuringDelivery: when the worker's grant ends mid-delivery
// (here: someone deletes privateLock), the request to the app is cancelled
// and the attempt is a retryable LockLost failure; the next attempt
// delivers the op.
func TestLockLostDuringDelivery(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true})
	inside := make(chan struct{}, 1)
	var cancelled atomic.Bool
	e.app.SetRespond(func(ctx context.Context, d opstest.Delivery) int {
		if d.Attempt > 1 {
			return http.StatusOK
		}
		inside <- struct{}{}
		select {
		case <-ctx.Done():
			cancelled.Store(true)
		case <-time.After(20 * time.Second):
		}
		return http.StatusOK
	})
	id := e.submit(`{"id":"lost-1","object":"lost-obj"}`)
	select {
	case <-inside:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery")
	}
	conn := testenv.Client(t, zkServer.Servers())
	if err := conn.Delete(e.cfg.LockRoot+"/lost-obj/privateLock", -1); err != nil {
		t.Fatalf("deleting privateLock: %v", err)
	}
	op := e.waitState(id, api.OpDone, 30*time.Second)
	if op.Attempts != 1 {
		t.Errorf("attempts = %d, want 1 failed (lock lost)", op.Attempts)
	}
	evs := e.waitEvents(id, 2)
	if len(evs) != 2 || evs[0].Class != ops.NameLockLost || evs[0].Outcome != "retrying" || evs[1].Outcome != "done" {
		t.Errorf("attempts = %+v, want LockLost then done", evs)
	}
	waitFor(t, 10*time.Second, "the app saw the request cancelled", cancelled.Load)
}

// TestReloadLimits: queue.max.ops applies live (503 QueueFull beyond it);
// an invalid reload changes nothing.
func TestReloadLimits(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true})
	hold := make(chan struct{})
	e.app.SetRespond(func(ctx context.Context, _ opstest.Delivery) int {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return http.StatusOK
	})
	cfg := e.cfg
	cfg.QueueMaxOps = 2
	if err := e.d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.RetryMultiplier = 0.5
	bad.QueueMaxOps = 100
	if err := e.d.Reload(bad); err == nil {
		t.Error("Reload accepted retry.multiplier 0.5")
	}
	e.submit(`{"id":"full-1","object":"f"}`)
	e.submit(`{"id":"full-2","object":"f"}`)
	var ae api.Error
	decodeStrict(t, e.mustCall(503, "POST", "/v1/ops", `{"id":"full-3","object":"f"}`), &ae)
	if ae.Kind != api.QueueFull {
		t.Errorf("third op = %+v, want QueueFull", ae)
	}
	close(hold)
	e.waitState("full-2", api.OpDone, 20*time.Second)
	e.submit(`{"id":"full-3","object":"f"}`)
	e.waitState("full-3", api.OpDone, 20*time.Second)
}

// BenchmarkDLQBacklog measures how fast the dispatcher publishes a backlog
// of dlq_pending ops (one object each) once Kafka is reachable: a first
// sidecar dead-letters b.N ops with Kafka down; a second one on the same
// queue dir publishes them.
func BenchmarkDLQBacklog(b *testing.B) {
	dir := b.TempDir()
	refuse := func(context.Context, opstest.Delivery) int { return http.StatusBadRequest }
	workers := func(c *props.Config) { c.QueueWorkers = 8 }
	e1 := newEnv(b, envOptions{noKafka: true, queueDir: dir, config: workers})
	e1.app.SetRespond(refuse)
	for i := range b.N {
		e1.submit(`{"object":"obj-` + strconv.Itoa(i) + `","payload":{"i":` + strconv.Itoa(i) + `}}`)
	}
	waitFor(b, 5*time.Minute, "all dlq_pending", func() bool { return e1.metric("baton_dlq_pending", nil) == float64(b.N) })
	e1.stop()

	b.ResetTimer()
	start := time.Now()
	e2 := newEnv(b, envOptions{queueDir: dir, noWait: true, config: workers})
	waitFor(b, 5*time.Minute, "all published", func() bool {
		return e2.metric("baton_dlq_published_total", nil) == float64(b.N)
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "letters/s")
}
