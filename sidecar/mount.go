package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
)

// Mount is what another package serves through the sidecar (the op
// dispatcher, ops.Dispatcher, is the one): endpoints, a readiness and a
// drain. Attach it with Server.Mount before Run.
type Mount interface {
	// Routes are the mount's handlers. Each is one of the mounted endpoints
	// of the sidecar's route table (method and pattern, e.g. "POST
	// /v1/ops/{id}/replay"), which routes and authorizes the request and
	// sets its path values; the handler's error is answered by the
	// sidecar's one error writer, mapped as the queue's (mountedError). A
	// mounted endpoint without a handler answers 503 OpsDisabled.
	Routes() []httpapi.Route
	// Ready reports why the mount cannot serve, or nil; an error makes
	// /readyz 503 QueueUnavailable with it as the reason.
	Ready() error
	// Drain is called when shutdown begins, concurrently with the wait for
	// lease holders; the engine is closed only after it returns (so
	// deliveries can finish or re-queue while they still hold their
	// locks). Its ctx ends at the shutdown grace.
	Drain(ctx context.Context)
	// QueueInfo summarises the op queue for /healthz; nil: ops disabled.
	QueueInfo() *api.QueueInfo
}

// mountPoint holds the Mount (none: ops disabled) and serves the route
// table's mounted endpoints from it.
type mountPoint struct {
	slots map[string]bool // "METHOD pattern" of the table's mounted endpoints
	cur   atomic.Pointer[mounted]
}

type mounted struct {
	m        Mount
	handlers map[string]handlerFunc
}

// get returns the Mount, nil if none.
func (mp *mountPoint) get() Mount {
	if c := mp.cur.Load(); c != nil {
		return c.m
	}
	return nil
}

// slot is the handler of the mounted endpoint method + pattern: the
// mount's handler, with the caller in its context for audit lines
// (httpapi.Caller); its errors are mapped by mountedError.
func (mp *mountPoint) slot(method, pattern string) handlerFunc {
	key := method + " " + pattern
	if mp.slots == nil {
		mp.slots = map[string]bool{}
	}
	mp.slots[key] = true
	return func(w http.ResponseWriter, r *http.Request) error {
		var h handlerFunc
		if c := mp.cur.Load(); c != nil {
			h = c.handlers[key]
		}
		if h == nil {
			return newError(api.OpsDisabled, "background operations are disabled: set sidecar.app.url to enable them")
		}
		return mountedError(h(w, r.WithContext(httpapi.WithCaller(r.Context(), who(r.Context())))))
	}
}

// Mount attaches m (the op dispatcher) to the API: its routes, its
// readiness in /readyz, its queue in /healthz, its drain in the
// shutdown. Call it once, before Run. A route of m that is not a mounted
// endpoint of the sidecar's route table is an error, and nothing is
// attached.
func (s *Server) Mount(m Mount) error {
	c := &mounted{m: m, handlers: map[string]handlerFunc{}}
	for _, rt := range m.Routes() {
		key := rt.Method + " " + rt.Pattern
		if !s.ops.slots[key] {
			return fmt.Errorf("sidecar: mount: %s is not a mounted endpoint of the route table (%s)",
				key, strings.Join(slices.Sorted(maps.Keys(s.ops.slots)), ", "))
		}
		c.handlers[key] = rt.Handle
	}
	if !s.ops.cur.CompareAndSwap(nil, c) {
		return errors.New("sidecar: mount: already mounted")
	}
	return nil
}

// auditReplay wraps the handler of POST /v1/ops/{id}/replay with an audit
// line naming the caller and the answer.
func auditReplay(log *slog.Logger, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		err := h(sw, r)
		status := sw.status
		if he, ok := errors.AsType[*httpError](err); ok {
			status = he.Status
		}
		log.Warn("audit: op replay requested", "op_id", r.PathValue("id"), "status", status, "caller", who(r.Context()))
		return err
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
