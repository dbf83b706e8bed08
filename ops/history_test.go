package ops_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
)

// After a dead-letter and a replay, GET /v1/ops/{id} still shows the
// earlier attempts (time, outcome, error class), the replay, and the
// attempt that succeeded; done clears last_error.
func TestHistoryOverHTTP(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *props.Config) { c.RetryCount = 1 }})
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusServiceUnavailable })
	id := e.submit(`{"id":"hist-1","object":"h"}`)
	op := e.waitState(id, api.OpDeadLettered, 20*time.Second)
	if op.LastError == "" || op.ErrorClass != "HTTP503" || op.Attempts != 2 {
		t.Errorf("dead-lettered op = %+v, want 2 attempts, HTTP503", op)
	}
	e.app.SetRespond(nil)
	e.mustCall(202, "POST", "/v1/ops/"+id+"/replay", "")
	op = e.waitState(id, api.OpDone, 20*time.Second)
	var got []string
	for _, ev := range op.History {
		got = append(got, ev.Outcome+"/"+ev.ErrorClass)
		if ev.At.IsZero() {
			t.Errorf("history entry %+v without a time", ev)
		}
	}
	if want := "retrying/HTTP503 dlq_pending/HTTP503 replayed/ done/"; strings.Join(got, " ") != want {
		t.Errorf("history %q, want %q", strings.Join(got, " "), want)
	}
	if op.LastError != "" || op.ErrorClass != "" || op.Replays != 1 || op.Attempts != 0 {
		t.Errorf("done op = %+v; want last_error and error_class cleared, replays 1", op)
	}
}

// GET /v1/ops lists ops with state and object filters and cursor paging; a
// bad parameter is a 400 naming it; other methods than GET and POST are 405.
func TestListOps(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true})
	e.app.SetRespond(func(ctx context.Context, d opstest.Delivery) int {
		if d.Object == "stuck" {
			<-ctx.Done() // held running until the test ends
		}
		return 200
	})
	for i := range 5 {
		e.submit(fmt.Sprintf(`{"id":"l-%d","object":"o%d"}`, i, i%2))
	}
	e.submit(`{"id":"s-1","object":"stuck"}`)
	for i := range 5 {
		e.waitState(fmt.Sprintf("l-%d", i), api.OpDone, 20*time.Second)
	}
	e.waitState("s-1", api.OpRunning, 20*time.Second)
	list := func(q string) (ids string, next string) {
		t.Helper()
		var l api.OpList
		decodeStrict(t, e.mustCall(200, "GET", "/v1/ops"+q, ""), &l)
		var s []string
		for _, op := range l.Ops {
			s = append(s, op.ID+":"+op.State)
		}
		return strings.Join(s, " "), l.Next
	}
	if ids, next := list(""); ids != "l-0:done l-1:done l-2:done l-3:done l-4:done s-1:running" || next != "" {
		t.Errorf("GET /v1/ops = %q next %q", ids, next)
	}
	ids, next := list("?limit=2")
	ids2, next2 := list("?limit=2&after=" + next)
	if ids != "l-0:done l-1:done" || ids2 != "l-2:done l-3:done" || next2 != "l-3" {
		t.Errorf("pages %q (next %q), %q (next %q)", ids, next, ids2, next2)
	}
	if ids, _ := list("?state=running"); ids != "s-1:running" {
		t.Errorf("state=running: %q", ids)
	}
	if ids, _ := list("?object=o1&state=done"); ids != "l-1:done l-3:done" {
		t.Errorf("object=o1: %q", ids)
	}
	for _, tc := range []struct{ q, field string }{
		{"?state=finished", "state"},
		{"?limit=0", "limit"},
		{"?limit=1001", "limit"},
		{"?limit=x", "limit"},
		{"?after=a%20b", "after"},
		{"?object=a%01", "object"},
		{"?sort=id", "sort"},
		{"?state=done&state=queued", "state"},
	} {
		var ae api.Error
		decodeStrict(t, e.mustCall(400, "GET", "/v1/ops"+tc.q, ""), &ae)
		if ae.Kind != api.BadRequest || ae.Field != tc.field {
			t.Errorf("GET /v1/ops%s = %+v, want 400 naming %s", tc.q, ae, tc.field)
		}
	}
	var ae api.Error
	decodeStrict(t, e.mustCall(405, "DELETE", "/v1/ops", ""), &ae)
}
