package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/queue"
)

// httpError is an answer other than 2xx (shared with the ops handler).
type httpError = httpapi.Error

var (
	newError   = httpapi.New
	badRequest = httpapi.BadRequest
	writeJSON  = httpapi.WriteJSON
	decodeBody = httpapi.DecodeBody
)

func lockLost(reason, format string, args ...any) *httpError {
	e := newError(api.LockLost, format, args...)
	e.Body.Reason = reason
	return e
}

// errorWriter is the server's one error writer: every handler's error, the
// router's 404 and 405 and the mounted op endpoints' errors are mapped to
// an answer (toHTTPError), logged (5xx at WARN, 500 at ERROR, the rest at
// DEBUG) and written here.
type errorWriter struct {
	log   *slog.Logger
	drain *drainState
}

// toHTTPError is the one place mapping errors to an answer.
func (ew errorWriter) toHTTPError(r *http.Request, err error) *httpError {
	if he, ok := errors.AsType[*httpError](err); ok {
		return he
	}
	if he := protocolError(err); he != nil {
		return he
	}
	if ile, ok := errors.AsType[*lock.InstanceLockError](err); ok {
		if ew.drain.stopping() && errors.Is(ile.Err, context.Canceled) {
			return shuttingDown(err)
		}
		if r.Context().Err() != nil {
			return clientGone(err)
		}
		waited := ile.Waited.Milliseconds()
		pos := ile.Position
		e := newError(api.InstanceLockException, "%s lock on %q not granted after %d ms (position %d in line); retry later or wait longer (wait_ms)",
			ile.Type, ile.Object, waited, pos)
		e.Body.Object, e.Body.Type, e.Body.WaitedMS, e.Body.Position = ile.Object, ile.Type.String(), &waited, &pos
		e.Body.Holder = holderOf(ile.Holder)
		e.Cause = err
		return e
	}
	switch {
	case errors.Is(err, lock.ErrInvalidObject):
		return badRequest("object", "%v", err)
	case errors.Is(err, lock.ErrClosed):
		return shuttingDown(err)
	case errors.Is(err, lock.ErrUnavailable), errors.Is(err, lock.ErrSessionLost):
		e := newError(api.ZooKeeperUnavailable, "zookeeper is unavailable: %v; retry later", err)
		e.Cause = err
		return e
	case r.Context().Err() != nil:
		return clientGone(err)
	case errors.Is(err, context.DeadlineExceeded):
		e := newError(api.ZooKeeperUnavailable, "zookeeper did not answer in time: %v; retry later", err)
		e.Cause = err
		return e
	}
	e := newError(api.InternalError, "%v", err)
	e.Cause = err
	return e
}

// keyLockProtocol is the property the protocol refusals name.
const keyLockProtocol = "zookeeper.lock.protocol"

// protocolError maps the lock engine's protocol refusals to their 409s
// (nil: err is none of them): a shared acquire on a plugin-protocol sidecar,
// a plugin-layout feature asked of a native one, a node of the other
// protocol under the object (never a grant).
func protocolError(err error) *httpError {
	var e *httpError
	switch {
	case errors.Is(err, lock.ErrSharedNeedsNative):
		e = newError(api.SharedNeedsNative, "a shared lock needs %s=native: this sidecar runs the plugin protocol, whose layout has one "+
			"holder (one privateLock node per object), so a plugin writer could take the object beside shared holders; acquire "+
			"exclusive, or switch the lock root's sidecars to native once no plugin writer is left (README, Native protocol)", keyLockProtocol)
	case errors.Is(err, lock.ErrNotNative):
		e = newError(api.NotNative, "%v: this sidecar runs %s=native, which has no privateLock to write revocations and preemptions "+
			"to (a feature of the plugin layout)", err, keyLockProtocol)
	case errors.Is(err, lock.ErrForeignNode):
		e = newError(api.ForeignNode, "%v; not granted: every sidecar of a lock root must run one protocol (%s), and a native root "+
			"must have no plugin writer left: stop them, or run this root with the plugin protocol (README, Native protocol)", err, keyLockProtocol)
	default:
		return nil
	}
	e.Body.Key, e.Cause = keyLockProtocol, err
	return e
}

// notNative refuses field of a request to a native-protocol sidecar:
// what (a feature of the plugin layout) cannot work there.
func notNative(field, what string) *httpError {
	e := newError(api.NotNative, "%s: not with %s=native: %s, which the native protocol does not have; leave %s out, or use a "+
		"lock root run with the plugin protocol", field, keyLockProtocol, what, field)
	e.Body.Field, e.Body.Key = field, keyLockProtocol
	return e
}

