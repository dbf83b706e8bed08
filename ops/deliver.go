package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/queue"
	"github.com/batonhq/baton/retry"
)

// Headers of a delivery (api/openapi.json, webhook opDelivery).
const (
	HeaderOpID         = "Baton-Op-Id"
	HeaderObject       = "Baton-Object"
	HeaderFencingToken = "Baton-Fencing-Token"
	HeaderOpSeq        = "Baton-Op-Seq"
	HeaderAcceptedAt   = "Baton-Accepted-At"
	HeaderAttempt      = "Baton-Attempt"
	HeaderLeaseID      = "Baton-Lease-Id"
	HeaderToken        = "Baton-Token" // sidecar.app.token.file's content, when set
)

// maxErrorBody bounds what is kept of a failed answer's body (last_error).
const maxErrorBody = 1 << 10

// appClient posts deliveries to sidecar.app.url.
type appClient struct {
	url string
	tr  *http.Transport
	hc  *http.Client
}

func newAppClient(ep props.AppEndpoint) *appClient {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:               nil, // the app is local; environment proxies do not apply
		DialContext:         dialer.DialContext,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if ep.Socket != "" {
		sock := ep.Socket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", sock)
		}
	}
	return &appClient{
		url: ep.URL,
		tr:  tr,
		hc: &http.Client{
			Transport: tr,
			// A redirect is not followed: it is the app's answer (retryable, see retry.ClassifyStatus).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

func (c *appClient) close() { c.tr.CloseIdleConnections() }

// body returns the delivery JSON {"id","object","info","payload","attempt",
// "token","seq","accepted_at"} with the payload's bytes exactly as accepted.
func deliveryBody(op queue.Op, attempt int, token int64) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	str := func(key, v string) error {
		b.WriteString(`"` + key + `":`)
		if err := enc.Encode(v); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		b.WriteByte(',')
		return nil
	}
	b.WriteByte('{')
	for _, kv := range [][2]string{{"id", op.ID}, {"object", op.Object}, {"info", op.Info}} {
		if err := str(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	payload := op.Payload
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return nil, fmt.Errorf("ops: stored payload of %q is not valid JSON", op.ID)
	}
	b.WriteString(`"payload":`)
	b.Write(payload)
	fmt.Fprintf(&b, `,"attempt":%d,"token":"%d","seq":%d,`, attempt, token, op.Seq)
	if err := str("accepted_at", op.AcceptedAt.UTC().Format(api.TimeFormat)); err != nil {
		return nil, err
	}
	b.Truncate(b.Len() - 1)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// outcome is the result of one delivery.
type outcome struct {
	status   int   // the app's status, 0 if none
	err      error // nil for a 2xx; else the failure to classify
	cutShort bool  // interrupted by the dispatcher's hard stop, the engine's close or a ZooKeeper outage: not counted
}

// signalPreempt starts the lock.Signal kinds of a preemption ("preempt",
// "preempt-forceful"; see the sidecar's preempt.go).
const signalPreempt = "preempt"

// signalRevoke is the lock.Signal kind of an operator's revocation.
const signalRevoke = "revoke"

// preemptedError is the cancel cause of a delivery whose grant a preempting
// foreground acquire asked to yield: not the op's failure, not counted.
type preemptedError struct{ sig lock.Signal }

func (e *preemptedError) Error() string {
	if e.sig.Kind == signalRevoke {
		return fmt.Sprintf("revoked by an operator (%s, through sidecar %s): %s", e.sig.Who, e.sig.From, e.sig.Reason)
	}
	return fmt.Sprintf("preempted by a foreground request through sidecar %s (%s): the delivery was cancelled after "+
		"sidecar.app.preempt.cleanup", e.sig.From, e.sig.Reason)
}

// preemptStands reports whether a preemption ask (lock.Engine.Ask) still
// stands on g and its requester still waits for the object
// (lock.Grant.LiveAsks: a requester that died without withdrawing does not
// cut the delivery).
func preemptStands(g *lock.Grant) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range g.LiveAsks(ctx) {
		if strings.HasPrefix(a.Kind, signalPreempt) {
			return true
		}
	}
	return false
}

// lostError is the cancel cause of a delivery whose grant ended.
type lostError struct{ err error }

func (e *lostError) Error() string {
	return fmt.Sprintf("background lock lost during the delivery: %v", e.err)
}
func (e *lostError) Unwrap() error { return e.err }

// deliver POSTs op to the app while g is held, bounded by the app timeout,
// and cancels the request if g ends.
func (d *Dispatcher) deliver(op queue.Op, g *lock.Grant, set *settings, preempt <-chan lock.Signal) outcome {
	attempt := op.Attempts + 1
	body, err := deliveryBody(op, attempt, g.Token())
	if err != nil {
		return outcome{err: &retry.Error{Class: retry.Permanent, Name: "BadPayload", Err: err}}
	}
	ctx, cancel := context.WithCancelCause(d.hard)
	defer cancel(nil)
	tctx, tcancel := context.WithTimeout(ctx, set.appTimeout)
	defer tcancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var cut <-chan time.Time // the preemption's cleanup running out
		var sig lock.Signal
		for {
			select {
			case <-g.Done():
				cancel(&lostError{g.Err()})
				return
			case <-tctx.Done():
				return
			case s := <-preempt:
				if s.Kind == signalRevoke { // cuts at once, during a preemption's window too
					cancel(&preemptedError{s})
					return
				}
				if cut != nil {
					continue // a window runs: its end checks every ask still standing
				}
				// The grant's cleanup window, never shortened by the
				// requester's preempt_wait_ms.
				sig = s
				t := time.NewTimer(set.cleanup)
				defer t.Stop()
				cut = t.C
			case <-cut:
				if sig.ID == "" || preemptStands(g) {
					cancel(&preemptedError{sig})
					return
				}
				// Every preemption was withdrawn (its requester gave
				// up): the delivery goes on; a later one starts anew.
				d.log.Info("preemption withdrawn before the delivery's cleanup ended: the delivery goes on",
					"op_id", op.ID, "object", op.Object, "token", g.Token())
				cut = nil
			}
		}
	}()
	defer func() { tcancel(); <-watched }()

	req, err := http.NewRequestWithContext(tctx, http.MethodPost, d.app.url, bytes.NewReader(body))
	if err != nil {
		return outcome{err: &retry.Error{Class: retry.Permanent, Name: "BadAppURL", Err: err}}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "baton")
	h.Set(HeaderOpID, op.ID)
	h.Set(HeaderObject, op.Object)
	h.Set(HeaderFencingToken, strconv.FormatInt(g.Token(), 10))
	h.Set(HeaderOpSeq, strconv.FormatUint(op.Seq, 10))
	h.Set(HeaderAcceptedAt, op.AcceptedAt.UTC().Format(api.TimeFormat))
	h.Set(HeaderAttempt, strconv.Itoa(attempt))
	leaseID := ""
	if d.hold != nil { // the app may re-enter the lock with Baton-Lease-Id
		id, done := d.hold(g)
		leaseID = id
		defer func() { done(endReason(d.hard, ctx, tctx)) }()
	}
	if leaseID == "" {
		leaseID = newLeaseID()
	}
	h.Set(HeaderLeaseID, leaseID) // random per attempt, sent only here
	if set.appToken != "" {
		h.Set(HeaderToken, set.appToken)
	}

	resp, err := d.app.hc.Do(req)
	if err == nil {
		defer resp.Body.Close()
		if c := retry.ClassifyStatus(resp.StatusCode); c == nil {
			// Answered: drain a little so the connection can be reused.
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			return outcome{status: resp.StatusCode}
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return outcome{status: resp.StatusCode, err: &retry.StatusError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(b))}}
	}
	// Why was the request cut short?
	if d.hard.Err() != nil {
		return outcome{cutShort: true, err: err}
	}
	if pe, ok := errors.AsType[*preemptedError](context.Cause(ctx)); ok {
		return outcome{cutShort: true, err: pe} // given back, not counted: retried when the object is free
	}
	if le, ok := errors.AsType[*lostError](context.Cause(ctx)); ok {
		// Lost because ZooKeeper became unavailable (the session's validity
		// ran out, the session expired) or the engine closed: not the op's
		// failure, no attempt is counted (api/openapi.json, webhook opDelivery). Lost for another reason
		// (the lock node deleted, revoked): a counted, retryable LockLost.
		if errors.Is(le.err, lock.ErrClosed) || errors.Is(le.err, lock.ErrSessionLost) || errors.Is(le.err, lock.ErrUnavailable) {
			return outcome{cutShort: true, err: le}
		}
		return outcome{err: &retry.Error{Class: retry.Retryable, Name: NameLockLost, Err: le}}
	}
	if tctx.Err() != nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
		return outcome{err: &retry.Error{Class: retry.Retryable, Name: retry.NameTimeout,
			Err: fmt.Errorf("the app did not answer within sidecar.app.timeout (%v): %w", set.appTimeout, err)}}
	}
	return outcome{err: err}
}

// endReason is why a delivery ended, for the holds the app re-entered
// (Deps.Hold): "" when nothing cut it short.
func endReason(hard, ctx, tctx context.Context) string {
	if pe, ok := errors.AsType[*preemptedError](context.Cause(ctx)); ok {
		if pe.sig.Kind == signalRevoke {
			if pe.sig.Reason == "" {
				return api.ReasonRevoked
			}
			return api.ReasonRevoked + ": " + pe.sig.Reason
		}
		return api.ReasonPreempted
	}
	switch {
	case hard.Err() != nil:
		return api.ReasonShutdown
	case ctx.Err() != nil: // the grant ended (lostError)
		return "op delivery ended: " + context.Cause(ctx).Error()
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		return "op delivery ended: the app did not answer within sidecar.app.timeout"
	}
	return ""
}
