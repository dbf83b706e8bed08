package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/batonhq/baton/api"
)

var (
	// ErrLockLost: the lease's lock is lost (the sidecar says why: see
	// APIError.Reason), or its validity ran out without a confirmation.
	ErrLockLost = errors.New("client: lock lost")
	// ErrNoNode: no such lease (never granted, or released).
	ErrNoNode = errors.New("client: no such lease")
	// ErrUnavailable: the sidecar cannot be reached (*UnreachableError),
	// something that is not Baton answers on the socket (*NotBatonError),
	// or the sidecar answered 503 (*APIError: ZooKeeper unavailable,
	// shutting down, too many waiters, queue unavailable or full, ops
	// disabled) or 507 QueueFull (queue.max.bytes reached).
	ErrUnavailable = errors.New("client: sidecar or zookeeper unavailable")
	// ErrStaleToken: a fencing token is not the object's current grant
	// (RequireCurrent; see *StaleTokenError).
	ErrStaleToken = errors.New("client: stale fencing token")
)

// UnreachableError is a request that got no answer: nothing listens on the
// socket, or the connection failed. errors.Is matches ErrUnavailable and
// the cause (e.g. fs.ErrNotExist for a socket file that does not exist).
type UnreachableError struct {
	Request string // "POST /v1/locks/x/acquire"
	Socket  string
	Dial    bool // the connection could not be opened
	Err     error
}

func (e *UnreachableError) Error() string {
	cause := e.Err.Error()
	var oe *net.OpError
	if errors.As(e.Err, &oe) && oe.Err != nil {
		cause = oe.Err.Error() // "connect: no such file or directory": the socket is named already
	}
	if e.Dial {
		return fmt.Sprintf("client: %s: no sidecar answers at %s: %s", e.Request, e.Socket, cause)
	}
	return fmt.Sprintf("client: %s: connection to the sidecar at %s failed: %s", e.Request, e.Socket, cause)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is reports ErrUnavailable.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnavailable }

// NotBatonError is an answer that is not the Baton API's: something else
// listens on the socket. errors.Is matches ErrUnavailable.
type NotBatonError struct {
	Request     string
	Socket      string
	Status      int
	ContentType string
	Body        []byte // the start of the answer
}

func (e *NotBatonError) Error() string {
	ct := e.ContentType
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Sprintf("client: %s: %s does not answer as a Baton sidecar: HTTP %d, %s, body %.80q",
		e.Request, e.Socket, e.Status, ct, e.Body)
}

// Is reports ErrUnavailable.
func (e *NotBatonError) Is(target error) bool { return target == ErrUnavailable }

// APIError is an error answer of the sidecar. errors.Is matches
// ErrLockLost (410), ErrNoNode (404 NoNode) and ErrUnavailable (any 503).
type APIError struct {
	Status  int    // HTTP status
	Kind    string // api.BadRequest, api.LockLost, …
	Message string
	Reason  string // LockLost: why (api.Reason… constants)
	Field   string // BadRequest: the field at fault
	Action  string // Forbidden (403): the action refused
	Key     string // Forbidden: the property that allows it; TooManyRequests (429): the one that raises the cap
	// BadRequest of a millisecond field (Field) out of range: the least
	// and greatest values accepted, in ms; nil when the answer gives none.
	MinMS, MaxMS *int64
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("baton: %d %s: %s", e.Status, e.Kind, e.Message)
	if e.Reason != "" && !strings.Contains(e.Message, e.Reason) {
		s += " (reason: " + e.Reason + ")"
	}
	return s
}

// Is reports whether the answer is one of the package's sentinel errors.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrLockLost:
		return e.Kind == api.LockLost
	case ErrNoNode:
		return e.Kind == api.NoNode
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable || e.Kind == api.QueueFull
	}
	return false
}

// InstanceLockError is a 423: the lock was not granted within the wait
// (or, with WithWait(0), not at once). Nothing of the attempt remains.
type InstanceLockError struct {
	Object   string
	Type     string // api.Foreground or api.Background
	Waited   time.Duration
	Holder   *api.Holder // nil if unknown or free
	Position int         // 1 = was next in line; 0 = unknown
	Message  string
	Reason   string // set when a preemption (WithPreempt) was not yielded to
}

func (e *InstanceLockError) Error() string {
	h := "unknown holder"
	if e.Holder != nil {
		h = fmt.Sprintf("held by %s (sidecar %q, info %q)", e.Holder.Node, e.Holder.Sidecar, e.Holder.Info)
	}
	s := fmt.Sprintf("baton: lock %q (%s) not granted after %v, position %d, %s",
		e.Object, e.Type, e.Waited, e.Position, h)
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s
}

// InstanceLock marks the error as Java's InstanceLockException for retry
// classification.
func (e *InstanceLockError) InstanceLock() bool { return true }

// decodeError turns an error answer into an error value; nil if body is
// not the API's error shape (the caller reports a *NotBatonError).
func decodeError(status int, body []byte) error {
	var b api.Error
	if err := json.Unmarshal(body, &b); err != nil || b.Kind == "" {
		return nil
	}
	if b.Kind == api.InstanceLockException {
		e := &InstanceLockError{Object: b.Object, Type: b.Type, Holder: b.Holder, Message: b.Message, Reason: b.Reason}
		if b.WaitedMS != nil {
			e.Waited = time.Duration(*b.WaitedMS) * time.Millisecond
		}
		if b.Position != nil {
			e.Position = *b.Position
		}
		return e
	}
	return &APIError{Status: status, Kind: b.Kind, Message: b.Message, Reason: b.Reason, Field: b.Field, Action: b.Action, Key: b.Key,
		MinMS: b.MinMS, MaxMS: b.MaxMS}
}

// StaleTokenError is RequireCurrent's answer for a token that is not the
// object's current grant. errors.Is matches ErrStaleToken.
type StaleTokenError struct {
	Object  string
	Token   int64 // the token checked
	Current int64 // the current grant's token, 0 when the object is free
}

func (e *StaleTokenError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("client: fencing token %d of %q is stale: the object is free", e.Token, e.Object)
	}
	return fmt.Sprintf("client: fencing token %d of %q is stale: the current grant is token %d", e.Token, e.Object, e.Current)
}

func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
