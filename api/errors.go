package api

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error kinds: the "error" member of every error answer.
const (
	BadRequest            = "BadRequest"            // 400: names the field
	NoNode                = "NoNode"                // 404: lease never granted, or released by its holder
	NotFound              = "NotFound"              // 404: unknown path (or unknown op)
	Forbidden             = "Forbidden"             // 403: the caller's uid may not do this; names action and key
	TooManyRequests       = "TooManyRequests"       // 429: a per-uid or connection cap reached; names the key
	MethodNotAllowed      = "MethodNotAllowed"      // 405
	Conflict              = "Conflict"              // 409: known op id with a different body; replay of an op not dead-lettered
	LockLost              = "LockLost"              // 410: see reason
	PayloadTooLarge       = "PayloadTooLarge"       // 413: body over 1 MiB
	InstanceLockException = "InstanceLockException" // 423: not granted in time
	InternalError         = "InternalError"         // 500: a bug; the message says what
	ZooKeeperUnavailable  = "ZooKeeperUnavailable"  // 503
	TooManyWaiters        = "TooManyWaiters"        // 503: sidecar.max.waiters reached
	ShuttingDown          = "ShuttingDown"          // 503
	QueueUnavailable      = "QueueUnavailable"      // 503
	QueueFull             = "QueueFull"             // 503: queue.max.ops reached; 507 for queue.max.bytes
	OpsDisabled           = "OpsDisabled"           // 503: sidecar.app.url is empty
	// SharedNeedsNative (409): a shared acquire on a sidecar whose
	// zookeeper.lock.protocol is plugin (its layout has one holder). Key
	// names zookeeper.lock.protocol.
	SharedNeedsNative = "SharedNeedsNative"
	// NotNative (409): a feature of the plugin layout (revocation,
	// preemption: signals written to privateLock) asked of a sidecar whose
	// zookeeper.lock.protocol is native. Key names zookeeper.lock.protocol.
	NotNative = "NotNative"
	// ForeignNode (409): a node of the other protocol under the object (a
	// plugin node under a native root, or a native node under a plugin
	// root); never a grant. The message names the root and the node.
	ForeignNode = "ForeignNode"
)

// Status returns the HTTP status the sidecar answers with for kind, or 500
// for an unknown kind.
func Status(kind string) int {
	switch kind {
	case BadRequest:
		return http.StatusBadRequest
	case NoNode, NotFound:
		return http.StatusNotFound
	case Forbidden:
		return http.StatusForbidden
	case TooManyRequests:
		return http.StatusTooManyRequests
	case MethodNotAllowed:
		return http.StatusMethodNotAllowed
	case Conflict, SharedNeedsNative, NotNative, ForeignNode:
		return http.StatusConflict
	case LockLost:
		return http.StatusGone
	case PayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case InstanceLockException:
		return http.StatusLocked
	case ZooKeeperUnavailable, TooManyWaiters, ShuttingDown, QueueUnavailable, QueueFull, OpsDisabled:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Error is the body of every error answer: {"error": Kind, "message": …}
// plus the members that apply. A 423 InstanceLockException always carries
// object, type, waited_ms, holder (null if unknown or free) and position
// (1 = next in line, 0 = unknown).
type Error struct {
	Kind     string  `json:"error"`
	Message  string  `json:"message"`
	Field    string  `json:"field,omitempty"`  // 400: the offending field or parameter
	Reason   string  `json:"reason,omitempty"` // 410: why the lease is lost
	Object   string  `json:"object,omitempty"`
	Type     string  `json:"type,omitempty"`
	WaitedMS *int64  `json:"waited_ms,omitempty"`
	Holder   *Holder `json:"holder,omitempty"`
	Position *int    `json:"position,omitempty"`
	Action   string  `json:"action,omitempty"` // 403: what was refused
	Key      string  `json:"key,omitempty"`    // 403: the property that allows it; 429: the one that raises the cap; 409 SharedNeedsNative, NotNative, ForeignNode: zookeeper.lock.protocol
	MinMS    *int64  `json:"min_ms,omitempty"` // 400 of a millisecond field out of range: the least value accepted
	MaxMS    *int64  `json:"max_ms,omitempty"` // 400 of a millisecond field out of range: the greatest value accepted
}

// MarshalJSON writes holder as null in a 423 rather than leaving it out.
func (e Error) MarshalJSON() ([]byte, error) {
	type plain Error
	if e.Kind != InstanceLockException {
		return json.Marshal(plain(e))
	}
	type withHolder struct {
		plain
		Holder *Holder `json:"holder"`
	}
	return json.Marshal(withHolder{plain(e), e.Holder})
}

// String returns "Kind: message".
func (e Error) String() string { return fmt.Sprintf("%s: %s", e.Kind, e.Message) }
