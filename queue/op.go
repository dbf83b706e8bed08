package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// State is an op's state (GET /v1/ops/{id}).
type State string

const (
	Queued       State = "queued"        // accepted, waiting for a worker (or for an earlier op of its object)
	Running      State = "running"       // claimed by a worker
	Retrying     State = "retrying"      // failed, next attempt at NextAttemptAt
	Done         State = "done"          // delivered (2xx); finished
	DLQPending   State = "dlq_pending"   // failed for good, waiting to be published to the dead-letter topic
	DeadLettered State = "dead_lettered" // published to the dead-letter topic; finished
)

// States lists every state in life-cycle order.
var States = []State{Queued, Running, Retrying, Done, DLQPending, DeadLettered}

// Finished reports whether s is a final state (done or dead_lettered).
func (s State) Finished() bool { return s == Done || s == DeadLettered }

// blocks reports whether an op in state s holds back its object's later ops.
func (s State) blocks() bool { return s == Queued || s == Running || s == Retrying }

// Limits of an op's fields.
const (
	MaxIDLen        = 128       // characters of A-Z a-z 0-9 . _ : -
	MaxObjectBytes  = 256       // UTF-8 bytes, no control characters
	MaxPayloadBytes = 512 << 10 // raw JSON bytes (so a dead letter fits Kafka's 1 MiB default)
	MaxInfoBytes    = 16 << 10  // UTF-8 bytes; Baton's own bound
	MaxErrorBytes   = 4 << 10   // LastError is truncated to this (at a UTF-8 boundary)
)

// Op is one background operation.
type Op struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Info    string          `json:"info"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Seq is the per-object accept sequence, from 1.
	Seq uint64 `json:"seq"`
	// AcceptedAt is when the op was accepted (UTC, millisecond precision);
	// reset by Replay.
	AcceptedAt time.Time `json:"accepted_at"`
	State      State     `json:"state"`
	// Attempts counts attempts that finished with a failure.
	Attempts   int    `json:"attempts"`
	LastError  string `json:"last_error,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
	// NextAttemptAt is set while retrying.
	NextAttemptAt  time.Time `json:"next_attempt_at,omitzero"`
	FirstAttemptAt time.Time `json:"first_attempt_at,omitzero"`
	FinishedAt     time.Time `json:"finished_at,omitzero"`
	// LetterNote, set on a dead_lettered op, says how its dead letter
	// differs from the op (e.g. the payload was elided to fit the topic).
	LetterNote string `json:"letter_note,omitempty"`
	// Kept, on a dead_lettered op, says its dead letter went out without
	// the payload: the store holds the only whole copy, so the op is never
	// purged; Replay or Discard ends it.
	Kept bool `json:"kept,omitempty"`
	// BodyHash is the hex SHA-256 of the canonical (id, object, info,
	// payload): equal hashes mean the same submission.
	BodyHash string `json:"body_hash"`
	// Replays counts the replays of the op (each queued it again).
	Replays int `json:"replays,omitempty"`
	// History lists the op's finished attempts and replays, oldest first,
	// across replays (Attempts counts only the attempts since the last
	// replay: the retry policy's count). It keeps the last MaxHistory
	// entries; HistoryDropped counts the older ones let go.
	History        []Event `json:"history,omitempty"`
	HistoryDropped int     `json:"history_dropped,omitempty"`
}

// Event is one entry of an op's history: a finished attempt or a replay.
type Event struct {
	At time.Time `json:"at"`
	// Outcome is the state the attempt led to (done, retrying,
	// dlq_pending), or "replayed".
	Outcome    string `json:"outcome"`
	ErrorClass string `json:"error_class,omitempty"`
	// Error is the start of the attempt's error message (at most
	// MaxEventErrorBytes).
	Error string `json:"error,omitempty"`
}

// Outcome of a replay in an op's history.
const Replayed = "replayed"

// MaxHistory is how many history entries an op keeps; MaxEventErrorBytes
// bounds the error message of one.
const (
	MaxHistory         = 50
	MaxEventErrorBytes = 256
)

