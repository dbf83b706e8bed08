package queue_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/queue"
)

func outcomes(op queue.Op) string {
	var s []string
	for _, e := range op.History {
		s = append(s, e.Outcome+"/"+e.ErrorClass)
	}
	return strings.Join(s, " ")
}

// An op keeps the history of its attempts (time, outcome, error class)
// across a replay, survives a reopen, and done clears last_error.
func TestHistoryAcrossReplay(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s, err := queue.Open(dir, queue.Options{Now: clk.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	submit(t, s, "h1", "obj")
	claim(t, s, clk.Now())
	t1 := clk.Add(time.Second)
	if err := s.Retry(ctx, "h1", "HTTP503", "app said 503", clk.Now()); err != nil {
		t.Fatal(err)
	}
	claim(t, s, clk.Now())
	t2 := clk.Add(time.Second)
	if err := s.DeadLetterPending(ctx, "h1", "HTTP400", "app said 400"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLettered(ctx, "h1", ""); err != nil {
		t.Fatal(err)
	}
	t3 := clk.Add(time.Second)
	op, err := s.Replay(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if op.Attempts != 0 || op.Replays != 1 || outcomes(op) != "retrying/HTTP503 dlq_pending/HTTP400 replayed/" {
		t.Errorf("after replay: attempts %d, replays %d, history %q", op.Attempts, op.Replays, outcomes(op))
	}
	claim(t, s, clk.Now())
	t4 := clk.Add(time.Second)
	if err := s.Retry(ctx, "h1", "Timeout", "slow", clk.Now()); err != nil {
		t.Fatal(err)
	}
	claim(t, s, clk.Now())
	t5 := clk.Add(time.Second)
	if err := s.Done(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, queue.Options{})
	op = get(t, s, "h1")
	if op.State != queue.Done || op.LastError != "" || op.ErrorClass != "" {
		t.Errorf("done op: state %s, last_error %q, error_class %q; want done with both cleared", op.State, op.LastError, op.ErrorClass)
	}
	if got, want := outcomes(op), "retrying/HTTP503 dlq_pending/HTTP400 replayed/ retrying/Timeout done/"; got != want {
		t.Errorf("history %q, want %q", got, want)
	}
	for i, at := range []time.Time{t1, t2, t3, t4, t5} {
		if i < len(op.History) && !op.History[i].At.Equal(at.Truncate(time.Millisecond)) {
			t.Errorf("history[%d].At = %v, want %v", i, op.History[i].At, at)
		}
	}
	if len(op.History) > 0 && op.History[0].Error != "app said 503" {
		t.Errorf("history[0].Error = %q", op.History[0].Error)
	}
}

// The history is bounded: the oldest entries go, and are counted.
func TestHistoryBounded(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now})
	submit(t, s, "b1", "obj")
	n := queue.MaxHistory + 7
	for i := range n {
		claim(t, s, clk.Now())
		clk.Add(time.Second)
		if err := s.Retry(t.Context(), "b1", "E", fmt.Sprintf("e%d %s", i, strings.Repeat("x", 1000)), clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	op := get(t, s, "b1")
	if len(op.History) != queue.MaxHistory || op.HistoryDropped != 7 || op.Attempts != n {
		t.Fatalf("history %d entries, dropped %d, attempts %d", len(op.History), op.HistoryDropped, op.Attempts)
	}
	if e := op.History[0].Error; !strings.HasPrefix(e, "e7 ") || len(e) != queue.MaxEventErrorBytes {
		t.Errorf("oldest kept entry's error = %.20q (%d bytes), want e7 … cut at %d", e, len(e), queue.MaxEventErrorBytes)
	}
}

func TestList(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now})
	for i := range 7 {
		submit(t, s, fmt.Sprintf("op-%d", i), fmt.Sprintf("obj-%d", i%2))
	}
	claim(t, s, clk.Now()) // op-0 running
	ids := func(ops []queue.Op) string {
		var s []string
		for _, op := range ops {
			s = append(s, op.ID)
		}
		return strings.Join(s, " ")
	}
	var pages []string
	after := ""
	for {
		ops, next, err := s.List(queue.ListOptions{Limit: 3, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, ids(ops))
		if next == "" {
			break
		}
		after = next
	}
	if got, want := strings.Join(pages, " | "), "op-0 op-1 op-2 | op-3 op-4 op-5 | op-6"; got != want {
		t.Errorf("pages %q, want %q", got, want)
	}
	for _, tc := range []struct {
		opts queue.ListOptions
		want string
	}{
		{queue.ListOptions{Object: "obj-1"}, "op-1 op-3 op-5"},
		{queue.ListOptions{State: queue.Running}, "op-0"},
		{queue.ListOptions{State: queue.Queued, Object: "obj-0"}, "op-2 op-4 op-6"},
		{queue.ListOptions{State: queue.Queued, Object: "obj-0", After: "op-2", Limit: 1}, "op-4"},
		{queue.ListOptions{State: queue.Done}, ""},
		{queue.ListOptions{After: "op-6"}, ""},
	} {
		ops, _, err := s.List(tc.opts)
		if err != nil || ids(ops) != tc.want {
			t.Errorf("List(%+v) = %q, %v; want %q", tc.opts, ids(ops), err, tc.want)
		}
		for _, op := range ops {
			if op.Payload != nil {
				t.Errorf("List returns the payload of %s", op.ID)
			}
		}
	}
	// Exactly a page left: no next cursor.
	if _, next, err := s.List(queue.ListOptions{Limit: 7}); err != nil || next != "" {
		t.Errorf("List(limit 7 of 7) next = %q, %v; want none", next, err)
	}
	for _, tc := range []struct {
		opts  queue.ListOptions
		field string
	}{
		{queue.ListOptions{State: "finished"}, "state"},
		{queue.ListOptions{Limit: -1}, "limit"},
		{queue.ListOptions{Limit: queue.MaxListLimit + 1}, "limit"},
		{queue.ListOptions{After: "a b"}, "after"},
		{queue.ListOptions{Object: "a\x01"}, "object"},
	} {
		_, _, err := s.List(tc.opts)
		fe, ok := errors.AsType[*queue.FieldError](err)
		if !ok || fe.Field != tc.field {
			t.Errorf("List(%+v) = %v, want a FieldError naming %s", tc.opts, err, tc.field)
		}
	}
}

// BenchmarkListSelective: a filter no op matches reads every record (the
// README's cost of a selective GET /v1/ops).
func BenchmarkListSelective(b *testing.B) {
	s := open(b, b.TempDir(), queue.Options{MaxOps: 20000})
	for i := range 10000 {
		submit(b, s, fmt.Sprintf("op-%05d", i), fmt.Sprintf("obj-%d", i%100))
	}
	b.ResetTimer()
	for b.Loop() {
		ops, _, err := s.List(queue.ListOptions{State: queue.Done})
		if err != nil || len(ops) != 0 {
			b.Fatal(err, len(ops))
		}
	}
}
