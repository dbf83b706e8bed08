package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
	"github.com/batonhq/baton/queue"
)

// submitTimeout bounds one submit or replay (the fsync included).
const submitTimeout = 30 * time.Second

// Routes are the /v1/ops endpoints (api/openapi.json) for the sidecar to
// mount (sidecar.Mount, Server.Mount): the sidecar routes each request
// once, authorizes it, sets the path value "id", and answers a handler's
// error with its one error writer (the queue's errors are mapped there).
// None when ops are disabled: the sidecar then answers 503 OpsDisabled.
func (d *Dispatcher) Routes() []httpapi.Route {
	if !d.Enabled() {
		return nil
	}
	h := &handler{d: d}
	return []httpapi.Route{
		{Method: http.MethodPost, Pattern: "/v1/ops", Handle: h.submit},
		{Method: http.MethodGet, Pattern: "/v1/ops", Handle: h.list},
		{Method: http.MethodGet, Pattern: "/v1/ops/{id}", Handle: h.get},
		{Method: http.MethodPost, Pattern: "/v1/ops/{id}/replay", Handle: h.replay},
		{Method: http.MethodPost, Pattern: "/v1/ops/{id}/discard", Handle: h.discard},
	}
}

// handler serves the /v1/ops endpoints (Routes).
type handler struct{ d *Dispatcher }

var (
	newError   = httpapi.New
	badRequest = httpapi.BadRequest
	writeJSON  = httpapi.WriteJSON
	decodeBody = httpapi.DecodeBody
)

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

func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
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
func opAction(w http.ResponseWriter, r *http.Request) (context.Context, context.CancelFunc, error) {
	id := r.PathValue("id")
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

func (h *handler) replay(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel, err := opAction(w, r)
	if err != nil {
		return err
	}
	defer cancel()
	op, err := h.d.store.Replay(ctx, r.PathValue("id"))
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
func (h *handler) discard(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel, err := opAction(w, r)
	if err != nil {
		return err
	}
	defer cancel()
	op, err := h.d.store.Discard(ctx, r.PathValue("id"))
	if err != nil {
		if se, ok := errors.AsType[*queue.StateError](err); ok {
			return newError(api.Conflict, "op %q is %s: only a dead_lettered op can be discarded "+
				"(an accepted op still to be delivered is never dropped)", se.ID, se.State)
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
