package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// DefaultSocket is the default path of the sidecar's unix socket
// (sidecar.socket.path).
const DefaultSocket = "/run/baton/baton.sock"

// MaxBody is the largest request body the sidecar reads; a larger one is a
// 413 PayloadTooLarge.
const MaxBody = 1 << 20

// MaxWaitMS is the largest wait_ms an acquire may ask for.
const MaxWaitMS = 600000

// Lock types, the "type" of an acquire.
const (
	Foreground = "foreground" // work a user or a synchronous call waits for; served first
	Background = "background" // deferred work
)

// Lock modes, the "mode" of an acquire (and of a lease, a holder, a
// waiter). A shared lock needs the native protocol
// (zookeeper.lock.protocol=native).
const (
	// ModeExclusive (the default): the only holder of the object.
	ModeExclusive = "exclusive"
	// ModeShared: any number of shared holders together, none with an
	// exclusive holder. Requests are served in line (foreground first, then
	// by arrival): a shared request behind a waiting exclusive one waits
	// for it, so a stream of readers never starves a writer.
	ModeShared = "shared"
)

// Lease states.
const (
	StateHeld     = "held"     // connected to ZooKeeper; valid for valid_for_ms
	StateSuspect  = "suspect"  // ZooKeeper disconnected; valid_for_ms shrinks and is not extended
	StateDraining = "draining" // the sidecar is shutting down: renewed, but never valid past drain_ends_at; finish and release by then
	StateLost     = "lost"     // ended without the holder's release (see reason), or will not be renewed
	// StatePreempted: a preemptible lease another request asked to yield
	// (see AcquireRequest.Preempt): roll back and release by valid_until,
	// which renewals no longer extend; reason says who asked.
	StatePreempted = "preempted"
	StateReleased  = "released" // released by the holder
)

// Reasons of a lost lease (the "reason" of a 410 LockLost or of a lease body).
const (
	ReasonLeaseExpired     = "lease expired"
	ReasonSidecarRestarted = "sidecar restarted"
	ReasonShutdown         = "shutdown"
	ReasonSessionLost      = "zookeeper session lost"
	ReasonProcessExited    = "holder process exited"
	ReasonLockDeleted      = "lock node deleted by someone else"
	// ReasonRevoked starts the reason of a lease an operator revoked
	// (POST /v1/locks/{object}/revoke): "revoked: <the operator's reason>".
	ReasonRevoked = "revoked"
	// ReasonPreempted is the reason of a preemptible lease taken by a
	// forceful preempting request after it did not yield in time.
	ReasonPreempted = "preempted"
)

// Time is an instant that encodes as RFC 3339 UTC with milliseconds
// ("2025-01-02T15:04:05.123Z"); the zero Time encodes as null.
type Time struct{ time.Time }

// TimeFormat is the layout of [Time].
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// NewTime returns t as a [Time], without its monotonic reading.
func NewTime(t time.Time) Time {
	if t.IsZero() {
		return Time{}
	}
	return Time{t.Round(0).UTC()}
}

// MarshalJSON encodes the time in [TimeFormat] (milliseconds truncated), or null.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	b := make([]byte, 0, len(`"`+TimeFormat+`"`)) // one allocation: the answer
	b = append(b, '"')
	b = t.UTC().Truncate(time.Millisecond).AppendFormat(b, TimeFormat)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts RFC 3339 (any fraction) or null.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = Time{}
		return nil
	}
	var s string
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' && bytes.IndexByte(b[1:n-1], '\\') < 0 && bytes.IndexByte(b[1:n-1], '"') < 0 {
		s = string(b[1 : n-1]) // no escapes: what json.Unmarshal would give, without its reflection
	} else if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("api: time: %w", err)
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("api: time: %w", err)
	}
	t.Time = v.UTC()
	return nil
}

// Bindings of a lease, the "bind" of an acquire.
const (
	// BindNone (the default, "" or absent): the lease lives until it is
	// released, not renewed by lease_expires_at, or lost. A plain HTTP
	// caller (curl) can acquire in one command and release in another.
	BindNone = ""
	// BindProcess ties the lease to the calling process (its pid, read
	// with SO_PEERCRED on the unix socket): when that process exits, its
	// leases are released at once. Where the pid is not visible (another
	// pid namespace) only the lease applies. The Go client and `baton
	// lock` always send it.
	BindProcess = "process"
)