// mountedError maps the error of a mounted op endpoint (the queue's:
// api/openapi.json) to its answer for the error writer; nil stays nil. An
// error that is none of the queue's refusals means the queue failed: 503
// QueueUnavailable, which a client retries.
func mountedError(err error) error {
	if err == nil {
		return nil
	}
	if he, ok := errors.AsType[*httpError](err); ok {
		return he
	}
	if fe, ok := errors.AsType[*queue.FieldError](err); ok {
		return badRequest(fe.Field, "%s", fe.Reason)
	}
	if se, ok := errors.AsType[*queue.StateError](err); ok && errors.Is(err, queue.ErrNotDeadLettered) {
		return newError(api.Conflict, "op %q is %s: only a dead_lettered op can be replayed", se.ID, se.State)
	}
	var e *httpError
	switch {
	case errors.Is(err, queue.ErrConflict):
		e = newError(api.Conflict, "%v: use another id, or resubmit the same body", err)
	case errors.Is(err, queue.ErrNotFound):
		e = newError(api.NotFound, "no such op (finished ops are kept for queue.retention)")
	case errors.Is(err, queue.ErrQueueFull):
		if fe, ok := errors.AsType[*queue.FullError](err); ok && fe.Key == "queue.max.bytes" {
			e = newError(api.QueueFull, "the queue keeps %d payload bytes; this op's %d would pass queue.max.bytes (%d): "+
				"retry once ops complete, or raise queue.max.bytes (dead-lettered ops keep their payload for queue.retention: "+
				"replay or discard them)", fe.Used, fe.Adding, fe.Limit)
			e.Status = http.StatusInsufficientStorage
		} else {
			e = newError(api.QueueFull, "%v; retry later, or raise queue.max.ops", err)
		}
	case errors.Is(err, queue.ErrClosed):
		e = newError(api.QueueUnavailable, "the queue is closed (shutting down); retry against the restarted sidecar")
	default:
		e = newError(api.QueueUnavailable, "the queue failed: %v; retry later", err)
	}
	e.Cause = err
	return e
}

func shuttingDown(cause error) *httpError {
	e := newError(api.ShuttingDown, "the sidecar is shutting down; retry against the next one")
	e.Cause = cause
	return e
}

// clientGone answers a request whose caller went away; nobody reads it.
func clientGone(cause error) *httpError {
	e := newError(api.BadRequest, "request cancelled by the client")
	e.Cause = cause
	return e
}

// write answers r with err.
func (ew errorWriter) write(w http.ResponseWriter, r *http.Request, err error) {
	he := ew.toHTTPError(r, err)
	level := slog.LevelDebug
	if he.Status >= 500 {
		level = slog.LevelWarn
		if he.Status == http.StatusInternalServerError {
			level = slog.LevelError
		}
	}
	path, msg := r.URL.Path, he.Body.Message
	if level >= slog.LevelInfo { // no live lease id in a line shown at info
		path, msg = redactLeaseIDs(path), redactLeaseIDs(msg)
	}
	ew.log.Log(r.Context(), level, "request failed", "method", r.Method, "path", path,
		"status", he.Status, "error", he.Body.Kind, "message", msg, "cause", he.Cause)
	writeJSON(w, he.Status, he.Body)
}

// msParam validates a millisecond count.
func msParam(field string, v, lo, hi int64) (time.Duration, error) {
	if v < lo || v > hi {
		e := badRequest(field, "%d is out of range: want %d to %d milliseconds", v, lo, hi)
		minMS, maxMS := lo, hi // copies: taking the parameters' addresses put them on the heap on every call
		e.Body.MinMS, e.Body.MaxMS = &minMS, &maxMS
		return 0, e
	}
	return time.Duration(v) * time.Millisecond, nil
}

// leaseIDsRE matches what a lease id's secret part looks like (32 hex
// digits), inside a lease id or alone.
var leaseIDsRE = regexp.MustCompile(`[0-9a-f]{32}`)

// logID is how a log line at info or above names a lease: its id
// redacted (redactLeaseIDs); debug lines carry the whole id as lease_id.
func logID(id string) string { return redactLeaseIDs(id) }

// redactLeaseIDs keeps the first 8 hex digits of each lease id in s, for
// logs: enough to tell leases apart, too little to use one.
func redactLeaseIDs(s string) string {
	return leaseIDsRE.ReplaceAllStringFunc(s, func(m string) string { return m[:8] + "…" })
}
