package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// httpError is an answer other than 2xx: a status and the JSON body.
type httpError struct {
	status int
	body   api.Error
	cause  error // for the log; may be nil
}

func (e *httpError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.status, e.body.Kind, e.body.Message, e.cause)
	}
	return fmt.Sprintf("%d %s: %s", e.status, e.body.Kind, e.body.Message)
}

func (e *httpError) Unwrap() error { return e.cause }

func newError(kind, format string, args ...any) *httpError {
	return &httpError{status: api.Status(kind), body: api.Error{Kind: kind, Message: fmt.Sprintf(format, args...)}}
}

// badRequest is a 400 naming the field or parameter at fault.
func badRequest(field, format string, args ...any) *httpError {
	e := newError(api.BadRequest, "%s: "+format, append([]any{field}, args...)...)
	e.body.Field = field
	return e
}

func lockLost(reason, format string, args ...any) *httpError {
	e := newError(api.LockLost, format, args...)
	e.body.Reason = reason
	return e
}

// toHTTPError is the one place mapping errors to an answer.
func (s *Server) toHTTPError(r *http.Request, err error) *httpError {
	if he, ok := errors.AsType[*httpError](err); ok {
		return he
	}
	if ile, ok := errors.AsType[*lock.InstanceLockError](err); ok {
		if s.stopping() && errors.Is(ile.Err, context.Canceled) {
			return shuttingDown(err)
		}
		if r.Context().Err() != nil {
			return clientGone(err)
		}
		waited := ile.Waited.Milliseconds()
		pos := ile.Position
		e := newError(api.InstanceLockException, "%s lock on %q not granted after %d ms (position %d in line); retry later or wait longer (wait_ms)",
			ile.Type, ile.Object, waited, pos)
		e.body.Object, e.body.Type, e.body.WaitedMS, e.body.Position = ile.Object, ile.Type.String(), &waited, &pos
		e.body.Holder = holderOf(ile.Holder)
		e.cause = err
		return e
	}
	switch {
	case errors.Is(err, lock.ErrInvalidObject):
		return badRequest("object", "%v", err)
	case errors.Is(err, lock.ErrClosed):
		return shuttingDown(err)
	case errors.Is(err, lock.ErrUnavailable), errors.Is(err, lock.ErrSessionLost):
		e := newError(api.ZooKeeperUnavailable, "zookeeper is unavailable: %v; retry later", err)
		e.cause = err
		return e
	case r.Context().Err() != nil:
		return clientGone(err)
	case errors.Is(err, context.DeadlineExceeded):
		e := newError(api.ZooKeeperUnavailable, "zookeeper did not answer in time: %v; retry later", err)
		e.cause = err
		return e
	}
	e := newError(api.InternalError, "%v", err)
	e.cause = err
	return e
}

func shuttingDown(cause error) *httpError {
	e := newError(api.ShuttingDown, "the sidecar is shutting down; retry against the next one")
	e.cause = cause
	return e
}

// clientGone answers a request whose caller went away; nobody reads it.
func clientGone(cause error) *httpError {
	e := newError(api.BadRequest, "request cancelled by the client")
	e.cause = cause
	return e
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	he := s.toHTTPError(r, err)
	level := slog.LevelDebug
	if he.status >= 500 {
		level = slog.LevelWarn
		if he.status == http.StatusInternalServerError {
			level = slog.LevelError
		}
	}
	s.log.Log(r.Context(), level, "request failed", "method", r.Method, "path", r.URL.Path,
		"status", he.status, "error", he.body.Kind, "message", he.body.Message, "cause", he.cause)
	writeJSON(w, he.status, he.body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // our own types: cannot happen
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.Error{Kind: api.InternalError, Message: "encoding the answer: " + err.Error()})
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// decodeBody reads a JSON object into v: at most api.MaxBody bytes, unknown
// fields refused, an empty body meaning {}, whatever the Content-Type.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			e := newError(api.PayloadTooLarge, "body: over %d bytes (1 MiB)", api.MaxBody)
			e.body.Field = "body"
			return e
		}
		return badRequest("body", "reading the body: %v", err)
	}
	return decodeJSON(body, v)
}

func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("body", "trailing data after the JSON object")
	}
	return nil
}

func jsonError(err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return badRequest("body", "malformed JSON at byte %d: %v", se.Offset, se)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return badRequest("body", "want a JSON object, got %s", te.Value)
		}
		return badRequest(te.Field, "want %s, got JSON %s", jsonKind(te.Type.String()), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field := strings.Trim(name, `"`)
		return badRequest(field, "unknown field (see the API reference for the accepted fields)")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badRequest("body", "malformed JSON: unexpected end of input")
	}
	return badRequest("body", "malformed JSON: %v", err)
}

func jsonKind(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "int64", "int":
		return "a whole number"
	case "string":
		return "a string"
	}
	return goType
}

// msParam validates a millisecond count.
func msParam(field string, v, lo, hi int64) (time.Duration, error) {
	if v < lo || v > hi {
		return 0, badRequest(field, "%d is out of range: want %d to %d milliseconds", v, lo, hi)
	}
	return time.Duration(v) * time.Millisecond, nil
}
