// Package lock is Baton's ZooKeeper lock engine: the blocking, prioritised
// write lock of the original Elasticsearch plugin (ZkBlockingWriteLock),
// rebuilt so that Baton and the plugin exclude each other on one ZooKeeper.
//
// # Recipe
//
// An object is a child of the lock root (a container node by default, so
// empty objects are reaped). A request creates an ephemeral-sequential child
// "<prefix>-<10 digits>": prefix "A" for foreground work, "B" for background
// work. Children other than "privateLock" are sorted by name, so every
// foreground request precedes every background one, then by sequence. The
// first in that order that finds no "privateLock" creates it (ephemeral) and
// holds the lock; its fencing token is privateLock's creation zxid, taken
// from the multi that created it. Waiters watch only what can unblock them:
// their predecessor, or privateLock when they are first. Release deletes the
// caller's node and privateLock in one multi that fails unless privateLock is
// the version this grant created.
//
// # What is guaranteed
//
// The engine never reports two grants of one object whose validity windows
// overlap. A grant is valid until the session deadline: the send time of the
// last request or ping the server acknowledged, plus the negotiated session
// timeout, minus a safety margin, on Go's monotonic clock. The server cannot
// expire the session (and so cannot hand privateLock to someone else) before
// that deadline, because it counts from when it received the request, which
// is later than its send. At the deadline the engine declares every grant of
// the session lost, closes the session and opens a new one; a grant of an old
// session is never reported held again.
//
// A grant can still be lost at any time (a paused process does not notice its
// own deadline passing): watch [Grant.Done] and hand [Grant.Token] to the
// storage, which must reject writes carrying a token lower than one it has
// seen (Elasticsearch: version_type=external_gte with the token as version).
//
// # Fast path
//
// An uncontended acquire costs one multi (create child, create privateLock,
// set its data) when the engine can prove nobody else created a child since
// it last saw the object empty but for its own nodes: ZooKeeper's sequence
// suffix grows by one per create under the parent, so a suffix equal to the
// one predicted from the engine's own creates proves there was none. The
// proof holds for one incarnation of the object node: a container can be
// reaped and created again by someone else, so a prediction carries the
// node's czxid and a data watch on it, and ZooKeeper delivers that watch's
// event before the answer to any later request. A mismatch (or a fired
// watch) gives privateLock back without reporting a grant and turns the fast
// path off for the object until the slow path sees it alone again.
//
// # Holder watch
//
// A holder watches its privateLock (deleted by anyone else: lost), armed
// Options.HolderWatchDelay after the grant so that short critical sections
// do not pay a request for it; session loss reaches every grant directly.
package lock
