package ops_test

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// TestElidedLetterOpNotPurged (issue 18 §5): with the topic's
// max.message.bytes at 100,000, a 200 KB op is dead-lettered without its
// payload; the sidecar then holds the only whole copy, so a purge past
// queue.retention must not delete it (it did: the op existed nowhere). An
// ordinary dead letter of the same age is purged as before. The kept op
// is replayable, and gone only once discarded.
func TestElidedLetterOpNotPurged(t *testing.T) {
	var logs testenv.Buffer
	e := newEnv(t, envOptions{deps: func(d *ops.Deps) { d.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
	setTopicLimit(t, e, 100_000)
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusBadRequest })
	payload := `{"doc":"` + strings.Repeat("x", 200_000) + `"}`
	big := e.submit(`{"id":"big-1","object":"a-big","payload":` + payload + `}`)
	small := e.submit(`{"id":"small-1","object":"b-small","payload":{"n":1}}`)
	e.waitState(big, api.OpDeadLettered, 30*time.Second)
	e.waitState(small, api.OpDeadLettered, 30*time.Second)
	if n := len(e.lettersOf(big)); n != 1 {
		t.Fatalf("letters of %s = %d, want 1", big, n)
	}

	store := ops.StoreOf(e.d)
	later := time.Now().Add(e.cfg.QueueRetention + time.Hour)
	if _, err := store.Purge(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	if st, b := e.call("GET", "/v1/ops/"+small, ""); st != 404 {
		t.Errorf("ordinary dead letter past the retention: GET = %d %s, want 404 (purged)", st, b)
	}
	st, b := e.call("GET", "/v1/ops/"+big, "")
	if st != 200 {
		t.Fatalf("op whose letter has no payload, past the retention: GET = %d %s, want 200 (kept until replayed or discarded)", st, b)
	}
	op, err := store.Get(big)
	if err != nil || string(op.Payload) != payload {
		t.Fatalf("kept op: payload %d bytes, %v; want the %d bytes accepted", len(op.Payload), err, len(payload))
	}
	if !strings.Contains(e.op(big).LetterNote, "discard") {
		t.Errorf("letter_note %q does not say how to get rid of the kept op", e.op(big).LetterNote)
	}

	// Still kept after a second purge further in the future, and after a
	// restart of the queue (the mark is durable: see the queue tests).
	if _, err := store.Purge(context.Background(), later.Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.op(big)

	// Discard: the op and its payload go; a second discard is a 404.
	var d api.OpDiscarded
	decodeStrict(t, e.mustCall(200, "POST", "/v1/ops/"+big+"/discard", ""), &d)
	if d.ID != big || d.Object != "a-big" || !d.Discarded || d.PayloadBytes != len(payload) {
		t.Errorf("discard answer = %+v, want id %s, object a-big, discarded, payload_bytes %d", d, big, len(payload))
	}
	if !strings.Contains(d.Message, "deleted for good") || !strings.Contains(d.Message, "no copy of the payload is left") {
		t.Errorf("discard message = %q, want it to say the op and its only payload copy are gone", d.Message)
	}
	audit := regexp.MustCompile(`level=WARN msg="audit: dead-lettered op discarded" .*op_id=big-1 object=a-big kept=true payload_bytes=200010 .*caller="uid=\d+ gid=\d+ pid=\d+"`)
	if !audit.MatchString(logs.String()) {
		t.Errorf("no audit line for the discard naming the op and the caller's uid and pid in:\n%s", logs.String())
	}
	if st, b := e.call("GET", "/v1/ops/"+big, ""); st != 404 {
		t.Errorf("GET after discard = %d %s, want 404", st, b)
	}
	if st, b := e.call("POST", "/v1/ops/"+big+"/discard", ""); st != 404 {
		t.Errorf("second discard = %d %s, want 404", st, b)
	}
}

// TestDiscardRefusesUnfinished: only a dead_lettered op can be discarded;
// a queued or running one is a 409 naming its state (an accepted op is not
// dropped behind the app's back), an unknown id a 404.
func TestDiscardRefusesUnfinished(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, envOptions{})
	e.app.SetRespond(func(ctx context.Context, _ opstest.Delivery) int {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return http.StatusOK
	})
	id := e.submit(`{"id":"run-1","object":"o","payload":{}}`)
	e.waitState(id, api.OpRunning, 20*time.Second)
	st, b := e.call("POST", "/v1/ops/"+id+"/discard", "")
	if st != 409 || !strings.Contains(string(b), "running") || !strings.Contains(string(b), "dead_lettered") {
		t.Errorf("discard of a running op = %d %s, want 409 naming running and dead_lettered", st, b)
	}
	close(release)
	e.waitState(id, api.OpDone, 20*time.Second)
	if st, b := e.call("POST", "/v1/ops/nope/discard", ""); st != 404 {
		t.Errorf("discard of an unknown op = %d %s, want 404", st, b)
	}
	if st, b := e.call("GET", "/v1/ops/"+id+"/discard", ""); st != 405 {
		t.Errorf("GET .../discard = %d %s, want 405", st, b)
	}
}

// TestQueueMaxBytes (issue 18 §5): queue.max.bytes bounds the payload bytes
// the queue keeps. With a 1 MiB cap and two 400 kB ops the app refuses
// (503, retried), a third is refused with 507 QueueFull naming
// queue.max.bytes (the op count is far from queue.max.ops); after a restart
// on the same queue dir it is still refused (the accounting is durable);
// once the two ops are done it is accepted. A live reload raises the cap.
func TestQueueMaxBytes(t *testing.T) {
	dir := t.TempDir()
	var allow atomic.Bool
	respond := func(context.Context, opstest.Delivery) int {
		if allow.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	}
	cfg := func(c *props.Config) {
		c.QueueMaxBytes = 1 << 20
		c.RetryCount = 1000
		c.RetryMax = 200 * time.Millisecond
	}
	body := func(id string) string {
		return `{"id":"` + id + `","object":"o-` + id + `","payload":"` + strings.Repeat("p", 400_000-2) + `"}`
	}
	wantFull := func(e *env, id string) {
		t.Helper()
		var ae api.Error
		decodeStrict(t, e.mustCall(507, "POST", "/v1/ops", body(id)), &ae)
		if ae.Kind != api.QueueFull || !strings.Contains(ae.Message, "queue.max.bytes") || !strings.Contains(ae.Message, "800000") {
			t.Errorf("submit past the byte cap = %+v, want QueueFull naming queue.max.bytes and the 800000 bytes kept", ae)
		}
	}

	e := newEnv(t, envOptions{noKafka: true, queueDir: dir, config: cfg})
	e.app.SetRespond(respond)
	e.submit(body("a"))
	e.submit(body("b"))
	wantFull(e, "c")
	if got := e.metric("baton_queue_payload_bytes", nil); got != 800_000 {
		t.Errorf("baton_queue_payload_bytes = %v, want 800000", got)
	}
	e.waitState("a", api.OpRetrying, 20*time.Second)
	e.stop()

	e = newEnv(t, envOptions{noKafka: true, queueDir: dir, config: cfg})
	e.app.SetRespond(respond)
	wantFull(e, "c")
	allow.Store(true)
	e.waitState("a", api.OpDone, 20*time.Second)
	e.waitState("b", api.OpDone, 20*time.Second)
	e.submit(body("c"))
	if got := e.metric("baton_queue_payload_bytes", nil); got != 400_000 {
		t.Errorf("baton_queue_payload_bytes = %v, want 400000 (c only; done ops drop their payload)", got)
	}

	// The count cap stays (503, naming queue.max.ops) and a reload
	// changes the byte cap live.
	allow.Store(false)
	e.submit(body("d"))
	wantFull(e, "e")
	c := e.cfg
	c.QueueMaxBytes = 2 << 20
	if err := e.d.Reload(c); err != nil {
		t.Fatal(err)
	}
	e.submit(body("e"))
	c.QueueMaxOps = 3
	if err := e.d.Reload(c); err != nil {
		t.Fatal(err)
	}
	var ae api.Error
	decodeStrict(t, e.mustCall(503, "POST", "/v1/ops", body("f")), &ae)
	if ae.Kind != api.QueueFull || !strings.Contains(ae.Message, "queue.max.ops") {
		t.Errorf("submit past queue.max.ops = %+v, want 503 QueueFull naming queue.max.ops", ae)
	}
}
