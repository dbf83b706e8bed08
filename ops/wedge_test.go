package ops_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/queue"
)

// lettersOf returns the dead letters of op id on the topic.
func (e *env) lettersOf(id string) []kafka.Message {
	e.t.Helper()
	var out []kafka.Message
	for _, m := range readTopic(e.t.(*testing.T), e.kafka.Addr(), e.cfg.DLQTopic) {
		for _, h := range m.Headers {
			if h.Key == "baton-op-id" && string(h.Value) == id {
				out = append(out, m)
			}
		}
	}
	return out
}

// htmlPayload is a JSON string of n bytes made of '<', '&' and '>', which
// json.Marshal would escape to 6 bytes each.
func htmlPayload(n int) string { return `"` + strings.Repeat("<&>", (n-2)/3) + `"` }

// TestHTMLPayloadLetter (issue 15 item 1): a 512 KiB payload of HTML-like
// text is dead-lettered whole (its letter is not escaped to 3 MiB), and it
// blocks no other object's letter.
func TestHTMLPayloadLetter(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusBadRequest })
	payload := htmlPayload(queue.MaxPayloadBytes)
	big := e.submit(`{"id":"html-1","object":"a-html","payload":` + payload + `}`)
	small := e.submit(`{"id":"small-1","object":"b-small","payload":{"n":1}}`)
	e.waitState(big, api.OpDeadLettered, 30*time.Second)
	e.waitState(small, api.OpDeadLettered, 30*time.Second)
	ms := e.lettersOf(big)
	if len(ms) != 1 {
		t.Fatalf("letters of %s = %d, want 1", big, len(ms))
	}
	var v struct {
		Payload json.RawMessage `json:"payload"`
		Elided  bool            `json:"payload_elided"`
	}
	if err := json.Unmarshal(ms[0].Value, &v); err != nil {
		t.Fatal(err)
	}
	if string(v.Payload) != payload || v.Elided {
		t.Errorf("letter payload: %d bytes (elided %v), want the %d bytes as accepted", len(v.Payload), v.Elided, len(payload))
	}
	t.Logf("letter of a %d-byte HTML-like payload: %d bytes", len(payload), len(ms[0].Value))
	if len(ms[0].Value) > len(payload)+4<<10 {
		t.Errorf("letter value = %d bytes for a %d-byte payload: escaped", len(ms[0].Value), len(payload))
	}
}

// setTopicLimit sets the topic's max.message.bytes on the broker.
func setTopicLimit(t *testing.T, e *env, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(e.kafka.BrokerAddr()), Timeout: 10 * time.Second}
	res, err := c.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{
		Resources: []kafka.IncrementalAlterConfigsRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: e.cfg.DLQTopic,
			Configs: []kafka.IncrementalAlterConfigsRequestConfig{{
				Name: "max.message.bytes", Value: fmt.Sprint(n), ConfigOperation: kafka.ConfigOperationSet,
			}},
		}},
	})
	if err != nil {
		t.Fatalf("setting max.message.bytes: %v", err)
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			t.Fatalf("setting max.message.bytes: %v", r.Error)
		}
	}
}

