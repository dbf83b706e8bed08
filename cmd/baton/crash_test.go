package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/ops/opstest"
)

// testKill9Ops: kill -9 of `baton serve` in the middle of 1,000 accepted ops
// with a slow handler; after a restart on the same queue.dir every op is
// eventually done, each delivered at least once. Duplicates (deliveries
// whose answer the crash cut off) are counted and reported.
func testKill9Ops(t *testing.T, e *env) {
	const n = 1000
	app := opstest.StartT(t, opstest.Options{Respond: func(ctx context.Context, d opstest.Delivery) int {
		select { // a slow handler: many deliveries are in flight at the kill
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
		return 200
	}})
	extra := map[string]string{
		"sidecar.app.url":                   app.URL(),
		"queue.workers":                     "8",
		"zookeeper.background.task.timeout": "10000",
		"retry.initial.interval":            "100",
		"elastic.request.retry.count":       "20",
	}
	s := e.startSidecar(t, "crash", extra)
	c := client.New(s.socket)
	defer c.Close()

	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				ids[i] = fmt.Sprintf("op-%04d", i)
				ack, err := c.Submit(context.Background(), api.OpRequest{
					ID: ids[i], Object: fmt.Sprintf("article-%d", i%25), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
				})
				if err != nil {
					errs <- fmt.Errorf("submit %s: %w", ids[i], err)
					return
				}
				if ack.State != api.OpQueued && ack.State != api.OpRunning && ack.State != api.OpDone {
					errs <- fmt.Errorf("submit %s: state %s", ids[i], ack.State)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// every op is accepted (fsynced); kill while about a third are delivered
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := app.Wait(ctx, func(ds []opstest.Delivery) bool { return len(ds) >= n/3 }); err != nil {
		t.Fatalf("deliveries before the kill: %v", err)
	}
	before := len(app.Succeeded())
	s.kill9(t)
	t.Logf("killed the sidecar with %d of %d ops answered 2xx", before, n)
	if before >= n {
		t.Fatal("every op was done before the kill: the test did not exercise the crash")
	}

	s2 := e.startSidecar(t, "crash", extra) // same queue.dir (the kernel freed its lock)
	defer s2.stop(t)
	c2 := client.New(s2.socket)
	defer c2.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel2()
	start := time.Now()
	if err := app.WaitSucceeded(ctx2, ids...); err != nil {
		t.Fatalf("after the restart not every op was delivered: %v (%d of %d)", err, len(app.Succeeded()), n)
	}
	for _, id := range ids {
		op, err := c2.Op(context.Background(), id)
		if err != nil || op.State != api.OpDone {
			t.Fatalf("op %s after the restart: %+v, %v (want done)", id, op, err)
		}
	}
	t.Logf("all %d ops done %v after the restart; %d delivered more than once (at-least-once across kill -9)",
		n, time.Since(start).Round(time.Millisecond), app.Duplicates())
}
