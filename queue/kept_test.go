package queue_test

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/batonhq/baton/queue"
)

// deadLetter submits op id of object with payload, fails it for good and
// records its dead letter, kept (published without the payload) or not.
func deadLetter(t *testing.T, s *queue.Store, clk *clock, id, object, payload string, kept bool) {
	t.Helper()
	ctx := t.Context()
	if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: id, Object: object, Payload: json.RawMessage(payload)}); err != nil {
		t.Fatal(err)
	}
	if op := claim(t, s, clk.Now()); op.ID != id {
		t.Fatalf("claimed %s, want %s", op.ID, id)
	}
	if err := s.DeadLetterPending(ctx, id, "HTTP400", "app answered 400"); err != nil {
		t.Fatal(err)
	}
	var err error
	if kept {
		err = s.DeadLetteredKept(ctx, id, queue.ElidedNotePrefix+" (test)")
	} else {
		err = s.DeadLettered(ctx, id, "")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestKeptNotPurged (issue 18 §5): a dead_lettered op whose letter went out
// without its payload survives any purge and a restart; an ordinary dead
// letter of the same age is purged. Replay takes the op back (not kept any
// more); Discard deletes it and its payload.
func TestKeptNotPurged(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	s := open(t, dir, queue.Options{Now: clk.Now, Retention: time.Hour})
	big := `{"doc":"` + strings.Repeat("x", 1000) + `"}`
	deadLetter(t, s, clk, "kept-1", "a", big, true)
	deadLetter(t, s, clk, "plain-1", "b", `{"n":1}`, false)
	if st := s.Stats(); st.Kept != 1 || st.ByState[queue.DeadLettered] != 2 {
		t.Fatalf("Stats: kept %d, dead_lettered %d; want 1, 2", st.Kept, st.ByState[queue.DeadLettered])
	}
	n, err := s.Purge(t.Context(), clk.Now().Add(365*24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1 (the ordinary dead letter)", n, err)
	}
	if _, err := s.Get("plain-1"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("ordinary dead letter after purge: %v, want ErrNotFound", err)
	}
	if op := get(t, s, "kept-1"); !op.Kept || string(op.Payload) != big {
		t.Fatalf("kept op after purge: kept %v, payload %d bytes; want kept with its %d bytes", op.Kept, len(op.Payload), len(big))
	}

	s.Close()
	s = open(t, dir, queue.Options{Now: clk.Now, Retention: time.Hour})
	if n, err := s.Purge(t.Context(), clk.Now().Add(10*365*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("Purge after reopen = %d, %v; want 0", n, err)
	}
	if st := s.Stats(); st.Kept != 1 || st.ByState[queue.DeadLettered] != 1 || st.PayloadBytes != int64(len(big)) {
		t.Fatalf("Stats after reopen: kept %d, dead_lettered %d, payload bytes %d; want 1, 1, %d", st.Kept, st.ByState[queue.DeadLettered], st.PayloadBytes, len(big))
	}

	op, err := s.Replay(t.Context(), "kept-1")
	if err != nil || op.Kept || op.State != queue.Queued || string(op.Payload) != big {
		t.Fatalf("Replay = kept %v, %s, %d bytes, %v; want queued, not kept, with the payload", op.Kept, op.State, len(op.Payload), err)
	}
	if st := s.Stats(); st.Kept != 0 || st.ByState[queue.DeadLettered] != 0 {
		t.Errorf("Stats after replay: kept %d, dead_lettered %d; want 0, 0", st.Kept, st.ByState[queue.DeadLettered])
	}
	claim(t, s, clk.Now())
	if err := s.DeadLetterPending(t.Context(), "kept-1", "HTTP400", "again"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetteredKept(t.Context(), "kept-1", queue.ElidedNotePrefix); err != nil {
		t.Fatal(err)
	}

	got, err := s.Discard(t.Context(), "kept-1")
	if err != nil || got.ID != "kept-1" || string(got.Payload) != big {
		t.Fatalf("Discard = %s with %d payload bytes, %v; want kept-1 with its payload", got.ID, len(got.Payload), err)
	}
	if _, err := s.Get("kept-1"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Get after Discard: %v, want ErrNotFound", err)
	}
	if st := s.Stats(); st.Kept != 0 || st.ByState[queue.DeadLettered] != 0 || st.PayloadBytes != 0 {
		t.Errorf("Stats after discard: kept %d, dead_lettered %d, payload bytes %d; want 0", st.Kept, st.ByState[queue.DeadLettered], st.PayloadBytes)
	}
	if _, err := s.Discard(t.Context(), "kept-1"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("second Discard: %v, want ErrNotFound", err)
	}
	// The id is free again; a new op of the object gets the next seq.
	if op := submit(t, s, "kept-1", "a"); op.Seq != 3 {
		t.Errorf("resubmitted after discard: seq %d, want 3", op.Seq)
	}
	_, err = s.Discard(t.Context(), "kept-1")
	if se, ok := errors.AsType[*queue.StateError](err); !ok || se.State != queue.Queued || !errors.Is(err, queue.ErrNotDeadLettered) {
		t.Errorf("Discard of a queued op = %v, want a StateError (queued) wrapping ErrNotDeadLettered", err)
	}
}

// TestLegacyElidedKept: an op dead-lettered without its payload by an
// earlier version (no Kept mark, only the letter note) is recognised by
// Purge and kept, not deleted.
func TestLegacyElidedKept(t *testing.T) {
	clk := newClock()
	s := open(t, t.TempDir(), queue.Options{Now: clk.Now, Retention: time.Hour})
	ctx := t.Context()
	if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: "old-1", Object: "a", Payload: json.RawMessage(`[1]`)}); err != nil {
		t.Fatal(err)
	}
	claim(t, s, clk.Now())
	if err := s.DeadLetterPending(ctx, "old-1", "HTTP400", "x"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLettered(ctx, "old-1", queue.ElidedNotePrefix+" (3 bytes, sha256 …)"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx, clk.Now().Add(48*time.Hour)); err != nil || n != 0 {
		t.Fatalf("Purge = %d, %v; want 0", n, err)
	}
	if op := get(t, s, "old-1"); !op.Kept || string(op.Payload) != `[1]` {
		t.Errorf("legacy elided op after purge: kept %v, payload %s; want kept with [1]", op.Kept, op.Payload)
	}
	if st := s.Stats(); st.Kept != 1 || st.ByState[queue.DeadLettered] != 1 {
		t.Errorf("Stats: kept %d, dead_lettered %d; want 1, 1", st.Kept, st.ByState[queue.DeadLettered])
	}
}

// payloadSum is the payload bytes of every op in s, read op by op.
func payloadSum(t *testing.T, s *queue.Store) int64 {
	t.Helper()
	ops, next, err := s.List(queue.ListOptions{Limit: queue.MaxListLimit})
	if err != nil || next != "" {
		t.Fatalf("List = %d ops, next %q, %v", len(ops), next, err)
	}
	var n int64
	for _, op := range ops {
		n += int64(len(get(t, s, op.ID).Payload))
	}
	return n
}

// TestMaxBytes (issue 18 §5): queue.max.bytes bounds the payload bytes
// stored; a submit past it is a *FullError naming queue.max.bytes (the op
// count is far from its cap), accepted again once ops are done. The count
// survives a restart (persisted), and a store without the persisted count
// (an earlier version's) gets it recomputed at open.
func TestMaxBytes(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	const max = 1 << 20
	opts := queue.Options{Now: clk.Now, MaxBytes: max}
	s := open(t, dir, opts)
	ctx := t.Context()
	payload := json.RawMessage(`"` + strings.Repeat("p", 400_000-2) + `"`)
	sub := func(s *queue.Store, id string) error {
		_, _, err := s.Submit(ctx, queue.SubmitRequest{ID: id, Object: "o-" + id, Payload: payload})
		return err
	}
	for _, id := range []string{"a", "b"} {
		if err := sub(s, id); err != nil {
			t.Fatal(err)
		}
	}
	wantFull := func(s *queue.Store, id string, used int64) {
		t.Helper()
		err := sub(s, id)
		fe, ok := errors.AsType[*queue.FullError](err)
		if !ok || fe.Key != "queue.max.bytes" || fe.Used != used || fe.Adding != 400_000 || fe.Limit != max ||
			!errors.Is(err, queue.ErrQueueFull) || !strings.Contains(err.Error(), "queue.max.bytes") {
			t.Fatalf("Submit(%s) past the byte cap = %v, want a FullError naming queue.max.bytes (%d + 400000 > %d)", id, err, used, max)
		}
	}
	wantFull(s, "c", 800_000)
	if st := s.Stats(); st.PayloadBytes != 800_000 || st.Unfinished != 2 {
		t.Errorf("Stats: payload bytes %d, unfinished %d; want 800000, 2", st.PayloadBytes, st.Unfinished)
	}
	// A small op still fits; a replay adds no bytes.
	if _, _, err := s.Submit(ctx, queue.SubmitRequest{ID: "small", Object: "o-small", Payload: json.RawMessage(`1`)}); err != nil {
		t.Fatalf("small submit under the cap: %v", err)
	}

	// Restart: the accounting is kept.
	s.Close()
	s = open(t, dir, opts)
	if st := s.Stats(); st.PayloadBytes != 800_001 || payloadSum(t, s) != 800_001 {
		t.Fatalf("after reopen: payload bytes %d (sum of payloads %d), want 800001", st.PayloadBytes, payloadSum(t, s))
	}
	wantFull(s, "c", 800_001)

	// An op done frees its payload: the submit is accepted again.
	op := claim(t, s, clk.Now())
	if err := s.Done(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	if err := sub(s, "c"); err != nil {
		t.Fatalf("Submit after an op completed = %v, want accepted", err)
	}
	if got, want := s.Stats().PayloadBytes, payloadSum(t, s); got != want {
		t.Errorf("payload bytes %d, sum of payloads %d", got, want)
	}

	// An earlier version's store has no persisted count: recomputed.
	s.Close()
	db, err := bolt.Open(filepath.Join(dir, "queue.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Delete([]byte("payload_bytes")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, opts)
	if got, want := s.Stats().PayloadBytes, payloadSum(t, s); got != want || got != 800_001 {
		t.Errorf("recomputed payload bytes %d, sum of payloads %d, want 800001", got, want)
	}
	wantFull(s, "d", 800_001)

	// The count cap is kept besides.
	if err := s.SetLimits(3, 0); err != nil {
		t.Fatal(err)
	}
	err = sub(s, "e")
	if fe, ok := errors.AsType[*queue.FullError](err); !ok || fe.Key != "queue.max.ops" {
		t.Errorf("Submit past queue.max.ops = %v, want a FullError naming queue.max.ops", err)
	}
	if err := s.SetMaxBytes(1000); err == nil {
		t.Error("SetMaxBytes(1000) = nil, want an error (below one op's largest payload)")
	}
	if _, err := queue.Open(t.TempDir(), queue.Options{MaxBytes: 1000}); err == nil {
		t.Error("Open with MaxBytes 1000 = nil error, want one")
	}
}

// TestMaxBytesConcurrent: concurrent submits never take the stored payload
// bytes past queue.max.bytes (reservations count before the commit):
// with room for exactly 10 payloads of 100,000 bytes, 10 of 30 are
// accepted and the others refused.
func TestMaxBytesConcurrent(t *testing.T) {
	s := open(t, t.TempDir(), queue.Options{MaxBytes: 1_000_000})
	payload := json.RawMessage(`"` + strings.Repeat("p", 100_000-2) + `"`)
	errs := make(chan error, 30)
	for i := range 30 {
		go func() {
			_, _, err := s.Submit(t.Context(), queue.SubmitRequest{ID: "c" + strings.Repeat("x", i), Object: "o", Payload: payload})
			errs <- err
		}()
	}
	accepted := 0
	for range 30 {
		switch err := <-errs; {
		case err == nil:
			accepted++
		case !errors.Is(err, queue.ErrQueueFull):
			t.Errorf("Submit = %v, want nil or ErrQueueFull", err)
		}
	}
	if st := s.Stats(); accepted != 10 || st.PayloadBytes != 1_000_000 {
		t.Errorf("accepted %d, payload bytes %d; want 10, 1000000", accepted, st.PayloadBytes)
	}
}