// TestLetterOverTopicLimit (issue 15 item 1): with the topic's
// max.message.bytes at 100,000, a letter of a 200 KB payload is published
// with its payload elided (size and SHA-256 in the letter, the op's
// letter_note says so, the payload kept for replay), and other objects'
// letters are published too.
func TestLetterOverTopicLimit(t *testing.T) {
	e := newEnv(t, envOptions{})
	setTopicLimit(t, e, 100_000)
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusBadRequest })
	payload := `{"doc":"` + strings.Repeat("x", 200_000) + `"}`
	big := e.submit(`{"id":"big-1","object":"a-big","payload":` + payload + `}`)
	small := make([]string, 5)
	for i := range small {
		small[i] = e.submit(fmt.Sprintf(`{"id":"small-%d","object":"b-%d","payload":{"n":%d}}`, i, i, i))
	}
	e.waitState(big, api.OpDeadLettered, 30*time.Second)
	for _, id := range small {
		e.waitState(id, api.OpDeadLettered, 30*time.Second)
		if n := len(e.lettersOf(id)); n != 1 {
			t.Errorf("letters of %s = %d, want 1", id, n)
		}
	}
	ms := e.lettersOf(big)
	if len(ms) != 1 {
		t.Fatalf("letters of %s = %d, want 1", big, len(ms))
	}
	var v struct {
		Payload json.RawMessage `json:"payload"`
		Elided  bool            `json:"payload_elided"`
		Bytes   int             `json:"payload_bytes"`
		SHA     string          `json:"payload_sha256"`
	}
	if err := json.Unmarshal(ms[0].Value, &v); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(payload))
	if !v.Elided || string(v.Payload) != "null" || v.Bytes != len(payload) || v.SHA != hex.EncodeToString(sum[:]) {
		t.Errorf("letter = elided %v, payload %.20s, bytes %d, sha %s; want elided, null, %d, %x", v.Elided, v.Payload, v.Bytes, v.SHA, len(payload), sum)
	}
	op, err := ops.StoreOf(e.d).Get(big)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(op.LetterNote, "without its payload") || string(op.Payload) != payload {
		t.Errorf("op: letter_note %q, payload %d bytes; want the note and the payload kept", op.LetterNote, len(op.Payload))
	}
	if got := e.op(big).LetterNote; got != op.LetterNote {
		t.Errorf("GET /v1/ops/%s letter_note = %q, want %q", big, got, op.LetterNote)
	}
	if got := e.metric("baton_dlq_payload_elided_total", nil); got != 1 {
		t.Errorf("baton_dlq_payload_elided_total = %v, want 1", got)
	}
}

// TestZooKeeperOutageDuringDelivery (issue 15 item 4): ZooKeeper
// black-holed mid-delivery ends the grant (session lost); that is not the
// op's failure: with retry.count=0 the op is not dead-lettered, no attempt
// is counted, and it is delivered once ZooKeeper is back.
func TestZooKeeperOutageDuringDelivery(t *testing.T) {
	p := testenvProxy(t)
	e := newEnv(t, envOptions{zk: []string{p.Addr()}, config: func(c *props.Config) {
		c.ZKSessionTimeout = 2 * time.Second
		c.RetryCount = 0
	}})
	inside := make(chan struct{}, 1)
	var cancelled atomic.Bool
	e.app.SetRespond(func(ctx context.Context, d opstest.Delivery) int {
		if d.Attempt > 1 || cancelled.Load() {
			return http.StatusOK
		}
		inside <- struct{}{}
		select {
		case <-ctx.Done():
			cancelled.Store(true)
		case <-time.After(30 * time.Second):
		}
		return http.StatusOK
	})
	id := e.submit(`{"id":"zkcut-1","object":"zkcut"}`)
	select {
	case <-inside:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery")
	}
	p.BlackHole()
	waitFor(t, 20*time.Second, "the delivery cancelled (grant lost)", cancelled.Load)
	time.Sleep(500 * time.Millisecond) // the outcome is recorded meanwhile
	if op := e.op(id); op.State != api.OpQueued || op.Attempts != 0 {
		t.Errorf("op during the outage = %s with %d attempts, want queued with 0", op.State, op.Attempts)
	}
	p.Heal()
	p.ResetConnections()
	op := e.waitState(id, api.OpDone, 30*time.Second)
	if op.Attempts != 0 {
		t.Errorf("attempts = %d, want 0 (a ZooKeeper outage counts nothing)", op.Attempts)
	}
	for _, ev := range e.eventsOf(id) {
		if ev.Outcome != "requeued" && ev.Outcome != "done" {
			t.Errorf("attempt %+v: want only requeued then done", ev)
		}
	}
}

// diskFault makes every write past the first 8 KiB of any file of this
// process fail with EFBIG ("file too large": RLIMIT_FSIZE) until the
// returned func is called: bbolt's commits fail while the sidecar, the
// in-process broker and the app keep running. Tests using it must not run
// in parallel with others.
func diskFault(t *testing.T) (heal func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 8 << 10
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	heal = func() {
		if once.CompareAndSwap(false, true) {
			if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
				t.Errorf("restoring RLIMIT_FSIZE: %v", err)
			}
		}
	}
	t.Cleanup(heal)
	return heal
}