// record appends ev to the op's history, dropping the oldest beyond
// MaxHistory.
func (op *Op) record(ev Event) {
	ev.Error = truncate(ev.Error, MaxEventErrorBytes)
	op.History = append(op.History, ev)
	if n := len(op.History) - MaxHistory; n > 0 {
		op.History = append([]Event(nil), op.History[n:]...)
		op.HistoryDropped += n
	}
}

// SubmitRequest is the body of a submission.
type SubmitRequest struct {
	ID      string          // optional: empty means a generated UUIDv7
	Object  string          // required
	Info    string          // optional free text
	Payload json.RawMessage // optional JSON value (absent = null)
}

// FieldError reports an invalid SubmitRequest field (HTTP 400 naming the
// field). It wraps [ErrInvalid].
type FieldError struct {
	Field  string // "id", "object", "info" or "payload"
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("queue: %s: %s", e.Field, e.Reason) }
func (e *FieldError) Unwrap() error { return ErrInvalid }

// ValidID reports whether id is a valid op id: 1–128 characters of
// A-Z a-z 0-9 . _ : -
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLen {
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

// ValidObject reports why object is not a valid monitor object name (1–256
// bytes of UTF-8 without control characters), or nil.
func ValidObject(object string) error {
	switch {
	case object == "":
		return &FieldError{"object", "is required"}
	case len(object) > MaxObjectBytes:
		return &FieldError{"object", fmt.Sprintf("is %d bytes, at most %d allowed", len(object), MaxObjectBytes)}
	case !utf8.ValidString(object):
		return &FieldError{"object", "is not valid UTF-8"}
	}
	for _, r := range object {
		if unicode.IsControl(r) {
			return &FieldError{"object", fmt.Sprintf("contains control character %U", r)}
		}
	}
	return nil
}

// normalize validates r, fills a generated id and a null payload, and
// returns the body hash.
func (r *SubmitRequest) normalize() (string, error) {
	if r.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", fmt.Errorf("queue: generate id: %w", err)
		}
		r.ID = u.String()
	} else if !ValidID(r.ID) {
		if len(r.ID) > MaxIDLen {
			return "", &FieldError{"id", fmt.Sprintf("is %d characters, at most %d allowed", len(r.ID), MaxIDLen)}
		}
		return "", &FieldError{"id", "may only contain A-Z a-z 0-9 . _ : -"}
	}
	if err := ValidObject(r.Object); err != nil {
		return "", err
	}
	if len(r.Info) > MaxInfoBytes {
		return "", &FieldError{"info", fmt.Sprintf("is %d bytes, at most %d allowed", len(r.Info), MaxInfoBytes)}
	}
	if !utf8.ValidString(r.Info) {
		return "", &FieldError{"info", "is not valid UTF-8"}
	}
	if len(bytes.TrimSpace(r.Payload)) == 0 {
		r.Payload = json.RawMessage("null")
	}
	if len(r.Payload) > MaxPayloadBytes {
		return "", &FieldError{"payload", fmt.Sprintf("is %d bytes, at most %d allowed", len(r.Payload), MaxPayloadBytes)}
	}
	canon, err := canonicalJSON(r.Payload)
	if err != nil {
		return "", &FieldError{"payload", "is not valid JSON: " + err.Error()}
	}
	return bodyHash(r.ID, r.Object, r.Info, canon), nil
}

// canonicalJSON re-encodes a JSON value with sorted object keys, no
// insignificant whitespace, numbers kept as written and minimal string
// escaping, so that equal values hash equally.
func canonicalJSON(raw []byte) ([]byte, error) {
	if !json.Valid(raw) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		return nil, errors.New("invalid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func bodyHash(fields ...any) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range fields {
		var b []byte
		switch f := f.(type) {
		case string:
			b = []byte(f)
		case []byte:
			b = f
		}
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// truncate cuts s to at most n bytes at a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func msTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