// AcquireRequest is the body of POST /v1/locks/{object}/acquire. Every field
// is optional: type defaults to foreground, WaitMS to the type's timeout
// (0 = try once: granted only if first in line and free right away),
// LeaseMS to sidecar.lease.default, Bind to BindNone.
type AcquireRequest struct {
	Type    string `json:"type,omitempty"`
	Info    string `json:"info,omitempty"`
	WaitMS  *int64 `json:"wait_ms,omitempty"`
	LeaseMS *int64 `json:"lease_ms,omitempty"`
	Bind    string `json:"bind,omitempty"` // BindNone or BindProcess
	// LeaseID, if set, re-enters: it names a lease this sidecar holds on
	// the same object (or the Baton-Lease-Id of an op delivery in
	// progress), and the answer is that lease with Holds one higher (and
	// renewed) instead of a new grant; type, info, wait_ms and bind are
	// ignored. Each release counts one hold down; the lock is freed when
	// the last is released. A lease of another object or of another run
	// of the sidecar is a 400 naming lease_id.
	LeaseID string `json:"lease_id,omitempty"`
	// Preemptible lets a higher-priority acquire (Preempt) ask this grant
	// to yield: it is then told (state "preempted") and has CleanupMS to
	// release. Its validity is never told further than CleanupMS ahead
	// (renew within it). CleanupMS defaults to 5000.
	Preemptible bool   `json:"preemptible,omitempty"`
	CleanupMS   *int64 `json:"cleanup_ms,omitempty"`
	// Preempt (foreground only) asks a preemptible holder, on any sidecar,
	// to yield within its cleanup; the request waits in line as usual. Not
	// released within the holder's cleanup (never shortened): Forceful →
	// the holder's sidecar takes the lock from it (told lost, reason
	// "preempted") and frees it after the validity told to it; not
	// forceful → 423 with reason once PreemptWaitMS (default: the wait) is
	// over. The wait and PreemptWaitMS must each be at least the holder's
	// cleanup_ms + 1000, else 400 naming the field (wait_ms 0 always). A
	// request that gives up withdraws its ask: the holder is held again.
	// Holders that are not preemptible are never asked.
	Preempt       bool   `json:"preempt,omitempty"`
	PreemptWaitMS *int64 `json:"preempt_wait_ms,omitempty"`
	Forceful      bool   `json:"forceful,omitempty"`
	// LockDelayMS overrides zookeeper.lock.delay for this request: after a
	// holder vanished without releasing (its session expired, its sidecar
	// was killed), the request is not granted until this many ms after it
	// saw the holder gone; 0 = no delay (0..600000).
	LockDelayMS *int64 `json:"lock_delay_ms,omitempty"`
	// Objects (POST /v1/locks/acquire only, and required there) asks for a
	// set of objects, all or nothing, within one wait: one lease, one
	// release; the loss of any object is the loss of the set. At most
	// MaxObjectsPerAcquire names, each once. Not with lease_id or the
	// preemption fields.
	Objects []string `json:"objects,omitempty"`
	// Permits (POST /v1/semaphores/{name}/acquire only, and required
	// there) is the semaphore's number of permits, 1 to MaxPermits: at most
	// that many holders at once among requests that agree on it. Not with
	// lease_id or the preemption fields.
	Permits int `json:"permits,omitempty"`
	// Mode is ModeExclusive (default, "" or absent) or ModeShared. Shared
	// needs zookeeper.lock.protocol=native (else 409 SharedNeedsNative);
	// for a set, every object is taken shared; not for a semaphore (400).
	// A re-entry (LeaseID) must give the lease's own mode: a shared lease
	// is never re-entered as exclusive, nor the reverse (400 naming mode).
	Mode string `json:"mode,omitempty"`
}

// MaxObjectsPerAcquire bounds AcquireRequest.Objects.
const MaxObjectsPerAcquire = 64

// MaxPermits bounds AcquireRequest.Permits.
const MaxPermits = 256

// LeaseObject is one object of a set's lease (Lease.Objects): fence the
// writes to each object with its own token.
type LeaseObject struct {
	Object string `json:"object"`
	Token  int64  `json:"token,string"`
	Node   string `json:"node"`
}

// SemaphoreHolder is one held permit of a semaphore.
type SemaphoreHolder struct {
	Permit int     `json:"permit"`
	Object string  `json:"object"` // the permit's lock object
	Holder *Holder `json:"holder"`
}

