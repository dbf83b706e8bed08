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
// foreground request precedes every background one, then by sequence
// (unless a background request aged: see "Aging"). The first in that order that finds no "privateLock" creates it (ephemeral) and
// holds the lock; its fencing token is privateLock's creation zxid, taken
// from the multi that created it. Waiters watch only what can unblock them:
// their predecessor, or privateLock when they are first. Release deletes the
// caller's node and privateLock in one multi that fails unless privateLock is
// the version this grant created.
//
// # What is guaranteed
//
// The engine never reports two grants of one object whose validity windows
// overlap. A grant is valid until the session deadline: base + the
// negotiated session timeout − a safety margin, on Go's monotonic clock,
// where base is a moment from which the leader is known to count the
// session's expiry. Only the leader expires sessions, and it pushes a
// session's expiry only when a follower's ping reply carries the session's
// touches (every tickTime/2); a follower cut off from its leader keeps
// answering its clients' pings by itself. So pings and reads move nothing:
// when a write or a sync (forwarded to the leader) is answered, the base
// moves to the send time of the newest request acknowledged at least
// Options.TickTime before that write's send, a touch the leader has
// provably processed (see session.acked). While a session has grants or
// waiters it sends a sync every min(timeout/8, TickTime/2) to keep the base
// moving; an idle session sends nothing. A handshake moves the base to the
// connect request's send: the leader creates or revalidates (touches) the
// session before the server answers. At the deadline the engine declares
// every grant of the session lost, closes the session (once reconnected, so
// that the server drops its nodes) and opens a new one; a grant of an old
// session is never reported held again.
//
// A grant can still be lost at any time (a paused process does not notice its
// own deadline passing): watch [Grant.Done] and hand [Grant.Token] to the
// storage, which must reject writes carrying a token lower than one it has
// seen (Elasticsearch: version_type=external_gte with the token as version).
//
// # privateLock identity
//
// Every Baton privateLock has version 1 (created and given its data in one
// multi), so a version identifies nothing. The multi that creates
// privateLock also bumps the object node's data version. A release's first
// attempt is one multi that checks that version, deletes privateLock at the
// version we last saw and our child: any later Baton grant on the same node
// has bumped the version. Everything retried (a release whose reply was
// lost, give-backs, cleanups after a reconnect) first reads privateLock and
// requires its creation zxid to be our token, then deletes it in the same
// guarded multi, because a container reaped and created again starts its
// versions over (its first grant brings it to the version ours had). Our
// child is deleted only after a read shows it is ours (session and request
// id).
//
// What remains needs a foreign actor: someone (an operator) deletes the
// object node itself with our nodes under it, another request re-creates it
// and is granted with the same child name and object version (e.g. the
// first grant on both incarnations), and our release's first attempt is
// applied before our holder watch reports the deletion: within
// HolderWatchDelay (25 ms) of our grant, or while that event is on its way
// (one-way latency). Also, the plugin's grants do not bump the version: a
// privateLock the plugin created after an operator deleted ours could be
// deleted by our first release attempt if it had version 1 (the plugin
// creates it with version 0).
//
// # Fast path
//
// An uncontended acquire costs one multi (create child, create privateLock,
// set its data, bump the object's version) when the engine can prove nobody
// else created a child since it last saw the object empty but for its own
// nodes: ZooKeeper's sequence suffix grows by one per create under the
// parent, so a suffix equal to the one predicted from the engine's own
// creates proves there was none. The proof holds for one incarnation of the
// object node: a container can be reaped and created again by someone else,
// so a prediction carries the node's czxid, and the multi's setData on the
// object node answers with the czxid of the node it applied to. A mismatch
// gives privateLock back without reporting a grant and turns the fast path
// off for the object until the slow path sees it alone again. No watch is
// kept on idle objects.
//
// Without a prediction an acquire still tries the one multi, then lists the
// children ("create, then verify"): ZooKeeper answers a session's requests in
// order, so the listing shows at least what the multi did, and if no child
// sorts ahead of ours we hold privateLock while first in order, the plugin's
// grant condition. Otherwise privateLock goes back at once and the request
// waits in line with its child. Two round trips instead of the plugin's three
// (create, list, create privateLock); an object where others were seen goes
// straight to the plugin's steps until the engine sees itself alone there.
//
// # Recovery and audit
//
// A create whose reply was lost (the connection dropped with it in flight)
// may or may not have been applied: the request stays uncertain until a
// recovery after the reconnect has looked (sync, then our privateLock is
// given back and our child adopted, by request id and session). Any step of
// that recovery that cannot finish keeps the request uncertain: it is
// retried after the next reconnect, and a request that ends uncertain
// leaves a sweep of every node carrying its id to the session. As a second
// line the session audits, every Options.AuditInterval and after every
// reconnect, the ephemeral nodes it owns under the objects it has touched
// and deletes, guarded by version, those whose request id is neither an
// acquire in progress nor a grant held (a create in flight is owned by its
// live request). A child that a live request of the session created (its
// name kept with the request, or, native, its request id in its name) is
// left unread: the audit would read it only to find that live id. A
// plugin child's name is kept with the creation zxid of the object node the
// request created it or listed it in, and leaves it unread only in that
// object node: names repeat when the object node is renewed. Inspect
// shows a Baton privateLock without its holder's child as an orphan;
// Engine.FreeOrphan deletes one from any engine.
//
// # Lock-delay
//
// Options.LockDelay (per request AcquireOptions.LockDelay; Chubby's and
// Consul's lock-delay): after a holder vanished — its session ended, or its
// privateLock was deleted by anyone but its release — the object is not
// granted again by a request with a delay until that delay has passed since
// the request saw the holder gone. A clean release is not delayed.
//
// How a vanish is told from a release, from any engine: every Baton
// deletion of its own privateLock that is not a loss — the release multi, a
// give-back of a privateLock never reported granted whose grant multi was
// guarded by a version the request had read (a fast-path prediction, or the
// check below), the cleanup of a release whose reply was lost — writes the
// object node's data in the same multi: {"released":"<token>"}, guarded by the object's data
// version our grant set (it replaces the CheckVersion the multi had). The
// grant multi sets that data to nil, so the object node always describes
// its last Baton grant: token = its mzxid (the grant's multi wrote it last)
// and not released, or released with the token named. A session that ends,
// a lost grant's cleanup (its holder may not know), a give-back or sweep of
// a privateLock created by an unguarded multi ("create, then verify" of a
// request without a delay, or one whose outcome was uncertain: what it
// overwrote is unknown, and a record would hide a vanish before it), Grant.Abandon (a grant
// ended without its holder's release: the sidecar uses it for an expired
// lease, a holder process that exited, a revocation, the end of a drain),
// the audit, Engine.FreeOrphan and an operator's delete write nothing:
// vanished (an unguarded give-back thus costs the waiters with a delay one
// delay even after a clean release: the safe side).
//
// A request with a delay that is first in order and finds no privateLock
// reads the object node, privateLock and the object node again. The holder
// vanished when privateLock was absent between two identical reads and
// either the last Baton grant has no release recorded, or the newest
// privateLock the request saw itself (it notes privateLock's czxid whenever
// its listing shows one) is newer than every Baton grant — the plugin's,
// whose releases are never recorded. Then the request waits the delay on
// its own monotonic clock from that second answer (at or after the vanish:
// conservative; once per vanished holder, not again on every listing) and
// looks again. Its grant multi requires the object node's data version it
// read (a grant or release in between fails it: list again). A try-once
// request fails instead, and a wait that runs out inside the delay fails
// with InstanceLockError as always. With a delay, only a fast-path
// prediction (nobody created a node since our own clean release) skips
// this check, and its multi requires the object node's data version that
// release left (a stale prediction creates nothing and takes the slow path): create-then-verify and the foreground shortcut are off for
// such requests. Cost, for requests with a delay only: a read of the
// object node before each grant, and of privateLock per listing that shows
// one.
//
// Limits: the plugin's holders record no release, so a plugin holder's
// clean release is delayed like a vanish (the safe side) — when the waiter
// saw its privateLock; one that came and went between a waiter's listings
// is not. The plugin's waiters do not honour the delay: during a migration
// the delay holds only among Baton requests. An engine closed with grants
// held (their holders told lost) counts as vanished, and so does a release
// by an older Baton that writes no record (during an upgrade). The object
// node's data is Baton's: the plugin never reads it. The record lives in
// the object node: with container object nodes (the default), a holder that
// vanishes while nobody waits leaves an empty node that ZooKeeper's
// container reaper may delete (znode.container.checkIntervalMs, 60 s by
// default), and a request that then creates the object again finds no
// trace and is not delayed (TestReview2LockDelayAfterReap shows it; `baton
// serve` warns when zookeeper.lock.delay is set with container nodes). Use
// persistent object nodes for the delay to hold in every case.
//
// # Aging
//
// Options.BackgroundMaxWait W: a background request that has waited longer
// than W is served before foreground requests that arrive later. Every
// engine must order the children the same way (a waiter watches its
// predecessor in its own order; two orders that disagree could have two
// waiters watch each other), so the rule uses only what ZooKeeper stores:
//
//   - A background node records its creator's W in its data ("age_ms"); it
//     ages at t = ctime + age_ms, ctime being ZooKeeper's creation time
//     (stamped by the leader).
//   - An ageable background node b precedes a foreground node a iff a was
//     created after b (higher sequence number: A- and B- children share
//     the parent's counter) and after b aged (a.ctime > t). Otherwise every
//     foreground node precedes every background node, as before.
//     Foreground nodes keep their order; ageable background nodes go by
//     (t, sequence) — with one W everywhere, by sequence.
//   - Background nodes that do not age (no age_ms: the plugin's, or from an
//     engine with aging off) go after every ageable one, by sequence. The
//     plugin's nodes never age.
//
// The relation of two nodes depends on those two nodes only, so it never
// changes while they exist, and engines listing at different times agree
// (as long as the leader's clock does not step back between two creates;
// then engines can disagree on the nodes created around the step, which
// costs a wait, never exclusion). The plugin's waiters order by name;
// every waiter of either kind watches a node before it in this order, so
// no two wait for each other. A plugin foreground request that arrived
// after an aged Baton background one does not know it should wait: both
// find themselves first and race for privateLock (aging is best effort
// against the plugin's requests during a migration). An older Baton, which
// orders by name, behaves like the plugin here. Exclusion never depends on the order:
// privateLock decides. "Waited longer" is measured on ZooKeeper's clock; a
// background request is granted, at the latest, after the foreground
// requests that arrived before it aged (and the holder).
//
// Cost: a listing reads (once per engine and child, cached) the background
// children and the foreground children created after an ageable one, only
// when a background node is not alone at the end of the queue. Inspect
// shows Node.Aged for an ageable waiter ordered before at least one
// foreground waiter.
//
// # Local handoff
//
// On the plugin protocol a release hands the lock to a waiter of the same
// engine (same session) in its own multi when that waiter is known to be
// first after the holder: one write per local handoff instead of two (the
// release, then, after a watch event, the successor's privateLock multi).
// Known to be first without a listing: the waiter is foreground, has no
// lock-delay, watches the holder's child, and in the engine's latest
// listing every child ahead of it is the holder's or one this engine has
// deleted since. Only a child with a lower sequence number can sort ahead
// of a foreground node (one counter per parent numbers A- and B- children;
// an aged background node precedes only foreground nodes created after it
// aged), and all of those existed when that listing was answered. So no
// participant first in order (the plugin's, another sidecar's) is passed
// over: one queued between the holder and the waiter is the node the
// waiter watches, and the holder's release is the ordinary one.
//
// The multi sets the object node's data to nil at the version the
// holder's grant set (no Baton grant since; the new grant's mark, as every
// grant multi writes it), deletes the holder's privateLock at version 1
// (no signal, ask or revocation written since) and the holder's child,
// checks that the waiter's child exists, creates the waiter's privateLock
// (ephemeral, this session's, the waiter's data) and sets its data. That
// last answer's Stat gives the token: privateLock's creation zxid, the
// multi's zxid, above every earlier token. The privateLock is like any
// Baton grant's (version 1) to Check, Inspect, Signal and watchers on
// other sidecars, and nobody sees privateLock absent (the multi is
// atomic), so the plugin's and other sidecars' requests keep excluding.
// The waiter is woken in process with the answer: no watch event, listing
// or read. Its validity counts like any grant's (the multi went through
// the leader).
//
// Not handed over (the ordinary release; the waiter takes privateLock as
// before): a background waiter (a foreground request arriving later sorts
// ahead of it unseen), a background holder (ahead of a foreground waiter
// only by aging), Abandon, a holder that saw a signal or ask, a waiter
// with a lock-delay, a session not current or not connected. A multi that
// applies nothing (a signal written unseen, the waiter's child gone) is
// followed by the ordinary release. The waiter's offer names its child; the
// holder claims it before sending and settles it with the answer, and a
// waiter woken by its watch first waits for a claimed handoff's answer
// (the event can arrive before the reply), as does one whose watch, set
// after its offer, finds the holder's child gone. A waiter that gives up while
// the multi is in flight is not reported granted: the holder gives that
// privateLock back. A multi whose reply was lost leaves the waiter
// uncertain: after the reconnect it gives back any privateLock of its own
// and queues on, and the holder's release completes as after any lost
// release reply.
//
// # Native protocol
//
// Options.Protocol = Native (zookeeper.lock.protocol=native) is Baton's own
// layout, for lock roots where no plugin participant is left. It keeps the
// queue (ephemeral-sequential children, foreground before background, then
// by sequence) and moves the holder from privateLock into the object
// node's data:
//
//   - A child is "<prefix>_<x|s>_<request id>_<10 digits>": x exclusive,
//     s shared. The object node is persistent and carries a persistent
//     child named privateLock, the sentinel, created with it (with a child
//     of its own, privateLock/native, that every grant's multi checks: an
//     ephemeral privateLock cannot have one, so a grant proves the sentinel
//     is still ours even after an operator deleted it): a plugin
//     participant (the original plugin, or Baton on the plugin protocol)
//     takes the lock by creating an ephemeral privateLock, which cannot
//     succeed here, so it waits and is never granted; Baton on the plugin
//     protocol reports ErrForeignNode naming the root. Any other child
//     under a native object (a plugin node "A-0000000012") makes a native
//     acquire fail with ErrForeignNode naming the root and the node: never
//     a grant beside it.
//   - The object node's data names the holders: {"native":1,"h":[{"r":
//     request id,"s":shared,"t":token}],"n":[queue],"x":token}; a
//     caller's AcquireOptions.RequestID gets a unique suffix here, as ids
//     name holders. Every write
//     of it is guarded by the data version its writer read, so grants,
//     releases and hand-overs are serialised by ZooKeeper. A holder named
//     there whose child is gone (its session ended) holds nothing. The data
//     is always read before the children (one session answers in order): a
//     holder named in the data and missing from a later listing is gone for
//     good.
//   - A request creates its child, reads the data, lists, and is eligible
//     when exclusive: no live holder and first of the waiters; shared: no
//     live exclusive holder and only shared waiters ahead of it (a waiting
//     exclusive request is not overtaken by later shared ones). It is
//     granted by rewriting the data (live holders + itself), guarded by
//     the version read and by its own child's existence; its token is that
//     write's zxid. Otherwise it watches one child: the waiter just ahead
//     of it (for a shared request, the nearest exclusive one), or, first
//     in line, a live holder's.
//   - Release is one multi: delete our child and rewrite the data. The
//     last holder to leave names the next holder(s) in that write, with a
//     check in the multi that each named child lives (one that left since
//     is skipped, not named dead) — the first waiter it knows of (ahead of
//     it too: a shared grant may pass shared waiters that have not taken
//     yet) if it is foreground (no later request can
//     sort ahead of a foreground one, so that waiter is the one watching
//     us), or the leading foreground shared ones — and hands on the queue
//     behind them (at most 64 names; fewer to local successors, below) so
//     that the next holder can do the same without listing. The
//     successor's watch fires on our child's deletion and one read of the
//     data finds its grant (token: that write's zxid): one write and one
//     read per handoff, the peers' cost. A
//     background successor is not named (a foreground request arriving
//     meanwhile would sort ahead of it unseen); the data is left free and
//     the successor lists and takes it (two writes).
//   - A successor in the same engine and session is woken in process with
//     the multi's answer: one write per local handoff, no read. When every
//     successor a release names waits on this engine, and the engine's
//     listing holds the names it would drop, it hands on 8 (only
//     the named successors read them, and a local exclusive one tops them
//     up from that listing, below): a long local drain's release stays a
//     small write (64 names made it ≈ 3 KB, and ZooKeeper's write of it
//     ≈ 1.5× as slow). Names the listing lacks (handed on by another
//     engine's release) are kept: dropping them would cost a listing.
//   - An exclusive holder tops the names it was handed up to 64 from the
//     engine's latest listing of the object (those behind the last name
//     it has, or behind its own child), so a queue of any length drains
//     without listing again: any listing is the queue up to its last
//     foreground child (whatever sorts ahead of a foreground child existed
//     when it was created), less departures, which the release multi's
//     checks skip. The session's audit leaves a child whose name carries a
//     live request id of the session without reading it.
//   - The engine's waiters on one object share its reads (data, then
//     children, sent together and answered in order: one round trip; one
//     in flight and one queued behind it, each joinable by
//     any waiter whose create it follows), as the plugin protocol shares
//     its listings: 10,000 arrivals send a few listings, not one each of up
//     to 10,000 children (those clogged the session's connection until its
//     acknowledgements were older than the session timeout).
//   - Local waiters park: a foreground exclusive request (no lock-delay,
//     not try-once) that finds an exclusive holder of this engine and
//     session on the object, or a request that holder's release is
//     handing the lock to, creates nothing: it waits in process, in
//     order. A release that names nobody grants the first parked request
//     in its own multi: our child deleted, its child created, the data
//     rewritten to name it (guarded by the version, as always) and the
//     sentinel checked. The token is that write's zxid. One write per
//     acquisition, and nothing else: W2 on one sidecar was a create, a
//     view of two reads and a watch besides the release (five requests
//     per acquisition; the peers make four). The data is written last in
//     the multi, so its stat counts the children the multi left: the
//     sentinel and the new holder's alone, and the new holder hosts the
//     rest of the queue; anyone else (a waiter of another engine, a child
//     of ours, a plugin node), and the parked requests queue the usual
//     way behind them while the new holder lists, before its grant is
//     reported, to learn whom to name. So a request of another engine is
//     passed by one parked request at most, and a plugin node under a
//     native root fails the request with ErrForeignNode (its child and
//     name given back): never a grant reported beside it. A release
//     naming a waiter of this engine moves the queue behind it; naming
//     another engine's waiter, leaving the object free, an Abandon, a
//     lost grant or a failed multi send the parked requests to queue the
//     usual way (a multi whose answer was lost leaves its request to give
//     back what landed, as any create's). A parked request whose wait
//     ends leaves the queue with nothing to delete; once a release took
//     it, it waits for that multi's outcome first (the child it may have
//     is known only then) and gives back what it got. A request parked
//     for a second (parkPatience) queues the usual way: parking is for
//     short holds, and a host whose child an operator deleted (still
//     "held", it may hold for an hour) is found by the usual waiter's
//     view or watch. A parked request whose session is lost leaves at
//     once. Parked requests are not in ZooKeeper: Inspect and the status
//     of other sidecars do not show them. Options.DisableParking turns it
//     off.
//   - A contended grant (its request found someone ahead of it, even if
//     that holder left before its watch was set) that knows of nobody
//     behind it learns arrivals: a children watch on the object, the
//     first arrival listed at once, later ones at most once per 5 ms
//     (bursts), until the first waiter is foreground (nobody later sorts
//     ahead of it) or more than 64 wait (background ones first: a
//     release names none of them, and re-listing a long queue per
//     arrival costs more than a foreground arrival's own take). A
//     release that still knows of nobody waits for that listing if it is
//     in flight (the arrival that fired it is the one a caller releasing
//     "as soon as someone waits" knows of), else lists itself: one read
//     before the write, rather than the successor's two writes.
//   - An uncontended grant learns arrivals the same way once it has been
//     held for HolderWatchDelay (with the holder watch): a waiter that
//     queued during a long hold is named by the release, one write and
//     one read, where it listed and took the free object itself (two
//     writes and two reads). Its release lists only if the watch fired
//     since the last listing: a long hold nobody queued behind costs
//     that one listing, off the release's path. A grant with requests
//     of its engine parked behind it then does not learn: its release
//     grants the first of them in its write, whoever else queued.
//   - An uncontended acquire with a prediction (the engine's own clean
//     release left the data at a known version, and the sequence number it
//     predicts proves nobody created a child since) is one multi: create
//     the child and name ourselves, guarded by that version. Without one
//     (another engine used the object since), an object not seen contended
//     lately is read (the version), then taken in that one multi. The
//     multi's setData answers with the children the multi left: the
//     sentinel (checked in it) and ours alone, and the grant stands with
//     no further request; anyone else there, and the object is listed
//     to check that nobody queued ahead (the listing's stat shows
//     whether the data is still what we wrote; only if not is it read
//     again); someone queued ahead: everything is given back and the
//     request queues. A prediction refused by another engine's version
//     (one refused write) is not tried again on that object until a read
//     shows it held, and an engine whose predictions mostly turn out stale
//     (objects taken by turns on several sidecars) reads first on every
//     object until its reads show them holding again (a score: stale up,
//     held down; read first at 4 of 8); an object seen contended lately is queued on at once
//     (the view after the create reads the holders anyway). A first touch
//     (the read finds no object node) is one multi: it creates the object
//     node with free data, its sentinel and the sentinel's mark, then our
//     child, and names us guarded by data version 0 (three requests with
//     the release). A node made meanwhile, or no lock root yet, and
//     nothing is created: the node is made (or looked at) alone, and a
//     node this request made is taken in the one multi guarded by data
//     version 0, unread: a node at version 0 was never written since its
//     creation, so whichever incarnation the multi lands on names nobody.
//   - A waiter whose view shows a holder named with its child gone, and
//     itself first, takes nothing at once: most often a release landed
//     between the view's two reads, and its write may name this waiter. A
//     release of the same engine tells it in process; another one's, one
//     read of the data (unchanged: the holder truly vanished; on to
//     lock-delay and take). A take on that view was refused by the
//     release's data version: a logged write for nothing.
//   - A create or grant whose reply was lost is given back after the
//     reconnect (a sync, then our name out of the data and every child
//     carrying our request id deleted, in one guarded multi) and the
//     request queues afresh.
//   - Lock-delay: a holder named in the data whose child is gone vanished;
//     so did one recorded in "x" (Abandon, a lost grant's cleanup). A clean
//     release leaves neither, and a waiter named just as it gave up
//     deletes its name with its child.
//
// Not in the native protocol: signals and asks (preemption, revocation:
// they live in privateLock's data; ErrNotNative), FreeOrphan, and aging
// (background requests never age there). The object nodes stay (persistent,
// with their sentinel) once created.
//
// # Holder watch
//
// A holder watches its privateLock (deleted by anyone else: lost), armed
// Options.HolderWatchDelay after the grant so that short critical sections
// do not pay a request for it; session loss reaches every grant directly.
//
// # Watching an object
//
// Engine.WaitChange long-polls for a change of an object's holder or queue
// (etcd's Election.Observe): one children watch on the object node per
// watched object (an exists watch while it is missing), shared by every
// caller; each firing is one read, published to all of them as a new
// version, and the last 64 versions are kept so that a caller chaining
// versions misses none between its calls. Answers that are not the
// watcher's latest state, and "unchanged" at a timeout, come from a fresh
// read after a sync.
package lock
