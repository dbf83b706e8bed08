package lock

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNoNode is returned by Release for a grant that is already released.
	ErrNoNode = errors.New("lock: no such grant (never granted or already released)")
	// ErrLockLost is returned (wrapped, with the cause) by Release of a grant
	// that ended without Release, and is the cause behind Grant.Done.
	ErrLockLost = errors.New("lock: lock lost")
	// ErrSessionLost is a cause of ErrLockLost and of failed waits: the
	// ZooKeeper session reached its deadline or expired.
	ErrSessionLost = errors.New("lock: zookeeper session lost")
	// ErrUnavailable means ZooKeeper could not be reached in time.
	ErrUnavailable = errors.New("lock: zookeeper unavailable")
	// ErrClosed is returned after Engine.Close.
	ErrClosed = errors.New("lock: engine closed")
	// ErrInvalidObject is wrapped by errors about bad object names.
	ErrInvalidObject = errors.New("lock: invalid object name")
	// ErrForeignNode is wrapped by an acquire that found, under its
	// object, a node of the other protocol (a plugin node under a native
	// root, or a native node under a plugin root): never a grant. The error
	// names the root and the node.
	ErrForeignNode = errors.New("lock: node of another protocol under the lock root")
	// ErrSharedNeedsNative is returned for a shared acquire on an engine
	// using the plugin protocol: the plugin's layout has one holder
	// (privateLock, one session's ephemeral), and a plugin writer that sorts
	// ahead of a shared holder would take it.
	ErrSharedNeedsNative = errors.New("lock: shared locks need the native protocol (the plugin's layout has one privateLock holder)")
	// ErrNotNative is returned by features of the plugin layout that the
	// native protocol does not have (signals written to privateLock).
	ErrNotNative = errors.New("lock: not available with the native protocol")
)

// Node describes one participant of an object's queue, as found in ZooKeeper.
type Node struct {
	Name      string    // "A-0000000007"; empty for a holder whose node was not found
	Type      string    // "foreground", "background", or "" when unknown
	Known     bool      // data written by Baton and parsed; false for the plugin's nodes
	RequestID string    // Baton's request id
	Sidecar   string    // sidecar.node.id of the creator
	Info      string    // caller-supplied info
	Token     int64     // holder only: privateLock's creation zxid
	Since     time.Time // creation time (server clock)
	Session   int64     // ephemeral owner
	Signal    *Signal   // holder only: the last Signal written to it, if any
	// Preemptible and Cleanup: the grant was acquired with
	// AcquireOptions.Preemptible and that Cleanup.
	Preemptible bool
	Cleanup     time.Duration
	Asks        []Signal // holder only: the standing asks (Engine.Ask) not withdrawn
	// Orphan (holder only, from Inspect): a Baton privateLock whose
	// holder's child is gone (no child of its session carries its request
	// id): no grant can be behind it, and it blocks the object while
	// Session lives. Its own engine's audit deletes it; Engine.FreeOrphan
	// frees it from anywhere.
	Orphan bool
	// Shared: a shared (read) request or holder (native protocol only).
	Shared bool
	// Aged (waiters only, from Inspect): a background request that has
	// waited past its aging bound and is now ordered before at least one
	// foreground request that arrived after that (see "Aging").
	Aged bool
}

// InstanceLockError reports an acquire that gave up before the grant: its wait
// timed out or was cancelled. No node of the attempt remains.
type InstanceLockError struct {
	Object   string
	Type     Type
	Waited   time.Duration
	Holder   *Node // current holder, nil if unknown or free
	Position int   // 1 = next in line when it gave up; 0 = unknown
	Err      error // context.DeadlineExceeded, context.Canceled, or errTryOnce
}

func (e *InstanceLockError) Error() string {
	h := "unknown holder"
	if e.Holder != nil {
		h = fmt.Sprintf("held by %s (sidecar %q, info %q)", e.Holder.Name, e.Holder.Sidecar, e.Holder.Info)
	}
	return fmt.Sprintf("lock %q (%s): not granted after %v, position %d, %s: %v",
		e.Object, e.Type, e.Waited.Round(time.Millisecond), e.Position, h, e.Err)
}

// Unwrap returns the cause.
func (e *InstanceLockError) Unwrap() error { return e.Err }

// InstanceLock marks the error as Java's InstanceLockException for retry
// classification.
func (e *InstanceLockError) InstanceLock() bool { return true }

// ErrNotFirst is the cause of an InstanceLockError from a try-once acquire
// that was not first in order or found privateLock taken.
var ErrNotFirst = errors.New("lock: not first in line (try once)")
