package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/queue"
	"github.com/batonhq/baton/retry"
)

// TestHappyPath: 202, one delivery with the documented body and headers, the
// payload byte for byte, the fencing token equal to the holder's token as
// the sidecar reports it during the delivery, done; over TCP and over a unix
// socket app URL.
func TestHappyPath(t *testing.T) {
	for _, tc := range []struct{ name, unix string }{{"tcp", ""}, {"unix", "unix"}} {
		t.Run(tc.name, func(t *testing.T) {
			var holder struct {
				sync.Mutex
				status api.LockStatus
				err    error
			}
			e := newEnv(t, envOptions{app: opstest.Options{Unix: tc.unix}})
			e.app.SetRespond(func(ctx context.Context, d opstest.Delivery) int {
				st, b := e.call("GET", "/v1/locks/"+d.Object, "")
				holder.Lock()
				defer holder.Unlock()
				if st != 200 {
					holder.err = fmt.Errorf("GET /v1/locks/%s = %d %s", d.Object, st, b)
					return 500
				}
				holder.err = json.Unmarshal(b, &holder.status)
				return http.StatusNoContent
			})
			payload := `{"b": [1, 2.50],  "s": "<&> ü"}`
			body := `{"id":"op-1","object":"article-42","info":"reindex","payload":` + payload + `}`
			id := e.submit(body)
			if id != "op-1" {
				t.Fatalf("submit id = %q, want op-1", id)
			}
			op := e.waitState(id, api.OpDone, 20*time.Second)
			if op.Attempts != 0 || op.Seq != 1 || op.Object != "article-42" {
				t.Errorf("GET op = %+v, want attempts 0, seq 1, object article-42", op)
			}

			ds := e.app.ByID(id)
			if len(ds) != 1 {
				t.Fatalf("deliveries = %d, want 1", len(ds))
			}
			d := ds[0]
			if d.Err != nil {
				t.Fatalf("delivery body %s: %v", d.Body, d.Err)
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(d.Body, &keys); err != nil {
				t.Fatal(err)
			}
			if got, want := slices.Sorted(maps.Keys(keys)), []string{"accepted_at", "attempt", "id", "info", "object", "payload", "seq", "token"}; !slices.Equal(got, want) {
				t.Errorf("body keys = %v, want %v", got, want)
			}
			if string(d.Payload) != payload {
				t.Errorf("payload = %s, want %s byte for byte", d.Payload, payload)
			}
			if d.ID != id || d.Object != "article-42" || d.Info != "reindex" || d.Attempt != 1 || d.Seq != 1 {
				t.Errorf("delivery = %+v", d)
			}
			if _, err := time.Parse(time.RFC3339, d.AcceptedAt); err != nil || !strings.HasSuffix(d.AcceptedAt, "Z") || len(d.AcceptedAt) != len("2006-01-02T15:04:05.000Z") {
				t.Errorf("accepted_at = %q, want RFC 3339 UTC with milliseconds", d.AcceptedAt)
			}
			if d.AcceptedAt != op.AcceptedAt.UTC().Format(api.TimeFormat) {
				t.Errorf("accepted_at = %q, GET says %v", d.AcceptedAt, op.AcceptedAt)
			}
			for h, want := range map[string]string{
				ops.HeaderOpID: id, ops.HeaderObject: "article-42", ops.HeaderFencingToken: d.Token,
				ops.HeaderOpSeq: "1", ops.HeaderAcceptedAt: d.AcceptedAt, ops.HeaderAttempt: "1",
				"Content-Type": "application/json",
			} {
				if got := d.Header.Get(h); got != want {
					t.Errorf("header %s = %q, want %q", h, got, want)
				}
			}
			if got := d.Header.Get(ops.HeaderLeaseID); !regexp.MustCompile(`^([0-9a-f]{16}\.)?[0-9a-f]{32}$`).MatchString(got) || strings.Contains(got, id) {
				t.Errorf("header %s = %q, want 128 random bits (nothing derived from the op)", ops.HeaderLeaseID, got)
			}
			holder.Lock()
			if holder.err != nil {
				t.Errorf("inspecting the lock during the delivery: %v", holder.err)
			} else if h := holder.status.Holder; h == nil || h.Type != api.Background || strconv.FormatInt(h.Token, 10) != d.Token || h.Sidecar != "node-1" {
				t.Errorf("holder during the delivery = %+v, want the background grant with token %s", h, d.Token)
			}
			holder.Unlock()
			if d.TokenInt() <= 0 {
				t.Errorf("token = %q, want a positive zxid", d.Token)
			}
			waitFor(t, 10*time.Second, "lock released", func() bool {
				st, err := e.srv.Engine().Inspect(context.Background(), "article-42")
				return err == nil && st.Holder == nil
			})
			// The counters move just after the done record.
			e.waitEvents(id, 1)
			if got := e.metric("baton_ops_total", map[string]string{"state": "done"}); got != 1 {
				t.Errorf("baton_ops_total{state=done} = %v, want 1", got)
			}
			if got := e.metric("baton_ops_queued", nil); got != 0 {
				t.Errorf("baton_ops_queued = %v, want 0", got)
			}
			if got := e.metric("baton_op_attempts", nil); got != 1 {
				t.Errorf("baton_op_attempts count = %v, want 1", got)
			}
			if got := e.metric("baton_op_delivery_seconds", map[string]string{"result": "ok"}); got != 1 {
				t.Errorf("baton_op_delivery_seconds{result=ok} count = %v, want 1", got)
			}
			if got := e.metric("baton_ops", map[string]string{"state": "done"}); got != 1 {
				t.Errorf("baton_ops{state=done} = %v, want 1", got)
			}
		})
	}
}

// TestLockHeldElsewhere: the object is held by another engine for the whole
// test: every attempt fails with InstanceLockException, the waits between
// attempts grow as configured, and after elastic.request.retry.count retries
// the op is dead-lettered with the documented key, value and headers, read
// back with kafka-go and with kcat.
func TestLockHeldElsewhere(t *testing.T) {
	const retries = 3
	e := newEnv(t, envOptions{config: func(c *props.Config) {
		c.BackgroundTimeout = 200 * time.Millisecond
		c.RetryInitial = 100 * time.Millisecond
		c.RetryMultiplier = 2
		c.RetryRandomization = 0
		c.RetryCount = retries
	}})
	other := otherEngine(t, e.cfg)
	g, err := other.Acquire(context.Background(), "held-obj", lock.Foreground, lock.AcquireOptions{Info: "other sidecar"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(context.Background())

	id := e.submit(`{"id":"held-1","object":"held-obj","info":"kpi","payload":{"n":1}}`)
	op := e.waitState(id, api.OpDeadLettered, 30*time.Second)
	if op.Attempts != retries+1 {
		t.Errorf("attempts = %d, want %d", op.Attempts, retries+1)
	}
	if len(e.app.Deliveries()) != 0 {
		t.Errorf("the app got %d deliveries, want none", len(e.app.Deliveries()))
	}
	evs := e.waitEvents(id, retries+1)
	if len(evs) != retries+1 {
		t.Fatalf("attempts seen = %d, want %d: %+v", len(evs), retries+1, evs)
	}
	policy := retry.Policy{InitialInterval: 100 * time.Millisecond, MaxInterval: 5 * time.Second, Multiplier: 2, MaxRetries: retries}
	for i, ev := range evs {
		wantOutcome := "retrying"
		if i == retries {
			wantOutcome = "dlq_pending"
		}
		if ev.Outcome != wantOutcome || ev.Class != retry.NameInstanceLock || ev.Attempt != i+1 {
			t.Errorf("attempt %d = %s %s (attempt %d), want %s %s", i+1, ev.Outcome, ev.Class, ev.Attempt, wantOutcome, retry.NameInstanceLock)
		}
		if i == retries {
			break
		}
		base := policy.Base(i + 1) // 100ms, 200ms, 400ms
		if got := ev.NextAt.Sub(ev.Failed); got != base {
			t.Errorf("attempt %d: next attempt %v after the failure, want %v", i+1, got, base)
		}
		// The next attempt starts no earlier than scheduled (stored at ms precision).
		gap := evs[i+1].Start.Sub(ev.Failed)
		if gap < base-time.Millisecond || gap > base+3*time.Second {
			t.Errorf("attempt %d started %v after attempt %d failed, want about %v", i+2, gap, i+1, base)
		}
		t.Logf("attempt %d failed; attempt %d started %v later (backoff %v)", i+1, i+2, gap.Round(time.Millisecond), base)
	}

	// Read back with kafka-go.
	msgs := readTopic(t, e.kafka.Addr(), e.cfg.DLQTopic)
	if len(msgs) != 1 {
		t.Fatalf("dead-letter topic has %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if string(m.Key) != "held-obj" {
		t.Errorf("key = %q, want held-obj", m.Key)
	}
	hdr := map[string]string{}
	for _, h := range m.Headers {
		hdr[h.Key] = string(h.Value)
	}
	wantHdr := map[string]string{
		"baton-op-id": id, "baton-object": "held-obj", "baton-error-class": "InstanceLockException",
		"baton-attempts": strconv.Itoa(retries + 1), "baton-sidecar": "node-1",
	}
	for k, want := range wantHdr {
		if hdr[k] != want {
			t.Errorf("header %s = %q, want %q", k, hdr[k], want)
		}
	}
	if !strings.Contains(hdr["baton-error-message"], "held-obj") {
		t.Errorf("baton-error-message = %q, want the lock error", hdr["baton-error-message"])
	}
	checkLetterValue(t, m.Value, id, "held-obj", retries+1)

	// And with kcat, an independent client.
	out := kcat(t, e.kafka.Addr(), e.cfg.DLQTopic)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("kcat printed %d messages, want 1:\n%s", len(lines), out)
	}
	parts := strings.SplitN(lines[0], "\t", 3)
	if len(parts) != 3 || parts[0] != "held-obj" {
		t.Fatalf("kcat line = %q, want key held-obj, headers, value", lines[0])
	}
	for k, want := range wantHdr {
		if !strings.Contains(parts[1], k+"="+want) {
			t.Errorf("kcat headers %q lack %s=%s", parts[1], k, want)
		}
	}
	checkLetterValue(t, []byte(parts[2]), id, "held-obj", retries+1)
}

// checkLetterValue checks a dead letter's JSON value (api/openapi.json, schema DeadLetter).
func checkLetterValue(t *testing.T, value []byte, id, object string, attempts int) {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(value, &v); err != nil {
		t.Fatalf("letter value %s: %v", value, err)
	}
	for _, k := range []string{"id", "object", "info", "payload", "seq", "accepted_at", "attempts", "last_error", "error_class", "first_attempt_at", "sidecar"} {
		if _, ok := v[k]; !ok {
			t.Errorf("letter value lacks %q: %s", k, value)
		}
	}
	if v["id"] != id || v["object"] != object || v["attempts"] != float64(attempts) || v["error_class"] != "InstanceLockException" || v["sidecar"] != "node-1" {
		t.Errorf("letter value = %s", value)
	}
	if p, _ := json.Marshal(v["payload"]); string(p) != `{"n":1}` {
		t.Errorf("letter payload = %s, want {\"n\":1}", p)
	}
	for _, k := range []string{"accepted_at", "first_attempt_at"} {
		s, _ := v[k].(string)
		if _, err := time.Parse(time.RFC3339, s); err != nil || !strings.HasSuffix(s, "Z") {
			t.Errorf("letter %s = %v, want RFC 3339 UTC", k, v[k])
		}
	}
}

// readTopic reads every message of partition 0 with kafka-go.
func readTopic(t *testing.T, addr, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", addr, topic, 0)
	if err != nil {
		t.Fatalf("kafka dial: %v", err)
	}
	first, last, err := conn.ReadOffsets()
	conn.Close()
	if err != nil {
		t.Fatalf("kafka offsets: %v", err)
	}
	if last <= first {
		return nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for off := first; off < last; off++ {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("kafka read at %d: %v", off, err)
		}
		out = append(out, m)
	}
	return out
}

// kcat consumes the topic from the start to its end with kcat, one
// "key<TAB>headers<TAB>value" line per message.
func kcat(t *testing.T, addr, topic string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kcat", "-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-q",
		"-f", `%k\t%h\t%s\n`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	return string(out)
}

// TestRetryThenDone: the app answers 503 once, then 200: one retry, done.
// An app answering 400 dead-letters the op after that one attempt.
func TestRetryThenDone(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.app.SetRespond(func(ctx context.Context, d opstest.Delivery) int {
		switch {
		case d.Object == "bad":
			return http.StatusBadRequest
		case d.Attempt == 1:
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	id := e.submit(`{"object":"flaky","payload":[1]}`)
	op := e.waitState(id, api.OpDone, 20*time.Second)
	// Done clears last_error (issue 13); the history keeps the failure.
	if op.Attempts != 1 || op.LastError != "" || len(op.History) != 2 || op.History[0].ErrorClass != "HTTP503" {
		t.Errorf("op = %+v, want 1 failed attempt recorded in the history, last_error cleared", op)
	}
	ds := e.app.ByID(id)
	if len(ds) != 2 || ds[0].Status != 503 || ds[1].Status != 200 || ds[1].Attempt != 2 || ds[1].Header.Get(ops.HeaderAttempt) != "2" {
		t.Errorf("deliveries = %+v, want 503 then 200 on attempt 2", ds)
	}
	if evs := e.waitEvents(id, 2); len(evs) != 2 || evs[0].Class != "HTTP503" || evs[1].Outcome != "done" {
		t.Errorf("attempts = %+v, want HTTP503 then done", evs)
	}

	bad := e.submit(`{"id":"bad-1","object":"bad"}`)
	op = e.waitState(bad, api.OpDeadLettered, 20*time.Second)
	if op.Attempts != 1 {
		t.Errorf("attempts = %d, want 1 (no retry after a 400)", op.Attempts)
	}
	if n := len(e.app.ByID(bad)); n != 1 {
		t.Errorf("deliveries of a 400 op = %d, want 1", n)
	}
	if evs := e.waitEvents(bad, 1); len(evs) != 1 || evs[0].Class != "HTTP400" || evs[0].Outcome != "dlq_pending" {
		t.Errorf("attempts = %+v, want one HTTP400 → dlq_pending", evs)
	}
	// The counter moves just after the dead_lettered record.
	waitFor(t, 5*time.Second, "baton_dlq_published_total 1", func() bool { return e.metric("baton_dlq_published_total", nil) >= 1 })
	time.Sleep(100 * time.Millisecond)
	if got := e.metric("baton_dlq_published_total", nil); got != 1 {
		t.Errorf("baton_dlq_published_total = %v, want 1", got)
	}
}

// TestKafkaOutage: while the broker is black-holed a failed op stays
// dlq_pending (durable, counted by baton_dlq_pending); once healed it is
// published exactly once and becomes dead_lettered.
func TestKafkaOutage(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusUnprocessableEntity })
	e.kafka.Proxy().BlackHole()
	id := e.submit(`{"id":"k-1","object":"k","payload":{"n":1}}`)
	e.waitState(id, api.OpDLQPending, 20*time.Second)
	// A few publish rounds fail (each bounded by the 2s publish timeout).
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if op := e.op(id); op.State != api.OpDLQPending {
			t.Fatalf("state during the outage = %s, want dlq_pending", op.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := e.metric("baton_dlq_pending", nil); got != 1 {
		t.Errorf("baton_dlq_pending = %v, want 1", got)
	}
	if got := e.metric("baton_dlq_pending_age_seconds", nil); got < 3 {
		t.Errorf("baton_dlq_pending_age_seconds = %v, want at least the 3 s of the outage", got)
	}
	if got := e.metric("baton_op_delivery_seconds", map[string]string{"result": "permanent"}); got != 1 {
		t.Errorf("baton_op_delivery_seconds{result=permanent} count = %v, want 1", got)
	}
	e.kafka.Proxy().Heal()
	e.waitState(id, api.OpDeadLettered, 30*time.Second)
	msgs := readTopic(t, e.kafka.Addr(), e.cfg.DLQTopic)
	n := 0
	for _, m := range msgs {
		for _, h := range m.Headers {
			if h.Key == "baton-op-id" && string(h.Value) == id {
				n++
			}
		}
	}
	if n != 1 {
		t.Errorf("letters of %s on the topic = %d, want exactly 1", id, n)
	}
	if got := e.metric("baton_dlq_pending", nil); got != 0 {
		t.Errorf("baton_dlq_pending after publishing = %v, want 0", got)
	}
	if got := e.metric("baton_dlq_pending_age_seconds", nil); got != 0 {
		t.Errorf("baton_dlq_pending_age_seconds after publishing = %v, want 0", got)
	}
	if got := e.metric("baton_ops", map[string]string{"state": "dead_lettered"}); got != 1 {
		t.Errorf("baton_ops{state=dead_lettered} = %v, want 1", got)
	}
}

// TestZooKeeperDown: while ZooKeeper is unreachable workers pause: the op
// stays queued, no attempt is made or counted; when it is back the op is
// delivered on its first counted attempt.
func TestZooKeeperDown(t *testing.T) {
	p := testenvProxy(t)
	e := newEnv(t, envOptions{zk: []string{p.Addr()}, config: func(c *props.Config) { c.ZKSessionTimeout = 2 * time.Second }})
	warm := e.submit(`{"object":"zk-obj"}`)
	e.waitState(warm, api.OpDone, 20*time.Second)

	p.BlackHole()
	waitFor(t, 20*time.Second, "engine disconnected", func() bool { return !e.srv.Engine().Health().Connected })
	id := e.submit(`{"id":"zk-1","object":"zk-obj"}`)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if op := e.op(id); op.State != api.OpQueued || op.Attempts != 0 {
			t.Fatalf("op while zookeeper is down = %+v, want queued with 0 attempts", op)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(e.app.ByID(id)); n != 0 {
		t.Errorf("deliveries while zookeeper is down = %d, want 0", n)
	}
	for _, ev := range e.eventsOf(id) {
		if ev.Outcome != "requeued" {
			t.Errorf("attempt while zookeeper is down: %+v, want none counted", ev)
		}
	}
	p.Heal()
	p.ResetConnections() // a connect attempted into the black hole would otherwise wait for its own timeout
	op := e.waitState(id, api.OpDone, 30*time.Second)
	if op.Attempts != 0 {
		t.Errorf("attempts = %d, want 0 failed attempts", op.Attempts)
	}
	if ds := e.app.ByID(id); len(ds) != 1 || ds[0].Attempt != 1 {
		t.Errorf("deliveries = %+v, want one, attempt 1", ds)
	}
}

// TestIdempotentSubmit: the same id and body again answers 200 with the
// current state and is not run again; another body is 409; replay re-queues
// a dead_lettered op only.
func TestIdempotentSubmit(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := `{"id":"same-1","object":"o","info":"x","payload":{"a":1,"b":2}}`
	e.submit(body)
	var ack api.OpAck
	decodeStrict(t, e.mustCall(200, "POST", "/v1/ops", `{"id":"same-1","object":"o","info":"x","payload":{"b":2, "a":1}}`), &ack)
	if ack.ID != "same-1" {
		t.Errorf("duplicate ack = %+v", ack)
	}
	e.waitState("same-1", api.OpDone, 20*time.Second)
	decodeStrict(t, e.mustCall(200, "POST", "/v1/ops", body), &ack)
	if ack.State != api.OpDone {
		t.Errorf("duplicate after done = %+v, want state done", ack)
	}
	if n := len(e.app.ByID("same-1")); n != 1 {
		t.Errorf("deliveries = %d, want 1", n)
	}
	var ae api.Error
	decodeStrict(t, e.mustCall(409, "POST", "/v1/ops", `{"id":"same-1","object":"o","info":"y"}`), &ae)
	if ae.Kind != api.Conflict {
		t.Errorf("other body = %+v, want Conflict", ae)
	}

	// Replay.
	decodeStrict(t, e.mustCall(409, "POST", "/v1/ops/same-1/replay", ""), &ae)
	if ae.Kind != api.Conflict {
		t.Errorf("replay of a done op = %+v, want 409 Conflict", ae)
	}
	decodeStrict(t, e.mustCall(404, "POST", "/v1/ops/nope/replay", ""), &ae)
	decodeStrict(t, e.mustCall(404, "GET", "/v1/ops/nope", ""), &ae)
	if ae.Kind != api.NotFound {
		t.Errorf("GET unknown = %+v, want NotFound", ae)
	}
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusNotFound })
	dead := e.submit(`{"id":"dead-1","object":"o2"}`)
	e.waitState(dead, api.OpDeadLettered, 20*time.Second)
	e.app.SetRespond(nil)
	decodeStrict(t, e.mustCall(202, "POST", "/v1/ops/dead-1/replay", ""), &ack)
	if ack.ID != dead || ack.State != api.OpQueued {
		t.Errorf("replay ack = %+v, want queued", ack)
	}
	op := e.waitState(dead, api.OpDone, 20*time.Second)
	if op.Attempts != 0 || op.Seq != 2 {
		t.Errorf("replayed op = %+v, want attempts restarted and a new seq", op)
	}
	if ds := e.app.ByID(dead); len(ds) != 2 || ds[1].Attempt != 1 || ds[1].Status != 200 {
		t.Errorf("deliveries after replay = %+v", ds)
	}
}

// TestBadSubmissions: 400 naming the field, nothing accepted; ops disabled
// answers 503 OpsDisabled on every ops path.
func TestBadSubmissions(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true})
	big := `{"object":"o","payload":"` + strings.Repeat("x", queue.MaxPayloadBytes) + `"}`
	for _, tc := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"empty body", "", 400, "object"},
		{"no object", `{"payload":1}`, 400, "object"},
		{"empty object", `{"object":""}`, 400, "object"},
		{"control char object", `{"object":"a\u0001b"}`, 400, "object"},
		{"bad id characters", `{"id":"a b/c","object":"o"}`, 400, "id"},
		{"id too long", `{"id":"` + strings.Repeat("a", 129) + `","object":"o"}`, 400, "id"},
		{"payload over 512 KiB", big, 400, "payload"},
		{"unknown field", `{"object":"o","priority":1}`, 400, "priority"},
		{"object not a string", `{"object":5}`, 400, "object"},
		{"malformed JSON", `{"object":`, 400, "body"},
		{"trailing data", `{"object":"o"} {}`, 400, "body"},
		{"body over 1 MiB", `{"object":"o","payload":"` + strings.Repeat("x", api.MaxBody) + `"}`, 413, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae api.Error
			decodeStrict(t, e.mustCall(tc.status, "POST", "/v1/ops", tc.body), &ae)
			if ae.Field != tc.field || ae.Message == "" || (tc.status == 400 && ae.Kind != api.BadRequest) {
				t.Errorf("answer = %+v, want %d naming %q", ae, tc.status, tc.field)
			}
		})
	}
	// An empty id is no op (it used to be served as the list, an admin
	// action, to a client: the id was parsed again by ops).
	var empty api.Error
	decodeStrict(t, e.mustCall(404, "GET", "/v1/ops/", ""), &empty)
	if empty.Kind != api.NotFound || !strings.Contains(empty.Message, `no op ""`) {
		t.Errorf("GET /v1/ops/ = %+v, want 404 no op", empty)
	}
	if st := e.d.Ready(); st != nil {
		t.Errorf("Ready = %v", st)
	}
	if got := e.metric("baton_ops_queued", nil); got != 0 {
		t.Errorf("baton_ops_queued = %v after refused submissions, want 0", got)
	}

	t.Run("ops disabled", func(t *testing.T) {
		e := newEnv(t, envOptions{noApp: true, noKafka: true})
		for _, c := range [][2]string{{"POST", "/v1/ops"}, {"GET", "/v1/ops/x"}, {"POST", "/v1/ops/x/replay"}} {
			var ae api.Error
			decodeStrict(t, e.mustCall(503, c[0], c[1], `{"object":"o"}`), &ae)
			if ae.Kind != api.OpsDisabled {
				t.Errorf("%s %s = %+v, want OpsDisabled", c[0], c[1], ae)
			}
		}
	})
}

