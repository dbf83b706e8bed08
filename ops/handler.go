package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
	"github.com/batonhq/baton/queue"
)

// submitTimeout bounds one submit or replay (the fsync included).
const submitTimeout = 30 * time.Second

// handler serves the /v1/ops endpoints. The sidecar routes to it with the
// path value "id" set; used on its own it parses the path itself.
type handler struct{ d *Dispatcher }

// httpError is an answer other than 2xx, as the sidecar's.
type httpError = httpapi.Error

var (
	newError   = httpapi.New
	badRequest = httpapi.BadRequest
	writeJSON  = httpapi.WriteJSON
	decodeBody = httpapi.DecodeBody
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.serve(w, r); err != nil {
		he := h.toHTTPError(err)
		level := slog.LevelDebug
		if he.Status >= 500 {
			level = slog.LevelWarn
		}
		h.d.log.Log(r.Context(), level, "ops request failed", "method", r.Method, "path", r.URL.Path,
			"status", he.Status, "error", he.Body.Kind, "message", he.Body.Message)
		writeJSON(w, he.Status, he.Body)
	}
}

// route returns the op id ("" for /v1/ops) and the action after it:
// "replay", "discard" or "" (none).
func route(r *http.Request) (id, action string, err error) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/ops")
	if !ok || (rest != "" && rest[0] != '/') {
		return "", "", newError(api.NotFound, "no such path %q", r.URL.Path)
	}
	segs := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if rest == "" || rest == "/" {
		segs = nil
	}
	switch {
	case len(segs) == 0:
	case len(segs) == 1 || len(segs) == 2 && (segs[1] == "replay" || segs[1] == "discard"):
		id, err = url.PathUnescape(segs[0])
		if err != nil {
			return "", "", newError(api.NotFound, "no such path %q", r.URL.Path)
		}
		if len(segs) == 2 {
			action = segs[1]
		}
	default:
		return "", "", newError(api.NotFound, "no such path %q", r.URL.Path)
	}
	if v := r.PathValue("id"); v != "" {
		id = v
	}
	return id, action, nil
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) error {
	if h.d.store == nil {
		return newError(api.OpsDisabled, "background operations are disabled: set sidecar.app.url to enable them")
	}
	id, action, err := route(r)
	if err != nil {
		return err
	}
	want := http.MethodPost
	if id != "" && action == "" {
		want = http.MethodGet
	}
	if id == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return h.list(w, r)
	}
	if r.Method != want && !(want == http.MethodGet && r.Method == http.MethodHead) {
		if id == "" {
			want = "GET, POST"
		}
		w.Header().Set("Allow", want)
		return newError(api.MethodNotAllowed, "method %s is not allowed on %s; use %s", r.Method, r.URL.Path, want)
	}
	switch {
	case id == "":
		return h.submit(w, r)
	case action == "replay":
		return h.replay(w, r, id)
	case action == "discard":
		return h.discard(w, r, id)
	default:
		return h.get(w, id)
	}
}

func (h *handler) submit(w http.ResponseWriter, r *http.Request) error {
	var req api.OpRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), submitTimeout)
	defer cancel()
	op, created, err := h.d.store.Submit(ctx, queue.SubmitRequest{ID: req.ID, Object: req.Object, Info: req.Info, Payload: req.Payload})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/ops/"+url.PathEscape(op.ID))
	if !created {
		writeJSON(w, http.StatusOK, api.OpAck{ID: op.ID, State: string(op.State)})
		return nil
	}
	h.d.m.transition(queue.Queued)
	h.d.log.Debug("op accepted", "op_id", op.ID, "object", op.Object, "seq", op.Seq)
	writeJSON(w, http.StatusAccepted, api.OpAck{ID: op.ID, State: string(op.State)})
	return nil
}

func (h *handler) get(w http.ResponseWriter, id string) error {
	if !queue.ValidID(id) {
		return newError(api.NotFound, "no op %q: op ids are 1-128 characters of A-Z a-z 0-9 . _ : -", id)
	}
	op, err := h.d.store.Get(id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, apiOp(op))
	return nil
}

// QueueInfo summarises the queue for /healthz; nil when d is nil or ops
// are disabled.
func (d *Dispatcher) QueueInfo() *api.QueueInfo {
	if d == nil || d.store == nil {
		return nil
	}
	st := d.store.Stats()
	return &api.QueueInfo{
		Queued:     st.ByState[queue.Queued] + st.ByState[queue.Running] + st.ByState[queue.Retrying],
		DLQPending: st.ByState[queue.DLQPending], DeadLettered: st.ByState[queue.DeadLettered], Kept: st.Kept,
		PayloadBytes: st.PayloadBytes, MaxBytes: st.MaxBytes, OldestUnfinishedAt: api.NewTime(st.OldestUnfinished),
	}
}

// apiOp is the wire form of op.
func apiOp(op queue.Op) api.Op {
	hist := make([]api.OpEvent, len(op.History))
	for i, e := range op.History {
		hist[i] = api.OpEvent{At: api.NewTime(e.At), Outcome: e.Outcome, ErrorClass: e.ErrorClass, Error: e.Error}
	}
	return api.Op{
		ID: op.ID, Object: op.Object, State: string(op.State), Attempts: op.Attempts, LastError: op.LastError,
		NextAttemptAt: api.NewTime(op.NextAttemptAt), AcceptedAt: api.NewTime(op.AcceptedAt), Seq: int64(op.Seq),
		LetterNote: op.LetterNote, Kept: op.Kept, ErrorClass: op.ErrorClass, Replays: op.Replays, History: hist,
		HistoryDropped: op.HistoryDropped,
	}
}