// SemaphoreStatus is the answer of GET /v1/semaphores/{name}: the held
// permits (by permit) and the waiting requests, in grant order
// (cluster-wide, as ZooKeeper has them). Neither is ever null.
type SemaphoreStatus struct {
	Name    string            `json:"name"`
	Holders []SemaphoreHolder `json:"holders"`
	Waiters []Waiter          `json:"waiters"`
}

// RevokeRequest is the body of POST /v1/locks/{object}/revoke (any
// sidecar): the holder's sidecar refuses its renewals (410, reason
// "revoked: <reason>"), tells it at once and frees the lock after the
// last valid_until it told. Token, if set, revokes only the grant with
// that fencing token.
type RevokeRequest struct {
	Reason string `json:"reason,omitempty"`
	Token  int64  `json:"token,string,omitempty"`
}

// RevokeResponse is the answer of a revoke (202): the revocation reached
// the holder's privateLock in ZooKeeper. Local says the holder is a
// lease of this sidecar: it was told at once, and FreedAfter is the
// valid_until it was last told, after which the lock is freed. A remote
// holder's sidecar learns it through its watch on privateLock.
type RevokeResponse struct {
	Object     string  `json:"object"`
	Token      int64   `json:"token,string"`
	Reason     string  `json:"reason"` // the lease's reason: "revoked: …"
	Holder     *Holder `json:"holder"`
	Local      bool    `json:"local"`
	FreedAfter *Time   `json:"freed_after,omitempty"`
	// Orphan: the holder was an orphan privateLock (no grant behind it),
	// deleted at once.
	Orphan bool `json:"orphan,omitempty"`
}

// RenewRequest is the body of POST /v1/leases/{id}/renew. LeaseMS defaults
// to the lease's own length.
type RenewRequest struct {
	LeaseMS *int64 `json:"lease_ms,omitempty"`
}

// Lease is what the API hands out for a grant. ValidForMS is what a holder
// must respect before a critical write: the time left (on the sidecar's
// monotonic clock) until ValidUntil = min(LeaseExpiresAt, the ZooKeeper
// session deadline). Token is the fencing token for the storage.
type Lease struct {
	LeaseID        string `json:"lease_id"`
	Object         string `json:"object"`
	Type           string `json:"type"`
	Info           string `json:"info"`
	Token          int64  `json:"token,string"`
	Node           string `json:"node"`
	AcquiredAt     Time   `json:"acquired_at"`
	LeaseExpiresAt Time   `json:"lease_expires_at"`
	ValidUntil     Time   `json:"valid_until"`
	ValidForMS     int64  `json:"valid_for_ms"`
	State          string `json:"state"` // StateHeld, StateSuspect, StateDraining, StateLost, StateReleased
	// WaitedMS is how long the acquire waited for the grant. A client
	// counts the validity of an acquire's answer from its send time +
	// WaitedMS + ValidForMS: never later than the sidecar's valid_until.
	WaitedMS int64 `json:"waited_ms"`
	// Reason says why a lease is lost (one of the Reason constants); empty otherwise.
	Reason string `json:"reason,omitempty"`
	// DrainEndsAt and DrainForMS are set while the sidecar drains (state
	// draining, or suspect during a drain): the end of
	// sidecar.shutdown.grace, past which no renewal extends valid_until;
	// DrainForMS is the time left until it, like ValidForMS. At that end
	// a lease not released is told lost (reason "shutdown").
	DrainEndsAt *Time `json:"drain_ends_at,omitempty"`
	DrainForMS  int64 `json:"drain_for_ms,omitempty"`
	// Holds counts the holders of a re-entered lease (AcquireRequest.LeaseID):
	// 1 after the first acquire, +1 per re-entry, −1 per release; 0 once
	// ended.
	Holds int `json:"holds"`
	// Preemptible and CleanupMS are the acquire's (see AcquireRequest).
	Preemptible bool  `json:"preemptible,omitempty"`
	CleanupMS   int64 `json:"cleanup_ms,omitempty"`
	// UID and PID are set in GET /v1/leases only: the uid that acquired
	// the lease (its owner: only it, and admins, may renew, release or
	// re-enter it) and, for a lease bound to its process, that pid.
	UID *uint32 `json:"uid,omitempty"`
	PID *int32  `json:"pid,omitempty"`
	// Objects is set for a lease of a set of objects (AcquireRequest.Objects):
	// every object with its own fencing token and node, in the order they
	// were acquired; Object, Token and Node are the first's. Fence the
	// writes to each object with ITS token.
	Objects []LeaseObject `json:"objects,omitempty"`
	// Semaphore and Permit are set for a semaphore's lease: the semaphore's
	// name and the permit held (0-based); Object is the permit's lock
	// object, Token fences the writes made under the permit.
	Semaphore string `json:"semaphore,omitempty"`
	Permit    *int   `json:"permit,omitempty"`
	// Mode is the lock's mode: ModeExclusive or ModeShared. (A sidecar
	// older than modes leaves it out: exclusive.)
	Mode string `json:"mode,omitempty"`
}