// TestHungHandler: an app that never answers is cut off at
// sidecar.app.timeout (a retryable Timeout) and the lock is released: another
// sidecar can take it at once.
func TestHungHandler(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true, config: func(c *props.Config) {
		c.AppTimeout = 500 * time.Millisecond
		c.RetryCount = 0
	}})
	e.app.SetRespond(func(ctx context.Context, _ opstest.Delivery) int {
		<-ctx.Done()
		return http.StatusOK
	})
	other := otherEngine(t, e.cfg)
	id := e.submit(`{"id":"hung-1","object":"hung"}`)
	e.waitState(id, api.OpDLQPending, 20*time.Second)
	evs := e.waitEvents(id, 1)
	if len(evs) != 1 || evs[0].Class != retry.NameTimeout {
		t.Fatalf("attempts = %+v, want one Timeout", evs)
	}
	if took := evs[0].End.Sub(evs[0].Start); took < 500*time.Millisecond || took > 5*time.Second {
		t.Errorf("the attempt took %v, want it cut off at about 500ms", took)
	}
	// The lock was released before the outcome was recorded: free now.
	g, err := other.Acquire(context.Background(), "hung", lock.Background, lock.AcquireOptions{TryOnce: true})
	if err != nil {
		t.Fatalf("another engine could not take the lock right after the timeout: %v", err)
	}
	if g.Token() <= evs[0].Token {
		t.Errorf("new token %d <= the delivery's %d", g.Token(), evs[0].Token)
	}
	g.Release(context.Background())
}