// TestStateWriteFault (issue 15 item 2): the write recording a delivered op
// fails for 2 s (file too large); it is retried until it succeeds, so the
// op does not stay running and the object's next op is delivered.
func TestStateWriteFault(t *testing.T) {
	e := newEnv(t, envOptions{noKafka: true})
	inside := make(chan struct{}, 1)
	release := make(chan struct{})
	e.app.SetRespond(func(ctx context.Context, d opstest.Delivery) int {
		if d.ID == "w-1" && d.Attempt == 1 {
			inside <- struct{}{}
			<-release
		}
		return http.StatusOK
	})
	w1 := e.submit(`{"id":"w-1","object":"w"}`)
	w2 := e.submit(`{"id":"w-2","object":"w"}`)
	select {
	case <-inside:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery")
	}
	heal := diskFault(t)
	close(release)
	waitFor(t, 10*time.Second, "a failed state write", func() bool { return e.metric("baton_queue_write_retries_total", nil) > 0 })
	time.Sleep(2 * time.Second)
	if op := e.op(w1); op.State != api.OpRunning {
		t.Errorf("w-1 during the disk fault = %s, want running (its record fails)", op.State)
	}
	heal()
	e.waitState(w1, api.OpDone, 20*time.Second)
	e.waitState(w2, api.OpDone, 20*time.Second)
	if n := len(e.app.ByID(w1)); n != 1 {
		t.Errorf("deliveries of w-1 = %d, want 1", n)
	}
}

// TestAckedLetterRecordFault (issue 15 item 3): Kafka acknowledges a
// letter but recording it fails for 3 s; the record is retried, the letter
// is not published again.
func TestAckedLetterRecordFault(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusBadRequest })
	e.kafka.Proxy().BlackHole()
	id := e.submit(`{"id":"ack-1","object":"ack","payload":{"n":1}}`)
	e.waitState(id, api.OpDLQPending, 20*time.Second)
	heal := diskFault(t)
	e.kafka.Proxy().Heal()
	e.kafka.Proxy().ResetConnections()
	waitFor(t, 20*time.Second, "the letter on the topic", func() bool { return len(e.lettersOf(id)) > 0 })
	time.Sleep(3 * time.Second)
	if op := e.op(id); op.State != api.OpDLQPending {
		t.Errorf("op during the disk fault = %s, want dlq_pending (its record fails)", op.State)
	}
	heal()
	e.waitState(id, api.OpDeadLettered, 20*time.Second)
	if n := len(e.lettersOf(id)); n != 1 {
		t.Errorf("letters of %s on the topic = %d, want 1 (only the record is retried)", id, n)
	}
}

// TestHotObjectDrain (issue 15 item 6): a backlog of 150 dead letters of
// one object is published in a few produce requests (not one per letter),
// in seq order.
func TestHotObjectDrain(t *testing.T) {
	const n = 150
	e := newEnv(t, envOptions{})
	e.app.SetRespond(func(context.Context, opstest.Delivery) int { return http.StatusBadRequest })
	e.kafka.Proxy().BlackHole()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.submit(fmt.Sprintf(`{"id":"hot-%03d","object":"hot","payload":{"i":%d}}`, i, i))
	}
	waitFor(t, 60*time.Second, "all dlq_pending", func() bool { return e.metric("baton_dlq_pending", nil) == n })
	var produces atomic.Int64
	e.kafka.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		produces.Add(1)
		return nil, nil, false // observe only
	})
	e.kafka.Proxy().Heal()
	e.kafka.Proxy().ResetConnections()
	waitFor(t, 60*time.Second, "all published", func() bool { return e.metric("baton_dlq_published_total", nil) == n })
	t.Logf("%d letters of one object: %d produce requests", n, produces.Load())
	if p := produces.Load(); p > n/10 {
		t.Errorf("%d produce requests for %d letters of one object, want at most %d (batches, not one letter per round)", p, n, n/10)
	}
	msgs := readTopic(t, e.kafka.Addr(), e.cfg.DLQTopic)
	var seqs []uint64
	for _, m := range msgs {
		var v struct {
			Seq uint64 `json:"seq"`
		}
		if err := json.Unmarshal(m.Value, &v); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, v.Seq)
	}
	if len(seqs) != n {
		t.Fatalf("%d letters on the topic, want %d", len(seqs), n)
	}
	for i, sq := range seqs {
		if sq != uint64(i+1) {
			t.Fatalf("letter %d has seq %d, want %d: the object's letters out of order: %v", i, sq, i+1, seqs)
		}
	}
}