// LeaseList is the answer of GET /v1/leases: the caller's leases, oldest
// grant first; an admin's (All): every lease of the sidecar. Op deliveries'
// leases are not listed.
type LeaseList struct {
	Leases []Lease `json:"leases"`
	All    bool    `json:"all"`
}

// DrainResponse is the answer of POST /v1/drain (202): the drain has
// begun (or was already under way). The sidecar stops granting (503
// ShuttingDown), /readyz answers 503, leases are renewed but never valid
// past EndsAt, and at EndsAt the leases left are told lost; the sidecar
// exits once every lease is released or past the validity told to it.
type DrainResponse struct {
	Draining bool  `json:"draining"` // always true
	GraceMS  int64 `json:"grace_ms"` // sidecar.shutdown.grace when the drain began
	EndsAt   Time  `json:"ends_at"`  // the end of the grace
	EndsInMS int64 `json:"ends_in_ms"`
	Leases   int   `json:"leases"` // leases still held through this sidecar
}

// ReleaseResponse is the answer of DELETE /v1/leases/{id}.
type ReleaseResponse struct {
	Released bool `json:"released"` // the lock was freed (no holds left)
	// Releasing: DELETE ?wait=false answered (202) before the release's
	// ZooKeeper write landed. The lease has ended; the lock is freed when
	// that write lands (nobody is granted before), and an acquire of the
	// same object on this sidecar is granted only after it.
	Releasing bool   `json:"releasing,omitempty"`
	Object    string `json:"object"`
	Token     int64  `json:"token,string"`
	Holds     int    `json:"holds"` // holds left on a re-entered lease; 0 when freed
}

// Holder is the holder of an object as found in ZooKeeper. Nodes Baton did
// not create (the original plugin's) have an empty Type and Sidecar.
type Holder struct {
	Node    string `json:"node"`
	Type    string `json:"type"`
	Info    string `json:"info"`
	Sidecar string `json:"sidecar"`
	Token   int64  `json:"token,string"`
	Since   Time   `json:"since"`
	// Holds is the hold count of a re-entered lease, when the holder is a
	// lease of the sidecar answering (0: unknown, another sidecar's).
	Holds int `json:"holds,omitempty"`
	// Revocation is the reason of a revocation written to the holder
	// and not yet carried out (the lock is freed after the validity told).
	Revocation string `json:"revocation,omitempty"`
	// Preemption describes a preemption asked of the holder ("preempt" or
	// "preempt-forceful", then who asked), from its node.
	Preemption string `json:"preemption,omitempty"`
	// Preemptible is known when the holder is a lease of the sidecar
	// answering (preemptible leases and op deliveries live there, not in
	// ZooKeeper).
	Preemptible bool `json:"preemptible,omitempty"`
	// Orphan: a Baton privateLock whose holder's node is gone: no grant is
	// behind it, yet it blocks the object while Session lives. Its own
	// sidecar's audit deletes it; `baton revoke` frees it at once.
	Orphan bool `json:"orphan,omitempty"`
	// Session is the ZooKeeper session that owns an orphan ("0x…").
	Session string `json:"session,omitempty"`
	// Mode is ModeExclusive or ModeShared (a plugin node: exclusive).
	Mode string `json:"mode,omitempty"`
}

// Waiter is one waiting request, in grant order.
type Waiter struct {
	Node    string `json:"node"`
	Type    string `json:"type"`
	Info    string `json:"info"`
	Sidecar string `json:"sidecar"`
	Since   Time   `json:"since"`
	// Aged (background waiters, zookeeper.background.max.wait): it has
	// waited past its bound and goes before at least one foreground
	// waiter that arrived after that. Absent when false.
	Aged bool `json:"aged,omitempty"`
	// Mode is what the request asks for: ModeExclusive or ModeShared.
	Mode string `json:"mode,omitempty"`
}