// TestPerObjectOrder: three ops on one object, the first failing twice
// before it succeeds, are delivered first-second-third; an op on another
// object is delivered while the first one waits for its retry.
func TestPerObjectOrder(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *props.Config) {
		c.RetryInitial = 300 * time.Millisecond
	}})
	e.app.SetRespond(opstest.Fail(2, http.StatusInternalServerError, func(d opstest.Delivery) bool { return d.ID == "x-1" }))
	for _, id := range []string{"x-1", "x-2", "x-3"} {
		e.submit(`{"id":"` + id + `","object":"X"}`)
	}
	e.submit(`{"id":"y-1","object":"Y"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.app.WaitSucceeded(ctx, "x-1", "x-2", "x-3", "y-1"); err != nil {
		t.Fatal(err)
	}
	var xs []string
	var x1Done, y1Done time.Time
	for _, d := range e.app.Deliveries() {
		switch {
		case d.Object == "X":
			xs = append(xs, fmt.Sprintf("%s#%d:%d", d.ID, d.Attempt, d.Status))
			if d.ID == "x-1" && d.Status == 200 {
				x1Done = d.At
			}
		case d.ID == "y-1":
			y1Done = d.At
		}
	}
	want := []string{"x-1#1:500", "x-1#2:500", "x-1#3:200", "x-2#1:200", "x-3#1:200"}
	if !slices.Equal(xs, want) {
		t.Errorf("deliveries of X = %v, want %v", xs, want)
	}
	if !y1Done.Before(x1Done) {
		t.Errorf("y-1 delivered at %v, after x-1 succeeded at %v: other objects were held up", y1Done, x1Done)
	}
	for _, id := range []string{"x-1", "x-2", "x-3", "y-1"} {
		e.waitState(id, api.OpDone, 10*time.Second)
	}
}

// TestDrain: at shutdown an attempt in progress may finish within the
// grace; one still running at its end is cut off and its op given back to
// the queue without counting the attempt.
func TestDrain(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	e := newEnv(t, envOptions{noKafka: true, queueDir: dir, config: func(c *props.Config) {
		c.ShutdownGrace = 500 * time.Millisecond
		c.AppTimeout = time.Minute
	}})
	started := make(chan struct{}, 1)
	e.app.SetRespond(func(ctx context.Context, _ opstest.Delivery) int {
		started <- struct{}{}
		select {
		case <-ctx.Done():
		case <-release:
		}
		return http.StatusOK
	})
	e.submit(`{"id":"drain-1","object":"d"}`)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery started")
	}
	t0 := time.Now()
	e.stop()
	close(release)
	if took := time.Since(t0); took > 20*time.Second {
		t.Errorf("shutdown took %v with a 500ms grace", took)
	}
	evs := e.eventsOf("drain-1")
	if len(evs) != 1 || evs[0].Outcome != "requeued" {
		t.Errorf("attempts = %+v, want one cut short and requeued", evs)
	}
	st, err := queue.Open(dir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	op, err := st.Get("drain-1")
	if err != nil || op.State != queue.Queued || op.Attempts != 0 {
		t.Errorf("after shutdown: %+v, %v; want queued with 0 attempts", op, err)
	}
}