// list serves GET /v1/ops?state=&object=&limit=&after=: a page of ops in id
// order. An unknown or repeated parameter, or a bad value, is a 400 naming it.
func (h *handler) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var opts queue.ListOptions
	for name, vs := range q {
		if len(vs) != 1 {
			return badRequest(name, "is given %d times; give it once", len(vs))
		}
		v := vs[0]
		switch name {
		case "state":
			opts.State = queue.State(v)
		case "object":
			opts.Object = v
		case "after":
			opts.After = v
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > queue.MaxListLimit {
				return badRequest("limit", "%q is not a whole number from 1 to %d", v, queue.MaxListLimit)
			}
			opts.Limit = n
		default:
			return badRequest(name, "is not a parameter of GET /v1/ops (state, object, limit, after)")
		}
	}
	ops, next, err := h.d.store.List(opts)
	if err != nil {
		return err
	}
	out := api.OpList{Ops: make([]api.Op, len(ops)), Next: next}
	for i, op := range ops {
		out.Ops[i] = apiOp(op)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// opAction begins an action on one op (replay, discard): an empty body, a
// well-formed id, and a context that outlives the caller's connection.
func opAction(w http.ResponseWriter, r *http.Request, id string) (context.Context, context.CancelFunc, error) {
	var none struct{}
	if err := decodeBody(w, r, &none); err != nil {
		return nil, nil, err
	}
	if !queue.ValidID(id) {
		return nil, nil, newError(api.NotFound, "no op %q: op ids are 1-128 characters of A-Z a-z 0-9 . _ : -", id)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), submitTimeout)
	return ctx, cancel, nil
}

func (h *handler) replay(w http.ResponseWriter, r *http.Request, id string) error {
	ctx, cancel, err := opAction(w, r, id)
	if err != nil {
		return err
	}
	defer cancel()
	op, err := h.d.store.Replay(ctx, id)
	if err != nil {
		return err
	}
	h.d.m.transition(queue.Queued)
	h.d.log.Info("dead-lettered op replayed", "op_id", op.ID, "object", op.Object, "seq", op.Seq)
	w.Header().Set("Location", "/v1/ops/"+url.PathEscape(op.ID))
	writeJSON(w, http.StatusAccepted, api.OpAck{ID: op.ID, State: string(op.State)})
	return nil
}

// discard deletes a dead_lettered op and its payload for good (POST
// /v1/ops/{id}/discard), the way out for an op kept because its dead letter
// lacks the payload. It is an operator's action: audit-logged at WARN with
// the caller.
func (h *handler) discard(w http.ResponseWriter, r *http.Request, id string) error {
	ctx, cancel, err := opAction(w, r, id)
	if err != nil {
		return err
	}
	defer cancel()
	op, err := h.d.store.Discard(ctx, id)
	if err != nil {
		if se, ok := errors.AsType[*queue.StateError](err); ok {
			return newError(api.Conflict, "op %q is %s: only a dead_lettered op can be discarded (an accepted op still to be delivered is never dropped)", se.ID, se.State)
		}
		return err
	}
	sum := sha256.Sum256(op.Payload)
	out := api.OpDiscarded{
		ID: op.ID, Object: op.Object, Discarded: true, PayloadBytes: len(op.Payload),
		PayloadSHA256: hex.EncodeToString(sum[:]),
	}
	out.Message = fmt.Sprintf("op %s (object %q, %d failed attempts) and its %d-byte payload are deleted for good; it cannot be replayed by id any more",
		op.ID, op.Object, op.Attempts, out.PayloadBytes)
	if op.Kept {
		out.Message += "; its dead letter on the topic has no payload, so no copy of the payload is left"
	}
	h.d.log.Warn("audit: dead-lettered op discarded", "op_id", op.ID, "object", op.Object, "kept", op.Kept,
		"payload_bytes", out.PayloadBytes, "payload_sha256", out.PayloadSHA256, "attempts", op.Attempts,
		"caller", httpapi.Caller(r.Context()))
	writeJSON(w, http.StatusOK, out)
	return nil
}

// toHTTPError maps the queue's errors to answers (api/openapi.json).
func (h *handler) toHTTPError(err error) *httpError {
	if he, ok := errors.AsType[*httpError](err); ok {
		return he
	}
	if fe, ok := errors.AsType[*queue.FieldError](err); ok {
		return badRequest(fe.Field, "%s", fe.Reason)
	}
	if se, ok := errors.AsType[*queue.StateError](err); ok && errors.Is(err, queue.ErrNotDeadLettered) {
		return newError(api.Conflict, "op %q is %s: only a dead_lettered op can be replayed", se.ID, se.State)
	}
	switch {
	case errors.Is(err, queue.ErrConflict):
		return newError(api.Conflict, "%v: use another id, or resubmit the same body", err)
	case errors.Is(err, queue.ErrNotFound):
		return newError(api.NotFound, "no such op (finished ops are kept for queue.retention)")
	case errors.Is(err, queue.ErrQueueFull):
		if fe, ok := errors.AsType[*queue.FullError](err); ok && fe.Key == "queue.max.bytes" {
			e := newError(api.QueueFull, "the queue keeps %d payload bytes; this op's %d would pass queue.max.bytes (%d): "+
				"retry once ops complete, or raise queue.max.bytes (dead-lettered ops keep their payload for queue.retention: "+
				"replay or discard them)", fe.Used, fe.Adding, fe.Limit)
			e.Status = http.StatusInsufficientStorage
			return e
		}
		return newError(api.QueueFull, "%v; retry later, or raise queue.max.ops", err)
	case errors.Is(err, queue.ErrClosed):
		return newError(api.QueueUnavailable, "the queue is closed (shutting down); retry against the restarted sidecar")
	}
	return newError(api.QueueUnavailable, "the queue failed: %v; retry later", err)
}