// LockStatus is the answer of GET /v1/locks/{object}: cluster-wide, in grant
// order. Holder is nil when the object is free; Waiters is never null.
// Holders is every holder (several only when they hold shared locks), in
// grant order; Holder is its first. Neither Holders nor Waiters is ever null.
type LockStatus struct {
	Object  string   `json:"object"`
	Holder  *Holder  `json:"holder"`
	Holders []Holder `json:"holders"`
	Waiters []Waiter `json:"waiters"`
	// Parked counts the answering sidecar's acquires parked behind its
	// holder of the object (native protocol): waiting in that sidecar,
	// not in Waiters (not in ZooKeeper yet).
	Parked int `json:"parked,omitempty"`
}

// CheckResult is the answer of GET /v1/locks/{object}/check?token=N
// (Chubby's CheckSequencer), from any sidecar. Current is true only if N is
// the object's grant right now, read through ZooKeeper after a sync. Token is
// the current grant's fencing token (0, absent on the wire, when the object
// is free). ValidForMS is the time left of the validity the holder was told;
// only the holder's own sidecar knows it, so any other sidecar omits it.
type CheckResult struct {
	Current    bool   `json:"current"`
	Token      int64  `json:"token,string,omitempty"`
	ValidForMS *int64 `json:"valid_for_ms,omitempty"`
}

// LockSummary is one object of [LockList].
type LockSummary struct {
	Object  string  `json:"object"`
	Holder  *Holder `json:"holder"`
	Waiters int     `json:"waiters"`
}

// LockList is the answer of GET /v1/locks?prefix=&after=&limit=. Next is the
// cursor to pass as after for the next page, "" at the end.
type LockList struct {
	Locks []LockSummary `json:"locks"`
	Next  string        `json:"next"`
}

// Health is the answer of GET /healthz and GET /readyz. A 503 from /readyz
// also carries Error and Message, so it has the error shape.
type Health struct {
	Status      string `json:"status"` // "serving" or "shutting_down"
	Ready       bool   `json:"ready"`
	Reason      string `json:"reason,omitempty"` // why not ready
	Error       string `json:"error,omitempty"`
	Message     string `json:"message,omitempty"`
	Sidecar     string `json:"sidecar"`     // sidecar.node.id
	Incarnation string `json:"incarnation"` // changes on every start; prefixes lease ids
	ZooKeeper   ZKInfo `json:"zookeeper"`
	Leases      int    `json:"leases"` // leases held through this sidecar
	PID         int    `json:"pid"`    // of the sidecar process (for SIGHUP)
	// Reload is the outcome of the last configuration reload; nil before the first.
	Reload *ReloadInfo `json:"reload,omitempty"`
	// Queue summarises the background-op queue; nil when ops are disabled.
	Queue *QueueInfo `json:"queue,omitempty"`
	// LockProtocol is zookeeper.lock.protocol as the lock engine runs it:
	// "plugin" or "native".
	LockProtocol string `json:"lock_protocol"`
}

// QueueInfo summarises the background-op queue for /healthz and `baton status`.
type QueueInfo struct {
	Queued       int   `json:"queued"`        // queued, running or retrying
	DLQPending   int   `json:"dlq_pending"`   // waiting to be published to the dead-letter topic
	DeadLettered int   `json:"dead_lettered"` // published and still retained (kept ones included)
	Kept         int   `json:"kept"`          // dead-lettered without their payload: kept until replayed or discarded
	PayloadBytes int64 `json:"payload_bytes"` // what queue.max.bytes bounds
	MaxBytes     int64 `json:"max_bytes"`     // queue.max.bytes
	// OldestUnfinishedAt is the acceptance of the oldest unfinished op
	// (dlq_pending included); null when there is none.
	OldestUnfinishedAt Time `json:"oldest_unfinished_at"`
}

// ReloadInfo is the outcome of a configuration reload (SIGHUP).
type ReloadInfo struct {
	Generation       int64    `json:"generation"` // 1 for the first reload, +1 for each
	At               Time     `json:"at"`
	Applied          []string `json:"applied"`            // keys changed and in effect
	KeptUntilRestart []string `json:"kept_until_restart"` // restart keys changed in the file, not applied
	Error            string   `json:"error,omitempty"`    // the reload was rejected; nothing changed
}

