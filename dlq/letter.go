package dlq

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/batonhq/baton/api"
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

// ErrInvalidLetter is wrapped by every error of [Decode].
var ErrInvalidLetter = errors.New("dlq: invalid dead letter")

// Letter is the value of a dead-letter message: the op as accepted plus
// what became of it. Times are encoded as RFC 3339 UTC with milliseconds;
// a zero FirstAttemptAt is encoded as null (see [api.Time]).
type Letter struct {
	ID             string          `json:"id"`
	Object         string          `json:"object"`
	Info           string          `json:"info"`
	Payload        json.RawMessage `json:"payload"`
	Seq            uint64          `json:"seq"`
	AcceptedAt     api.Time        `json:"accepted_at"`
	Attempts       int             `json:"attempts"`
	LastError      string          `json:"last_error"`
	ErrorClass     string          `json:"error_class"`
	FirstAttemptAt api.Time        `json:"first_attempt_at"`
	Sidecar        string          `json:"sidecar"`
	// Elided says the letter did not fit the topic's message limit with
	// its payload: Payload is null and PayloadBytes / PayloadSHA256 name
	// the payload the op was accepted with (the sidecar keeps the op, past
	// queue.retention, until it is replayed by id or discarded). Info and
	// LastError may also be cut (see [Letter.Elide]).
	Elided        bool   `json:"payload_elided,omitempty"`
	PayloadBytes  int    `json:"payload_bytes,omitempty"`
	PayloadSHA256 string `json:"payload_sha256,omitempty"`
}

// MarshalJSON encodes l without HTML escaping: '<', '>' and '&' stay one
// byte each (json.Marshal would make each a 6-byte \u escape, multiplying an
// HTML-like payload by up to six). An empty payload is encoded as null. Note
// that json.Marshal(l) re-escapes this output; [Letter.Encode] calls
// MarshalJSON directly.
func (l Letter) MarshalJSON() ([]byte, error) {
	if len(bytes.TrimSpace(l.Payload)) == 0 {
		l.Payload = json.RawMessage("null")
	}
	type plain Letter // Letter's fields without its methods
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(plain(l)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Encode returns the Kafka message of l: key = object, value = JSON, and the
// baton-* headers. The payload must be valid JSON (queue ops always are).
func (l Letter) Encode() (kafka.Message, error) {
	if err := l.validate(); err != nil {
		return kafka.Message{}, err
	}
	v, err := l.MarshalJSON()
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

// Message-size accounting (what a broker compares with max.message.bytes:
// the record batch, whose header is 61 bytes, holding the record).
const (
	batchOverhead  = 61
	recordOverhead = 32 // length, attributes, timestamp and offset deltas, key/value lengths, header count (varints, rounded up)
	headerOverhead = 10 // key and value length varints
	// ElidedMax bounds Info and LastError in an elided letter.
	ElidedMax = 1 << 10
)

// MessageSize is the size a broker counts against max.message.bytes for m
// sent alone in a record batch (rounded up: never less than the real one).
func MessageSize(m kafka.Message) int {
	n := batchOverhead + recordOverhead + len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// Elide returns l without its payload: Payload null, Elided true,
// PayloadBytes and PayloadSHA256 (hex SHA-256 of the payload bytes) naming
// it. Info and LastError are cut to ElidedMax bytes. It is the form of a
// letter too large for the topic.
func (l Letter) Elide() Letter {
	if l.Elided {
		return l
	}
	sum := sha256.Sum256(l.Payload)
	l.PayloadBytes, l.PayloadSHA256 = len(l.Payload), hex.EncodeToString(sum[:])
	l.Payload, l.Elided = json.RawMessage("null"), true
	l.Info, l.LastError = truncate(l.Info, ElidedMax), truncate(l.LastError, ElidedMax)
	return l
}

// ErrTooLarge is wrapped by Fit's error for a letter that does not fit the
// limit even without its payload.
var ErrTooLarge = errors.New("dlq: dead letter too large for the topic")

// Fit returns the letter to publish under a message limit of max bytes
// (see [MessageSize]) and its message: l itself when it fits, else
// l.Elide(). An elided letter that still does not fit is an error wrapping
// ErrTooLarge.
func Fit(l Letter, max int) (Letter, kafka.Message, error) {
	m, err := l.Encode()
	if err != nil {
		return l, m, err
	}
	if MessageSize(m) <= max {
		return l, m, nil
	}
	full := MessageSize(m)
	l = l.Elide()
	if m, err = l.Encode(); err != nil {
		return l, m, err
	}
	if n := MessageSize(m); n > max {
		return l, m, fmt.Errorf("%w: letter %q is %d bytes, %d without its payload; the limit is %d", ErrTooLarge, l.ID, full, n, max)
	}
	return l, m, nil
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
