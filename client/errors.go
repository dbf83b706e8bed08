package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/batonhq/baton/api"
)

var (
	// ErrLockLost: the lease's lock is lost (the sidecar says why: see
	// APIError.Reason), or its validity ran out without a confirmation.
	ErrLockLost = errors.New("client: lock lost")
	// ErrNoNode: no such lease (never granted, or released).
	ErrNoNode = errors.New("client: no such lease")
	// ErrUnavailable: the sidecar cannot be reached, or answered 503
	// (ZooKeeper unavailable, shutting down, too many waiters, queue
	// unavailable or full, ops disabled).
	ErrUnavailable = errors.New("client: sidecar or zookeeper unavailable")
)

// APIError is an error answer of the sidecar. errors.Is matches
// ErrLockLost (410), ErrNoNode (404 NoNode) and ErrUnavailable (any 503).
type APIError struct {
	Status  int    // HTTP status
	Kind    string // api.BadRequest, api.LockLost, …
	Message string
	Reason  string // LockLost: why (api.Reason… constants)
	Field   string // BadRequest: the field at fault
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("baton: %d %s: %s", e.Status, e.Kind, e.Message)
	if e.Reason != "" {
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
		return e.Status == http.StatusServiceUnavailable
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
}

func (e *InstanceLockError) Error() string {
	h := "unknown holder"
	if e.Holder != nil {
		h = fmt.Sprintf("held by %s (sidecar %q, info %q)", e.Holder.Node, e.Holder.Sidecar, e.Holder.Info)
	}
	return fmt.Sprintf("baton: lock %q (%s) not granted after %v, position %d, %s",
		e.Object, e.Type, e.Waited, e.Position, h)
}

// InstanceLock marks the error as Java's InstanceLockException for retry
// classification.
func (e *InstanceLockError) InstanceLock() bool { return true }

// decodeError turns an error answer into an error value.
func decodeError(status int, body []byte) error {
	var b api.Error
	if err := json.Unmarshal(body, &b); err != nil || b.Kind == "" {
		k := http.StatusText(status)
		return &APIError{Status: status, Kind: k, Message: fmt.Sprintf("unexpected answer: %.200q", body)}
	}
	if b.Kind == api.InstanceLockException {
		e := &InstanceLockError{Object: b.Object, Type: b.Type, Holder: b.Holder, Message: b.Message}
		if b.WaitedMS != nil {
			e.Waited = time.Duration(*b.WaitedMS) * time.Millisecond
		}
		if b.Position != nil {
			e.Position = *b.Position
		}
		return e
	}
	return &APIError{Status: status, Kind: b.Kind, Message: b.Message, Reason: b.Reason, Field: b.Field}
}
