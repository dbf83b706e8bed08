package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/queue"
)

// wire is what an app decodes from a delivery body.
type wire struct {
	ID         string          `json:"id"`
	Object     string          `json:"object"`
	Info       string          `json:"info"`
	Payload    json.RawMessage `json:"payload"`
	Attempt    int             `json:"attempt"`
	Token      string          `json:"token"`
	Seq        uint64          `json:"seq"`
	AcceptedAt string          `json:"accepted_at"`
}

func decodeDelivery(t *testing.T, b []byte) wire {
	t.Helper()
	var w wire
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("delivery body %s: %v", b, err)
	}
	return w
}

func TestDeliveryBody(t *testing.T) {
	at := time.Date(2025, 1, 2, 15, 4, 5, 123456789, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name        string
		payload     string
		wantPayload string
	}{
		{"object with spaces and html", `{"b": [1, 2.50],  "s": "<&>"}`, `{"b": [1, 2.50],  "s": "<&>"}`},
		{"absent", ``, `null`},
		{"null", `null`, `null`},
		{"number as written", `1e400`, `1e400`},
		{"string", `"é\u00e9"`, `"é\u00e9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := queue.Op{ID: "op-1", Object: "a/b <ü>", Info: "line\n\"q\"", Payload: json.RawMessage(tc.payload), Seq: 42, AcceptedAt: at}
			b, err := deliveryBody(op, 3, 1<<62)
			if err != nil {
				t.Fatal(err)
			}
			w := decodeDelivery(t, b)
			if string(w.Payload) != tc.wantPayload {
				t.Errorf("payload = %s, want %s byte for byte", w.Payload, tc.wantPayload)
			}
			want := wire{ID: "op-1", Object: "a/b <ü>", Info: "line\n\"q\"", Attempt: 3, Token: "4611686018427387904", Seq: 42, AcceptedAt: "2025-01-02T14:04:05.123Z"}
			w.Payload = nil
			if got := w; got.ID != want.ID || got.Object != want.Object || got.Info != want.Info || got.Attempt != want.Attempt ||
				got.Token != want.Token || got.Seq != want.Seq || got.AcceptedAt != want.AcceptedAt {
				t.Errorf("delivery = %+v, want %+v", got, want)
			}
		})
	}
	if _, err := deliveryBody(queue.Op{ID: "x", Payload: json.RawMessage(`{`)}, 1, 1); err == nil {
		t.Error("deliveryBody accepted an invalid stored payload")
	}
}

// FuzzDeliveryBody: whatever the strings and payload, the body is valid JSON
// that decodes back to the same fields, with the payload byte for byte.
func FuzzDeliveryBody(f *testing.F) {
	f.Add("op-1", "article-42", "info", `{"a": 1}`, uint64(1), int64(7))
	f.Add("x", "\u2028<script>", "\x7f\ufffd", `"\ud800"`, uint64(0), int64(-1))
	f.Add("", "", "", ` [ ] `, uint64(1<<63), int64(0))
	f.Fuzz(func(t *testing.T, id, object, info, payload string, seq uint64, token int64) {
		// Queue ops are valid UTF-8 with a valid JSON payload.
		if !json.Valid([]byte(payload)) || !utf8.ValidString(id) || !utf8.ValidString(object) || !utf8.ValidString(info) {
			return
		}
		op := queue.Op{ID: id, Object: object, Info: info, Payload: json.RawMessage(payload), Seq: seq, AcceptedAt: time.UnixMilli(1e12)}
		b, err := deliveryBody(op, 1, token)
		if err != nil {
			t.Fatal(err)
		}
		w := decodeDelivery(t, b)
		if w.ID != id || w.Object != object || w.Info != info || w.Seq != seq || w.Token != strconv.FormatInt(token, 10) {
			t.Fatalf("round trip of %q %q %q %d %d = %+v", id, object, info, seq, token, w)
		}
		if string(w.Payload) != strings.Trim(payload, " \t\r\n") {
			t.Fatalf("payload %q came back as %q", payload, w.Payload)
		}
	})
}

func TestLockInfo(t *testing.T) {
	if got := lockInfo(queue.Op{ID: "a"}); got != "op a" {
		t.Errorf("lockInfo = %q", got)
	}
	long := lockInfo(queue.Op{ID: "a", Info: strings.Repeat("ü", lock.MaxInfoBytes)})
	if len(long) > lock.MaxInfoBytes || !utf8.ValidString(long) || !strings.HasPrefix(long, "op a: ü") {
		t.Errorf("lockInfo of a long info: %d bytes, valid %v", len(long), utf8.ValidString(long))
	}
	if a, b := newLeaseID(), newLeaseID(); len(a) != 32 || a == b || strings.Contains(a, "x-1") {
		t.Errorf("newLeaseID = %q, %q: want 128 random bits in hex, different each time", a, b)
	}
}

// TestEndReason: why a delivery ended, as the sidecar tells the holds the
// app re-entered (410 reason): nothing when the app answered.
func TestEndReason(t *testing.T) {
	bg := context.Background()
	hard, stop := context.WithCancel(bg)
	defer stop()
	cut := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(bg)
		cancel(cause)
		return ctx
	}
	expired, cancel := context.WithTimeout(bg, 0)
	defer cancel()
	<-expired.Done()
	stopped, stopNow := context.WithCancel(bg)
	stopNow()
	for _, c := range []struct {
		name            string
		hard, ctx, tctx context.Context
		want            string
	}{
		{"answered", hard, bg, bg, ""},
		{"revoked", hard, cut(&preemptedError{lock.Signal{Kind: signalRevoke, Reason: "hung"}}), bg, "revoked: hung"},
		{"revoked without a reason", hard, cut(&preemptedError{lock.Signal{Kind: signalRevoke}}), bg, "revoked"},
		{"preempted", hard, cut(&preemptedError{lock.Signal{Kind: "preempt-forceful"}}), bg, "preempted"},
		{"lost", hard, cut(&lostError{lock.ErrLockLost}), bg, "op delivery ended: background lock lost during the delivery: " + lock.ErrLockLost.Error()},
		{"app timeout", hard, bg, expired, "op delivery ended: the app did not answer within sidecar.app.timeout"},
		{"hard stop", stopped, stopped, bg, "shutdown"},
	} {
		if got := endReason(c.hard, c.ctx, c.tctx); got != c.want {
			t.Errorf("%s: endReason = %q, want %q", c.name, got, c.want)
		}
	}
}
