package dlq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
)

// Header names of a dead-letter message.
const (
	HeaderOpID         = "baton-op-id"
	HeaderObject       = "baton-object"
	HeaderErrorClass   = "baton-error-class"
	HeaderErrorMessage = "baton-error-message"
	HeaderAttempts     = "baton-attempts"
	HeaderSidecar      = "baton-sidecar"
)

// MaxHeaderErrorBytes bounds the baton-error-message header; the value's
// last_error carries the full message.
const MaxHeaderErrorBytes = 4 << 10

// timeLayout is RFC 3339 UTC with milliseconds (SPEC §3).
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// ErrInvalidLetter is wrapped by every error of [Decode].
var ErrInvalidLetter = errors.New("dlq: invalid dead letter")

// Letter is the value of a dead-letter message: the op as accepted plus
// what became of it. Times are encoded as RFC 3339 UTC with milliseconds;
// a zero FirstAttemptAt is encoded as null.
type Letter struct {
	ID             string          `json:"id"`
	Object         string          `json:"object"`
	Info           string          `json:"info"`
	Payload        json.RawMessage `json:"payload"`
	Seq            uint64          `json:"seq"`
	AcceptedAt     time.Time       `json:"accepted_at"`
	Attempts       int             `json:"attempts"`
	LastError      string          `json:"last_error"`
	ErrorClass     string          `json:"error_class"`
	FirstAttemptAt time.Time       `json:"first_attempt_at"`
	Sidecar        string          `json:"sidecar"`
}

// letterJSON is Letter's wire shape (times as strings).
type letterJSON struct {
	ID             string          `json:"id"`
	Object         string          `json:"object"`
	Info           string          `json:"info"`
	Payload        json.RawMessage `json:"payload"`
	Seq            uint64          `json:"seq"`
	AcceptedAt     *string         `json:"accepted_at"`
	Attempts       int             `json:"attempts"`
	LastError      string          `json:"last_error"`
	ErrorClass     string          `json:"error_class"`
	FirstAttemptAt *string         `json:"first_attempt_at"`
	Sidecar        string          `json:"sidecar"`
}

func fmtTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(timeLayout)
	return &s
}

func parseTime(field string, s *string) (time.Time, error) {
	if s == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", field, err)
	}
	return t.UTC(), nil
}

// MarshalJSON encodes l with RFC 3339 millisecond UTC times.
func (l Letter) MarshalJSON() ([]byte, error) {
	payload := l.Payload
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("null")
	}
	return json.Marshal(letterJSON{
		ID: l.ID, Object: l.Object, Info: l.Info, Payload: payload, Seq: l.Seq,
		AcceptedAt: fmtTime(l.AcceptedAt), Attempts: l.Attempts, LastError: l.LastError,
		ErrorClass: l.ErrorClass, FirstAttemptAt: fmtTime(l.FirstAttemptAt), Sidecar: l.Sidecar,
	})
}

// UnmarshalJSON decodes the wire shape; it accepts any RFC 3339 time.
func (l *Letter) UnmarshalJSON(b []byte) error {
	var w letterJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	acc, err := parseTime("accepted_at", w.AcceptedAt)
	if err != nil {
		return err
	}
	first, err := parseTime("first_attempt_at", w.FirstAttemptAt)
	if err != nil {
		return err
	}
	*l = Letter{
		ID: w.ID, Object: w.Object, Info: w.Info, Payload: w.Payload, Seq: w.Seq, AcceptedAt: acc,
		Attempts: w.Attempts, LastError: w.LastError, ErrorClass: w.ErrorClass, FirstAttemptAt: first, Sidecar: w.Sidecar,
	}
	return nil
}

// Encode returns the Kafka message of l: key = object, value = JSON, and the
// baton-* headers. The payload must be valid JSON (queue ops always are).
func (l Letter) Encode() (kafka.Message, error) {
	if err := l.validate(); err != nil {
		return kafka.Message{}, err
	}
	v, err := json.Marshal(l)
	if err != nil {
		return kafka.Message{}, fmt.Errorf("dlq: encode letter %q: %w", l.ID, err)
	}
	return kafka.Message{
		Key:   []byte(l.Object),
		Value: v,
		Headers: []kafka.Header{
			{Key: HeaderOpID, Value: []byte(l.ID)},
			{Key: HeaderObject, Value: []byte(l.Object)},
			{Key: HeaderErrorClass, Value: []byte(l.ErrorClass)},
			{Key: HeaderErrorMessage, Value: []byte(truncate(l.LastError, MaxHeaderErrorBytes))},
			{Key: HeaderAttempts, Value: []byte(strconv.Itoa(l.Attempts))},
			{Key: HeaderSidecar, Value: []byte(l.Sidecar)},
		},
	}, nil
}

// DecodeError reports a message that is not a valid dead letter. It wraps
// ErrInvalidLetter.
type DecodeError struct {
	Topic     string
	Partition int
	Offset    int64
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("dlq: %s/%d@%d is not a valid dead letter: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() []error { return []error{ErrInvalidLetter, e.Err} }

// Decode parses and validates a dead-letter message: the value must be a
// Letter with a valid op id and object, the key must be the object, and the
// baton-op-id / baton-object headers, where present, must agree with the
// value. Unknown JSON fields are ignored (newer writers may add some).
func Decode(m kafka.Message) (Letter, error) {
	fail := func(err error) (Letter, error) {
		return Letter{}, &DecodeError{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Err: err}
	}
	var l Letter
	if err := json.Unmarshal(m.Value, &l); err != nil {
		return fail(fmt.Errorf("value: %w", err))
	}
	if err := l.validate(); err != nil {
		return fail(err)
	}
	if string(m.Key) != l.Object {
		return fail(fmt.Errorf("key %q differs from object %q", m.Key, l.Object))
	}
	for _, h := range m.Headers {
		switch {
		case h.Key == HeaderOpID && string(h.Value) != l.ID:
			return fail(fmt.Errorf("header %s %q differs from id %q", h.Key, h.Value, l.ID))
		case h.Key == HeaderObject && string(h.Value) != l.Object:
			return fail(fmt.Errorf("header %s %q differs from object %q", h.Key, h.Value, l.Object))
		}
	}
	if len(l.Payload) == 0 {
		l.Payload = json.RawMessage("null")
	}
	return l, nil
}

func (l Letter) validate() error {
	if !validID(l.ID) {
		return fmt.Errorf("%w: id %q is not 1-128 characters of A-Z a-z 0-9 . _ : -", ErrInvalidLetter, l.ID)
	}
	if l.Object == "" || len(l.Object) > 256 || !utf8.ValidString(l.Object) {
		return fmt.Errorf("%w: object %q is not 1-256 bytes of UTF-8", ErrInvalidLetter, l.Object)
	}
	if len(l.Payload) > 0 && !json.Valid(l.Payload) {
		return fmt.Errorf("%w: payload of %q is not valid JSON", ErrInvalidLetter, l.ID)
	}
	return nil
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