// ZKInfo describes the sidecar's ZooKeeper session.
type ZKInfo struct {
	Connected         bool   `json:"connected"`
	Session           string `json:"session"` // "0x…", "" before the first session
	TimeoutMS         int64  `json:"timeout_ms"`
	DisconnectedForMS int64  `json:"disconnected_for_ms"`
	LocksHeld         int    `json:"locks_held"`
	Waiting           int    `json:"waiting"` // parked ones included
	// Parked are the acquires waiting in the sidecar behind a holder of
	// its own (native protocol), not yet in ZooKeeper.
	Parked         int `json:"parked,omitempty"`
	CleanupPending int `json:"cleanup_pending"`
	// Servers is the ensemble the sidecar connects to (zookeeper.servers,
	// "host:port" each, the chroot after the last).
	Servers []string `json:"servers"`
	// LastError is the last connection error while connecting keeps
	// failing; "" once connected.
	LastError string `json:"last_error,omitempty"`
}

// OpRequest is the body of POST /v1/ops. ID is optional (a UUIDv7 is
// generated); it is the idempotency key.
type OpRequest struct {
	ID      string          `json:"id,omitempty"`
	Object  string          `json:"object"`
	Info    string          `json:"info,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// OpAck is the answer of POST /v1/ops (202, or 200 for a known id with the
// same body) and of POST /v1/ops/{id}/replay.
type OpAck struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// OpDiscarded is the answer of POST /v1/ops/{id}/discard: the
// dead-lettered op and its payload are deleted for good.
type OpDiscarded struct {
	ID           string `json:"id"`
	Object       string `json:"object"`
	Discarded    bool   `json:"discarded"`     // always true
	PayloadBytes int    `json:"payload_bytes"` // size of the deleted payload
	// PayloadSHA256 is the hex SHA-256 of the deleted payload (as in an
	// elided dead letter's payload_sha256).
	PayloadSHA256 string `json:"payload_sha256"`
	Message       string `json:"message"`
}

// Op states.
const (
	OpQueued       = "queued"
	OpRunning      = "running"
	OpRetrying     = "retrying"
	OpDone         = "done"
	OpDLQPending   = "dlq_pending"
	OpDeadLettered = "dead_lettered"
)

// Op is the answer of GET /v1/ops/{id} and an entry of [OpList].
type Op struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	State         string `json:"state"`
	Attempts      int    `json:"attempts"`
	LastError     string `json:"last_error"`
	NextAttemptAt Time   `json:"next_attempt_at"`
	AcceptedAt    Time   `json:"accepted_at"`
	Seq           int64  `json:"seq"`
	// LetterNote, on a dead_lettered op, says how its dead letter differs
	// from the op (e.g. published without its payload).
	LetterNote string `json:"letter_note,omitempty"`
	// Kept, on a dead_lettered op, says its dead letter went out without
	// the payload: the sidecar keeps the op past queue.retention until it
	// is replayed or discarded.
	Kept bool `json:"kept,omitempty"`
	// ErrorClass is the class of LastError ("" when there is none).
	ErrorClass string `json:"error_class,omitempty"`
	// Replays counts the replays of the op.
	Replays int `json:"replays"`
	// History lists the finished attempts and replays, oldest first,
	// across replays (the last 50; HistoryDropped counts older ones).
	History        []OpEvent `json:"history"`
	HistoryDropped int       `json:"history_dropped,omitempty"`
}

// OpEvent is one entry of an op's history.
type OpEvent struct {
	At Time `json:"at"`
	// Outcome is the state the attempt led to (done, retrying,
	// dlq_pending), or "replayed".
	Outcome    string `json:"outcome"`
	ErrorClass string `json:"error_class,omitempty"`
	Error      string `json:"error,omitempty"` // the start of the attempt's error
}

// OpList is the answer of GET /v1/ops: a page of ops in id order.
type OpList struct {
	Ops  []Op   `json:"ops"`
	Next string `json:"next"` // pass as after for the next page; "" at the end
}

// Delivery is the JSON body Baton POSTs to the app for a background op
// (sidecar.app.url), as the app decodes it. The payload is the bytes that
// were accepted, unchanged.
type Delivery struct {
	ID         string          `json:"id"`
	Object     string          `json:"object"`
	Info       string          `json:"info"`
	Payload    json.RawMessage `json:"payload"`
	Attempt    int             `json:"attempt"`
	Token      string          `json:"token"` // the fencing token, a decimal int64
	Seq        uint64          `json:"seq"`
	AcceptedAt string          `json:"accepted_at"`
}
