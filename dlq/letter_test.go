package dlq_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/dlq"
)

func sampleLetter(id, object string) dlq.Letter {
	return dlq.Letter{
		ID: id, Object: object, Info: "reindex " + object,
		Payload:        json.RawMessage(`{"doc":{"title":"héllo","n":[1,2.5]}}`),
		Seq:            7,
		AcceptedAt:     api.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 678_000_000, time.UTC)),
		Attempts:       6,
		LastError:      "app answered HTTP 503: busy",
		ErrorClass:     "HTTP503",
		FirstAttemptAt: api.NewTime(time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC)),
		Sidecar:        "node-1",
	}
}

func TestLetterEncoding(t *testing.T) {
	l := sampleLetter("op-1", "article/42")
	m, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Key) != "article/42" {
		t.Errorf("key = %q, want the object", m.Key)
	}
	wantValue := `{"id":"op-1","object":"article/42","info":"reindex article/42",` +
		`"payload":{"doc":{"title":"héllo","n":[1,2.5]}},"seq":7,"accepted_at":"2025-01-02T03:04:05.678Z",` +
		`"attempts":6,"last_error":"app answered HTTP 503: busy","error_class":"HTTP503",` +
		`"first_attempt_at":"2025-01-02T03:04:06.000Z","sidecar":"node-1"}`
	if string(m.Value) != wantValue {
		t.Errorf("value =\n%s\nwant\n%s", m.Value, wantValue)
	}
	wantHeaders := []kafka.Header{
		{Key: "baton-op-id", Value: []byte("op-1")},
		{Key: "baton-object", Value: []byte("article/42")},
		{Key: "baton-error-class", Value: []byte("HTTP503")},
		{Key: "baton-error-message", Value: []byte("app answered HTTP 503: busy")},
		{Key: "baton-attempts", Value: []byte("6")},
		{Key: "baton-sidecar", Value: []byte("node-1")},
	}
	if !reflect.DeepEqual(m.Headers, wantHeaders) {
		t.Errorf("headers = %v, want %v", m.Headers, wantHeaders)
	}
	got, err := dlq.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, l) {
		t.Errorf("Decode(Encode(l)) = %+v, want %+v", got, l)
	}
	// A letter of an op that never started: first_attempt_at is null.
	l.FirstAttemptAt = api.Time{}
	l.Payload = nil
	m, _ = l.Encode()
	if !strings.Contains(string(m.Value), `"first_attempt_at":null`) || !strings.Contains(string(m.Value), `"payload":null`) {
		t.Errorf("value = %s, want null first_attempt_at and payload", m.Value)
	}
	// A long error is cut in the header only.
	l.LastError = strings.Repeat("é", dlq.MaxHeaderErrorBytes)
	m, _ = l.Encode()
	if h := m.Headers[3].Value; len(h) > dlq.MaxHeaderErrorBytes || !strings.HasPrefix(l.LastError, string(h)) {
		t.Errorf("error header of %d bytes is not a prefix within %d bytes", len(h), dlq.MaxHeaderErrorBytes)
	}
	if back, _ := dlq.Decode(m); back.LastError != l.LastError {
		t.Errorf("value lost the full last_error")
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := sampleLetter("op-1", "o").Encode()
	edit := func(f func(m *kafka.Message)) kafka.Message {
		m := good
		m.Headers = append([]kafka.Header(nil), good.Headers...)
		f(&m)
		return m
	}
	tests := map[string]kafka.Message{
		"not JSON":          edit(func(m *kafka.Message) { m.Value = []byte("oops") }),
		"bad id":            edit(func(m *kafka.Message) { m.Value = []byte(`{"id":"a b","object":"o"}`) }),
		"no object":         edit(func(m *kafka.Message) { m.Value = []byte(`{"id":"op-1"}`); m.Key = nil }),
		"key differs":       edit(func(m *kafka.Message) { m.Key = []byte("other") }),
		"op-id header":      edit(func(m *kafka.Message) { m.Headers[0].Value = []byte("op-2") }),
		"object header":     edit(func(m *kafka.Message) { m.Headers[1].Value = []byte("x") }),
		"bad time":          edit(func(m *kafka.Message) { m.Value = []byte(`{"id":"op-1","object":"o","accepted_at":"yesterday"}`) }),
		"wrong type of seq": edit(func(m *kafka.Message) { m.Value = []byte(`{"id":"op-1","object":"o","seq":"7"}`) }),
	}
	for name, m := range tests {
		_, err := dlq.Decode(m)
		de, ok := errors.AsType[*dlq.DecodeError](err)
		if !ok || !errors.Is(err, dlq.ErrInvalidLetter) {
			t.Errorf("%s: Decode = %v, want *DecodeError wrapping ErrInvalidLetter", name, err)
			continue
		}
		_ = de
	}
	// Unknown fields from newer writers are fine.
	m := edit(func(m *kafka.Message) {
		m.Value = []byte(`{"id":"op-1","object":"o","future":1}`)
	})
	if _, err := dlq.Decode(m); err != nil {
		t.Errorf("Decode with an unknown field = %v, want nil", err)
	}
}

// FuzzLetter: every letter Encode accepts decodes back to itself (times at
// millisecond precision in UTC).
func FuzzLetter(f *testing.F) {
	f.Add("op-1", "article/42", "info", `{"a":1}`, uint64(1), int64(1735787045678), 3, "boom", "HTTP503", "n1")
	f.Add("x", "ü", "", `null`, uint64(0), int64(0), 0, "", "", "")
	f.Fuzz(func(t *testing.T, id, object, info, payload string, seq uint64, accMs int64, attempts int, lastErr, class, sidecar string) {
		l := dlq.Letter{
			ID: id, Object: object, Info: info, Payload: json.RawMessage(payload), Seq: seq,
			Attempts: attempts, LastError: lastErr, ErrorClass: class, Sidecar: sidecar,
		}
		if accMs > 0 && accMs < 253402300799000 {
			l.AcceptedAt = api.NewTime(time.UnixMilli(accMs))
		}
		m, err := l.Encode()
		if err != nil {
			return // rejecting is fine
		}
		got, err := dlq.Decode(m)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)) = %v", l, err)
		}
		// encoding/json replaces invalid UTF-8 in strings; compare what
		// survives a JSON round trip.
		var want dlq.Letter
		b, _ := json.Marshal(l)
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		var compact = func(r json.RawMessage) string {
			var v any
			json.Unmarshal(r, &v)
			s, _ := json.Marshal(v)
			return string(s)
		}
		if compact(got.Payload) != compact(want.Payload) {
			t.Fatalf("payload %s, want %s", got.Payload, want.Payload)
		}
		got.Payload, want.Payload = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(Encode(l)) = %+v, want %+v", got, want)
		}
	})
}
