package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/batonhq/baton/queue"
)

func TestSubmitIsDurable(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s, err := queue.Open(dir, queue.Options{Now: clk.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var want []queue.Op
	for i, obj := range []string{"article-1", "article-1", "ü/..", "article-2"} {
		clk.Add(1500 * time.Microsecond)
		want = append(want, submit(t, s, fmt.Sprintf("op-%d", i), obj))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, queue.Options{})
	wantSeq := []uint64{1, 2, 1, 1}
	for i, w := range want {
		got := get(t, s, w.ID)
		if got.State != queue.Queued || got.Seq != wantSeq[i] || string(got.Payload) != string(w.Payload) ||
			!got.AcceptedAt.Equal(w.AcceptedAt) || got.Object != w.Object || got.Info != w.Info || got.BodyHash != w.BodyHash {
			t.Errorf("after reopen Get(%s) = %+v, want %+v with seq %d", w.ID, got, w, wantSeq[i])
		}
		if got.AcceptedAt.Location() != time.UTC || got.AcceptedAt.Nanosecond()%int(time.Millisecond) != 0 {
			t.Errorf("AcceptedAt = %v, want UTC with millisecond precision", got.AcceptedAt)
		}
	}
}

func TestSubmitIdempotency(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	ctx := t.Context()
	req := queue.SubmitRequest{ID: "order-7", Object: "article-42", Info: "reindex", Payload: json.RawMessage(`{"a":1,"b":[true,"x<y"]}`)}
	first, created, err := s.Submit(ctx, req)
	if err != nil || !created {
		t.Fatalf("first Submit = %v, created %v", err, created)
	}
	same := []struct {
		name    string
		payload string
	}{
		{"identical", `{"a":1,"b":[true,"x<y"]}`},
		{"whitespace and key order", "{ \"b\" : [ true , \"x\\u003cy\" ] ,\n \"a\": 1 }"},
	}
	for _, tt := range same {
		r := req
		r.Payload = json.RawMessage(tt.payload)
		got, created, err := s.Submit(ctx, r)
		if err != nil || created || got.Seq != first.Seq || got.State != queue.Queued || !got.AcceptedAt.Equal(first.AcceptedAt) {
			t.Errorf("%s: Submit again = %+v, created %v, %v; want the existing op, created false", tt.name, got, created, err)
		}
	}
	diff := map[string]func(*queue.SubmitRequest){
		"payload": func(r *queue.SubmitRequest) { r.Payload = json.RawMessage(`{"a":2,"b":[true,"x<y"]}`) },
		"number":  func(r *queue.SubmitRequest) { r.Payload = json.RawMessage(`{"a":1.0,"b":[true,"x<y"]}`) },
		"info":    func(r *queue.SubmitRequest) { r.Info = "other" },
		"object":  func(r *queue.SubmitRequest) { r.Object = "article-43" },
	}
	for name, edit := range diff {
		r := req
		edit(&r)
		if _, _, err := s.Submit(ctx, r); !errors.Is(err, queue.ErrConflict) {
			t.Errorf("Submit with a different %s = %v, want ErrConflict", name, err)
		}
	}
	// Still idempotent once finished.
	claim(t, s, time.Now())
	if err := s.Done(ctx, req.ID); err != nil {
		t.Fatal(err)
	}
	got, created, err := s.Submit(ctx, req)
	if err != nil || created || got.State != queue.Done {
		t.Errorf("Submit of a done op = %v/%v/%v, want it back as done, created false", got.State, created, err)
	}
	// Concurrent duplicates: exactly one is created.
	var wg sync.WaitGroup
	var createdN atomic.Int32
	for range 16 {
		wg.Go(func() {
			_, c, err := s.Submit(ctx, queue.SubmitRequest{ID: "dup", Object: "o"})
			if err != nil {
				t.Errorf("concurrent Submit = %v", err)
			}
			if c {
				createdN.Add(1)
			}
		})
	}
	wg.Wait()
	if n := createdN.Load(); n != 1 {
		t.Errorf("16 concurrent identical submits created %d ops, want 1", n)
	}
	if got := get(t, s, "dup"); got.Seq != 1 {
		t.Errorf("dup seq = %d, want 1 (no seq consumed by duplicates)", got.Seq)
	}
}

func TestSubmitValidation(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	big := `"` + strings.Repeat("x", queue.MaxPayloadBytes-2) + `"`
	tests := []struct {
		name      string
		req       queue.SubmitRequest
		wantField string // "" = accepted
	}{
		{"minimal", queue.SubmitRequest{ID: "a", Object: "o"}, ""},
		{"all id characters", queue.SubmitRequest{ID: "AZaz09._:-", Object: "o"}, ""},
		{"id of 128", queue.SubmitRequest{ID: strings.Repeat("i", 128), Object: "o"}, ""},
		{"payload of exactly 512 KiB", queue.SubmitRequest{ID: "big", Object: "o", Payload: json.RawMessage(big)}, ""},
		{"object of 256 bytes", queue.SubmitRequest{ID: "o256", Object: strings.Repeat("ü", 128)}, ""},
		{"no object", queue.SubmitRequest{ID: "b"}, "object"},
		{"payload over 512 KiB", queue.SubmitRequest{ID: "c", Object: "o", Payload: json.RawMessage(big + " ")}, "payload"},
		{"bad id characters", queue.SubmitRequest{ID: "a/b", Object: "o"}, "id"},
		{"id with space", queue.SubmitRequest{ID: "a b", Object: "o"}, "id"},
		{"non-ASCII id", queue.SubmitRequest{ID: "é", Object: "o"}, "id"},
		{"too long id", queue.SubmitRequest{ID: strings.Repeat("i", 129), Object: "o"}, "id"},
		{"object too long", queue.SubmitRequest{ID: "d", Object: strings.Repeat("o", 257)}, "object"},
		{"object with newline", queue.SubmitRequest{ID: "e", Object: "a\nb"}, "object"},
		{"object with DEL", queue.SubmitRequest{ID: "e", Object: "a\x7fb"}, "object"},
		{"object not UTF-8", queue.SubmitRequest{ID: "f", Object: "\xff"}, "object"},
		{"payload not JSON", queue.SubmitRequest{ID: "g", Object: "o", Payload: json.RawMessage(`{"a":`)}, "payload"},
		{"payload with trailing data", queue.SubmitRequest{ID: "h", Object: "o", Payload: json.RawMessage(`{} {}`)}, "payload"},
		{"info too long", queue.SubmitRequest{ID: "i", Object: "o", Info: strings.Repeat("x", queue.MaxInfoBytes+1)}, "info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.Submit(t.Context(), tt.req)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Submit = %v, want accepted", err)
				}
				return
			}
			fe, ok := errors.AsType[*queue.FieldError](err)
			if !ok || fe.Field != tt.wantField || !errors.Is(err, queue.ErrInvalid) {
				t.Fatalf("Submit = %v, want *FieldError for %q wrapping ErrInvalid", err, tt.wantField)
			}
			if _, err := s.Get(tt.req.ID); tt.req.ID != "" && !errors.Is(err, queue.ErrNotFound) {
				t.Errorf("a rejected op was stored: Get = %v", err)
			}
		})
	}
	// No id → a generated UUIDv7.
	op, created, err := s.Submit(t.Context(), queue.SubmitRequest{Object: "o"})
	if err != nil || !created {
		t.Fatal(err)
	}
	if u, err := uuid.Parse(op.ID); err != nil || u.Version() != 7 || !queue.ValidID(op.ID) {
		t.Errorf("generated id %q: %v, version %v; want a UUIDv7", op.ID, err, u.Version())
	}
	if string(op.Payload) != "null" {
		t.Errorf("absent payload stored as %q, want null", op.Payload)
	}
}

// Three ops of one object where the first fails twice: claims deliver
// a1, a1, a1, a2, a3, while another object's op is claimable meanwhile.
func TestPerObjectOrder(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now})
	ctx := t.Context()
	submit(t, s, "a1", "A")
	submit(t, s, "a2", "A")
	submit(t, s, "a3", "A")
	submit(t, s, "b1", "B")
	t0 := clk.Now()

	var delivered []string
	take := func(now time.Time) queue.Op {
		t.Helper()
		op := claim(t, s, now)
		delivered = append(delivered, op.ID)
		return op
	}
	none := func(now time.Time) {
		t.Helper()
		if op, err := s.Claim(ctx, now); !errors.Is(err, queue.ErrNoneRunnable) {
			t.Fatalf("Claim(%v) = %s, %v; want ErrNoneRunnable", now.Sub(t0), op.ID, err)
		}
	}

	a := take(t0)
	if a.ID != "a1" || a.State != queue.Running || a.Seq != 1 || !a.FirstAttemptAt.Equal(t0) || string(a.Payload) != `{"id":"a1"}` {
		t.Fatalf("first claim = %+v, want a1 running with payload", a)
	}
	if b := take(t0); b.ID != "b1" {
		t.Fatalf("claim while a1 runs = %s, want b1 (other objects are not held up)", b.ID)
	}
	none(t0) // a2 waits behind running a1
	if err := s.Retry(ctx, "a1", "HTTP503", "app answered HTTP 503", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "a1"); got.State != queue.Retrying || got.Attempts != 1 || got.ErrorClass != "HTTP503" || !got.NextAttemptAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("after Retry: %+v", got)
	}
	none(t0.Add(999 * time.Millisecond)) // a1 not due, a2 still behind it
	take(t0.Add(time.Second))
	if err := s.Retry(ctx, "a1", "Timeout", "deadline", t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Done(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	none(t0.Add(2 * time.Second))
	if a := take(t0.Add(3 * time.Second)); a.Attempts != 2 || !a.FirstAttemptAt.Equal(t0) {
		t.Fatalf("third claim of a1: attempts %d first %v, want 2, %v", a.Attempts, a.FirstAttemptAt, t0)
	}
	if err := s.Done(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	take(t0)
	if err := s.Done(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	take(t0)
	want := "a1 b1 a1 a1 a2 a3"
	if got := strings.Join(delivered, " "); got != want {
		t.Errorf("claims = %s, want %s", got, want)
	}
}

func TestDeadLetterFlow(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now})
	ctx := t.Context()
	for _, id := range []string{"a1", "a2"} {
		submit(t, s, id, "A")
	}
	submit(t, s, "z1", "Z")
	submit(t, s, "z2", "Z")
	now := clk.Now()
	// z1 and a1 fail for good; neither blocks its object.
	for _, id := range []string{"a1", "z1"} {
		op := claim(t, s, now)
		if op.ID != id {
			t.Fatalf("claimed %s, want %s", op.ID, id)
		}
	}
	if err := s.DeadLetterPending(ctx, "z1", "HTTP400", "bad request"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetterPending(ctx, "a1", "InstanceLockException", "not granted"); err != nil {
		t.Fatal(err)
	}
	if op := claim(t, s, now); op.ID != "a2" {
		t.Fatalf("after a1 → dlq_pending claimed %s, want a2", op.ID)
	}
	pend, err := s.ListDLQPending(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, op := range pend {
		ids = append(ids, op.ID)
		if op.State != queue.DLQPending || op.Attempts != 1 || len(op.Payload) == 0 || op.FirstAttemptAt.IsZero() {
			t.Errorf("ListDLQPending: %+v", op)
		}
	}
	slices.Sort(ids) // objects come in no particular order
	if got := strings.Join(ids, " "); got != "a1 z1" {
		t.Errorf("ListDLQPending = %s, want a1 and z1", got)
	}
	st := s.Stats()
	if st.ByState[queue.DLQPending] != 2 || st.ByState[queue.Running] != 1 || st.ByState[queue.Queued] != 1 || st.Unfinished != 4 {
		t.Errorf("Stats = %+v", st)
	}
	if err := s.DeadLettered(ctx, "a1", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLettered(ctx, "a1", ""); !errors.Is(err, queue.ErrState) {
		t.Errorf("DeadLettered twice = %v, want ErrState", err)
	}
	if got := get(t, s, "a1"); got.State != queue.DeadLettered || got.FinishedAt.IsZero() || got.ErrorClass != "InstanceLockException" {
		t.Errorf("a1 = %+v, want dead_lettered", got)
	}
	if pend, _ := s.ListDLQPending(ctx, 0); len(pend) != 1 || pend[0].ID != "z1" {
		t.Errorf("ListDLQPending after publishing a1 = %v, want [z1]", pend)
	}
	if st := s.Stats(); st.ByState[queue.DeadLettered] != 1 || st.Unfinished != 3 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestTransitionErrors(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	ctx := t.Context()
	submit(t, s, "q", "o")
	tests := map[string]func() error{
		"Done of queued":           func() error { return s.Done(ctx, "q") },
		"Retry of queued":          func() error { return s.Retry(ctx, "q", "X", "x", time.Now()) },
		"DeadLetterPending queued": func() error { return s.DeadLetterPending(ctx, "q", "X", "x") },
		"DeadLettered of queued":   func() error { return s.DeadLettered(ctx, "q", "") },
		"Requeue of queued":        func() error { return s.Requeue(ctx, "q") },
	}
	for name, f := range tests {
		err := f()
		se, ok := errors.AsType[*queue.StateError](err)
		if !ok || !errors.Is(err, queue.ErrState) || se.State != queue.Queued {
			t.Errorf("%s = %v, want *StateError (queued)", name, err)
		}
	}
	if err := s.Done(ctx, "nope"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Done(unknown) = %v, want ErrNotFound", err)
	}
	// Requeue gives a running op back without counting.
	claim(t, s, time.Now())
	if err := s.Requeue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if op := claim(t, s, time.Now()); op.ID != "q" || op.Attempts != 0 {
		t.Errorf("after Requeue claimed %s with %d attempts, want q with 0", op.ID, op.Attempts)
	}
}

func TestReplay(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now})
	ctx := t.Context()
	submit(t, s, "a1", "A")
	now := clk.Now()
	claim(t, s, now)
	if _, err := s.Replay(ctx, "a1"); !errors.Is(err, queue.ErrNotDeadLettered) {
		t.Errorf("Replay(running) = %v, want ErrNotDeadLettered", err)
	}
	if err := s.DeadLetterPending(ctx, "a1", "HTTP503", "busy"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Replay(ctx, "a1"); !errors.Is(err, queue.ErrNotDeadLettered) {
		t.Errorf("Replay(dlq_pending) = %v, want ErrNotDeadLettered", err)
	}
	if err := s.DeadLettered(ctx, "a1", ""); err != nil {
		t.Fatal(err)
	}
	submit(t, s, "a2", "A") // newer op of the same object, seq 2
	if _, err := s.Replay(ctx, "nope"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Replay(unknown) = %v, want ErrNotFound", err)
	}
	replayAt := clk.Add(time.Minute)
	op, err := s.Replay(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if op.State != queue.Queued || op.Seq != 3 || op.Attempts != 0 || op.LastError != "" || !op.FirstAttemptAt.IsZero() ||
		!op.FinishedAt.IsZero() || !op.AcceptedAt.Equal(replayAt) {
		t.Errorf("Replay = %+v, want queued, seq 3, attempts 0, accepted at %v", op, replayAt)
	}
	if _, err := s.Replay(ctx, "a1"); !errors.Is(err, queue.ErrNotDeadLettered) {
		t.Errorf("second Replay = %v, want ErrNotDeadLettered", err)
	}
	// The replayed op goes behind a2.
	if got := claim(t, s, replayAt); got.ID != "a2" {
		t.Fatalf("first claim after replay = %s, want a2", got.ID)
	}
	if _, err := s.Claim(ctx, replayAt); !errors.Is(err, queue.ErrNoneRunnable) {
		t.Fatalf("a1 must wait behind running a2: %v", err)
	}
	if err := s.Done(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, s, replayAt); got.ID != "a1" || got.Seq != 3 {
		t.Fatalf("claim = %s seq %d, want a1 seq 3", got.ID, got.Seq)
	}
	if st := s.Stats(); st.ByState[queue.DeadLettered] != 0 || st.ByState[queue.Running] != 1 {
		t.Errorf("Stats after replay = %+v", st.ByState)
	}
}

func TestQueueFull(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{MaxOps: 3})
	ctx := t.Context()
	for i := range 3 {
		submit(t, s, fmt.Sprint("op", i), "o")
	}
	if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: "op3", Object: "o"}); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("4th Submit = %v, want ErrQueueFull", err)
	}
	if _, err := s.Get("op3"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("refused op stored: %v", err)
	}
	// A known id is still answered while full.
	if op, created, err := s.Submit(ctx, queue.SubmitRequest{ID: "op0", Object: "o", Info: "info op0", Payload: json.RawMessage(`{"id":"op0"}`)}); err != nil || created || op.ID != "op0" {
		t.Errorf("resubmit while full = %v, %v", created, err)
	}
	// dlq_pending still counts; done does not.
	claim(t, s, time.Now())
	if err := s.DeadLetterPending(ctx, "op0", "HTTP400", "x"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: "op3", Object: "o"}); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("Submit with a dlq_pending op = %v, want ErrQueueFull", err)
	}
	claim(t, s, time.Now())
	if err := s.Done(ctx, "op1"); err != nil {
		t.Fatal(err)
	}
	submit(t, s, "op3", "o")
	if err := s.SetLimits(5, 0); err != nil {
		t.Fatal(err)
	}
	submit(t, s, "op4", "o")
	submit(t, s, "op5", "o")
	if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: "op6", Object: "o"}); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("Submit over the raised limit = %v, want ErrQueueFull", err)
	}
	if st := s.Stats(); st.Unfinished != 5 || st.MaxOps != 5 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestRetentionPurge(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	s := open(t, dir, queue.Options{Now: clk.Now, Retention: time.Hour, PurgeLimit: 2})
	ctx := t.Context()
	for i := range 4 {
		submit(t, s, fmt.Sprint("op", i), "o")
	}
	t0 := clk.Now()
	for i := range 3 {
		op := claim(t, s, t0)
		if i < 2 {
			if err := s.Done(ctx, op.ID); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := s.DeadLetterPending(ctx, op.ID, "HTTP400", "x"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeadLettered(ctx, op.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Purge(ctx, t0.Add(59*time.Minute)); err != nil || n != 0 {
		t.Fatalf("Purge before the retention = %d, %v; want 0", n, err)
	}
	if n, err := s.Purge(ctx, t0.Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2 (the limit)", n, err)
	}
	if n, err := s.Purge(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("second Purge = %d, %v; want 1", n, err)
	}
	for i := range 3 {
		if _, err := s.Get(fmt.Sprint("op", i)); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Get(op%d) after purge = %v, want ErrNotFound", i, err)
		}
	}
	if op := get(t, s, "op3"); op.State != queue.Queued {
		t.Errorf("unfinished op3 = %s after purge, want queued", op.State)
	}
	if st := s.Stats(); st.ByState[queue.Done] != 0 || st.ByState[queue.DeadLettered] != 0 {
		t.Errorf("Stats after purge = %v", st.ByState)
	}
	// Once purged, the id is new again; the object's seq is not reused.
	op := submit(t, s, "op0", "o")
	if op.Seq != 5 {
		t.Errorf("resubmitted op0 seq = %d, want 5", op.Seq)
	}
	// Retention can change live.
	if err := s.SetLimits(0, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	claim(t, s, t0)
	if err := s.Done(ctx, "op3"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Purge(ctx, t0.Add(time.Hour+time.Minute)); n != 0 {
		t.Errorf("Purge with a 2h retention after 1h = %d, want 0", n)
	}
	if n, _ := s.Purge(ctx, t0.Add(2*time.Hour)); n != 1 {
		t.Errorf("Purge with a 2h retention after 2h = %d, want 1", n)
	}
}

// 8 workers claim 500 ops of 25 objects concurrently: each op is claimed
// exactly once, and per object only one op runs at a time, in seq order.
func TestConcurrentClaims(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	const ops, objects, workers = 500, 25, 8
	for i := range ops {
		submit(t, s, fmt.Sprint("op", i), fmt.Sprint("obj", i%objects))
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		lastSeq = map[string]uint64{}
		inside  [objects]atomic.Int32
		total   atomic.Int32
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				op, err := s.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("Next = %v", err)
					}
					return
				}
				obj, _ := strconv.Atoi(strings.TrimPrefix(op.Object, "obj"))
				if n := inside[obj].Add(1); n != 1 {
					t.Errorf("%d ops of %s running at once", n, op.Object)
				}
				mu.Lock()
				claimed[op.ID]++
				if op.Seq != lastSeq[op.Object]+1 {
					t.Errorf("%s: claimed seq %d after %d", op.Object, op.Seq, lastSeq[op.Object])
				}
				lastSeq[op.Object] = op.Seq
				mu.Unlock()
				inside[obj].Add(-1)
				if err := s.Done(ctx, op.ID); err != nil {
					t.Errorf("Done(%s) = %v", op.ID, err)
				}
				if total.Add(1) == ops {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if len(claimed) != ops {
		t.Errorf("%d distinct ops claimed, want %d", len(claimed), ops)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("%s claimed %d times", id, n)
		}
	}
	if st := s.Stats(); st.ByState[queue.Done] != ops || st.Unfinished != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestNextWakes(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{})
	ctx := t.Context()
	got := make(chan queue.Op)
	errc := make(chan error, 1)
	next := func() {
		op, err := s.Next(ctx)
		if err != nil {
			errc <- err
			return
		}
		got <- op
	}
	// Wakes on submit.
	go next()
	submit(t, s, "w1", "o")
	select {
	case op := <-got:
		if op.ID != "w1" {
			t.Fatalf("Next = %s, want w1", op.ID)
		}
	case err := <-errc:
		t.Fatal(err)
	}
	// Wakes when a retrying op becomes due, not before.
	due := time.Now().Add(150 * time.Millisecond)
	if err := s.Retry(ctx, "w1", "Timeout", "slow", due); err != nil {
		t.Fatal(err)
	}
	go next()
	select {
	case op := <-got:
		if now := time.Now(); op.ID != "w1" || now.Before(due.Truncate(time.Millisecond)) {
			t.Fatalf("Next = %s at %v before due %v", op.ID, now, due)
		}
	case err := <-errc:
		t.Fatal(err)
	}
	// Cancellation and Close end a blocked Next.
	cctx, cancel := context.WithCancel(ctx)
	go func() { _, err := s.Next(cctx); errc <- err }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel = %v, want context.Canceled", err)
	}
	go func() { _, err := s.Next(ctx); errc <- err }()
	s.Close()
	if err := <-errc; !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Next after Close = %v, want ErrClosed", err)
	}
}

// A process that claimed ops is SIGKILLed: after reopening, those ops are
// queued again with their attempts unchanged.
func TestCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	s, err := queue.Open(dir, queue.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	submit(t, s, "a1", "A")
	submit(t, s, "b1", "B")
	submit(t, s, "b2", "B")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := startChild(t, "claim", dir) // claims a1 (after one failure) and b1
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	s = open(t, dir, queue.Options{})
	want := map[string]int{"a1": 1, "b1": 0, "b2": 0}
	for id, attempts := range want {
		op := get(t, s, id)
		if op.State != queue.Queued || op.Attempts != attempts {
			t.Errorf("after kill -9: %s is %s with %d attempts, want queued with %d", id, op.State, op.Attempts, attempts)
		}
		if (id != "b2") == op.FirstAttemptAt.IsZero() {
			t.Errorf("%s FirstAttemptAt = %v", id, op.FirstAttemptAt)
		}
	}
	// Order is kept: b1 before b2.
	var ids []string
	for range 2 {
		ids = append(ids, claim(t, s, time.Now()).ID)
	}
	if strings.Join(ids, " ") != "a1 b1" {
		t.Errorf("claims after recovery = %v, want a1 b1", ids)
	}
}

func TestDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	s, err := queue.Open(dir, queue.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Same process, second Store.
	_, err = queue.Open(dir, queue.Options{})
	if !errors.Is(err, queue.ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another sidecar") {
		t.Fatalf("second Open in-process = %v, want ErrLocked naming %s and another sidecar", err, dir)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Another process holds it.
	cmd := startChild(t, "hold", dir)
	_, err = queue.Open(dir, queue.Options{})
	if !errors.Is(err, queue.ErrLocked) || !strings.Contains(err.Error(), dir) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Fatalf("Open while another process holds %s = %v, want ErrLocked naming the dir and pid %d", dir, err, cmd.Process.Pid)
	}
	t.Logf("error seen by the second sidecar: %v", err)
	cmd.Process.Kill()
	cmd.Wait()
	open(t, dir, queue.Options{}) // the lock dies with its process
}

func TestOpenValidation(t *testing.T) {
	if _, err := queue.Open(t.TempDir(), queue.Options{MaxOps: -1}); err == nil || !strings.Contains(err.Error(), "MaxOps") {
		t.Errorf("Open with MaxOps -1 = %v, want an error naming MaxOps", err)
	}
	if _, err := queue.Open("", queue.Options{}); err == nil {
		t.Errorf("Open(\"\") succeeded")
	}
}

func TestStats(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now})
	first := clk.Now()
	submit(t, s, "s1", "o")
	clk.Add(time.Second)
	submit(t, s, "s2", "p")
	claim(t, s, clk.Now())
	if err := s.Done(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.ByState[queue.Queued] != 1 || st.ByState[queue.Done] != 1 || st.Unfinished != 1 || !st.OldestUnfinished.Equal(first.Add(time.Second)) {
		t.Errorf("Stats = %+v", st)
	}
}
