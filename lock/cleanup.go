package lock

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// A cleanup is a delete that must happen while the session lives; the
// session's cleaner retries it after every reconnect until it is done or the
// session ends (then the server deletes our ephemeral nodes itself).
//
// A retried delete must never remove a node that is not ours any more:
// between the first try and the retry, the first try may have been applied
// (its reply was lost) and someone else may have created a node of the same
// name. Names say nothing, and neither does privateLock's version (every
// Baton grant's is 1). So:
//
//   - a child is deleted only after a read shows our session owns it and its
//     data carries our request id (child names repeat only when the object
//     node is renewed, which takes longer than the read-to-delete round trip);
//   - privateLock is deleted only after a read shows its creation zxid is
//     our grant's token, in a multi that also checks the object node's data
//     version: every Baton grant bumps it in the multi that creates
//     privateLock, so between the read and the delete no other Baton grant
//     can have happened on that node. (The version alone is not enough: a
//     container reaped and created again starts from version 0, and its
//     first grant brings it to the version ours had.)
type cleanup struct {
	kind       cleanupKind
	objPath    string
	node       string // child name: cleanChild, cleanRelease
	objVersion int32  // object node's data version at our grant: cleanPL, cleanRelease
	token      int64  // privateLock's creation zxid: cleanPL, cleanRelease
	reqID      string // cleanChild, cleanRelease, cleanSweep
	// lost (cleanRelease): the grant was lost, not released; its
	// privateLock goes without a release marker, so that waiters with a
	// lock-delay treat its end as a vanish (its holder may not know).
	lost bool
	// noMark (cleanPL): the multi that created this privateLock set the
	// object node's data without a version guard, so what it overwrote (a
	// release record, or a vanished holder's grant) is unknown; deleting it
	// with a release record could hide a vanish (TestReview2LockDelayGiveBackMasksVanish).
	noMark bool
}

type cleanupKind int

const (
	cleanChild   cleanupKind = iota // our child, if still ours
	cleanPL                         // our privateLock, if no Baton grant happened since
	cleanRelease                    // a release whose outcome is unknown
	cleanSweep                      // every node of a request whose creates may have landed unseen
	cleanNative                     // native protocol: our children and our name among the holders (lost: record a vanish); with node: a waiter's leave (nativeLeave)
)

func (c cleanup) String() string {
	switch c.kind {
	case cleanChild:
		return "child " + c.objPath + "/" + c.node
	case cleanPL:
		return "privateLock " + c.objPath
	case cleanRelease:
		return "release " + c.objPath + "/" + c.node
	case cleanNative:
		return "native " + c.objPath + " request " + c.reqID
	}
	return "sweep " + c.objPath + " request " + c.reqID
}

// plVersion is the data version of every privateLock Baton creates: created
// and given its data in one multi.
const plVersion = 1

// gone reports errors meaning the guarded delete has nothing (of ours) to do.
func gone(err error) bool {
	return errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion)
}

// run performs the cleanup once. nil: done (deleted, or nothing of ours is
// left); a connection error: retry after the reconnect; anything else: give up.
func (c cleanup) run(s *session) error {
	switch c.kind {
	case cleanChild:
		return s.deleteOwnChild(c.objPath+"/"+c.node, c.reqID)
	case cleanPL:
		return s.deleteOwnPL(c.objPath, c.objVersion, c.token, !c.noMark) // never reported granted
	case cleanRelease:
		// A release whose outcome is unknown (its reply was lost, or it
		// was never sent): what is still ours is deleted, each after a
		// read that shows it is ours.
		if err := s.deleteOwnPL(c.objPath, c.objVersion, c.token, !c.lost); err != nil {
			return err
		}
		return s.deleteOwnChild(c.objPath+"/"+c.node, c.reqID)
	case cleanSweep:
		return s.sweep(c.objPath, c.reqID)
	case cleanNative:
		if c.node != "" {
			return s.nativeLeave(c.objPath, c.node, c.reqID)
		}
		return s.nativeEnd(c.objPath, c.reqID, c.lost, c.token)
	}
	return fmt.Errorf("lock: unknown cleanup kind %d", c.kind)
}

// releaseOps deletes privateLock and our child in one multi that applies
// only while no other Baton grant has happened on the object since ours,
// and, with mark, records the release in the object node (see
// markRelease; Grant.Abandon does not).
func releaseOps(objPath, node string, objVersion, plv int32, token int64, mark bool) []any {
	var guard any = &zk.CheckVersionRequest{Path: objPath, Version: objVersion}
	if mark {
		guard = markRelease(objPath, objVersion, token)
	}
	return []any{
		guard,
		&zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: plv},
		&zk.DeleteRequest{Path: objPath + "/" + node, Version: -1},
	}
}

// deleteOwnPL deletes privateLock if a read shows it is the one created
// with token, in a multi that checks the object node still has the version
// our grant set.
//
// A signal, ask or withdrawal written between the read and the delete
// (ErrBadVersion while privateLock still reads as ours) is read again, up to
// 10 times: each is a write any requester may make at any moment, and giving
// up silently would leave privateLock — ephemeral, of our live session —
// blocking the object until the session ends (issue 23); past that it is an
// error, and the caller keeps the cleanup queued.
//
// mark records a clean end (markRelease): every deletion but a lost
// grant's, whose holder may not know it lost.
func (s *session) deleteOwnPL(objPath string, objVersion int32, token int64, mark bool) error {
	for range 10 {
		_, st, err := s.conn.Get(objPath + "/" + privateLock)
		if gone(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Czxid != token || st.EphemeralOwner != s.sessionID() {
			return nil // not ours
		}
		var guard any = &zk.CheckVersionRequest{Path: objPath, Version: objVersion}
		if mark {
			guard = markRelease(objPath, objVersion, token)
		}
		_, err = s.conn.Multi(guard, &zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: st.Version})
		if errors.Is(err, zk.ErrBadVersion) {
			continue // read again: still ours at a newer version, or not ours
		}
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	}
	return fmt.Errorf("lock: privateLock of %s kept changing, or the object node's version moved under it", objPath)
}

// giveBackPL deletes the privateLock this request created a moment ago (its
// reply in hand, its child still under the object so the node cannot have
// been reaped): the multi's version checks suffice. On any error the caller
// queues a cleanPL, which reads first. mark: the grant multi was guarded by
// a version whose state the request had read (see cleanup.noMark).
func (s *session) giveBackPL(objPath string, objVersion int32, token int64, mark bool) error {
	var guard any = &zk.CheckVersionRequest{Path: objPath, Version: objVersion}
	if mark {
		guard = markRelease(objPath, objVersion, token)
	}
	_, err := s.conn.Multi(guard, &zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: plVersion})
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err // a version mismatch too: a signal may have been written; cleanPL reads
}

func (s *session) deleteOwnChild(p, reqID string) error {
	data, st, err := s.conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if !s.owns(data, st, reqID) {
		return nil
	}
	if err := s.conn.Delete(p, st.Version); err != nil && !gone(err) {
		return err
	}
	return nil
}

// owns reports whether a node's data and owner show it was created by
// request reqID in this session.
func (s *session) owns(data []byte, st *zk.Stat, reqID string) bool {
	var d nodeData
	return st != nil && st.EphemeralOwner == s.sessionID() && json.Unmarshal(data, &d) == nil && d.Req == reqID
}

// sweep deletes every node a failed request may have created without seeing
// the reply. The sync first makes the server we read from catch up with the
// leader: after a reconnect, a create sent on the old connection has been
// applied by then or never will be (the leader refuses a moved session's
// requests from the old server).
func (s *session) sweep(objPath, reqID string) error {
	if _, err := s.conn.Sync(objPath); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	done := false
	for range 5 {
		_, ost, err := s.conn.Get(objPath)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		data, pst, err := s.conn.Get(objPath + "/" + privateLock)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		if err == nil && s.owns(data, pst, reqID) {
			// Ours: no other grant can have happened since ours, so the
			// object's version read before is current unless someone
			// deleted ours and was granted meanwhile (then: read again).
			_, err := s.conn.Multi( // never reported granted, but what its multi overwrote is unknown: no release record
				&zk.CheckVersionRequest{Path: objPath, Version: ost.Version},
				&zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: pst.Version},
			)
			if errors.Is(err, zk.ErrBadVersion) {
				continue
			}
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
		done = true
		break
	}
	if !done { // never "done" with our privateLock still there
		return fmt.Errorf("lock: sweep %s: privateLock kept changing", objPath)
	}
	kids, _, err := s.conn.Children(objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if k == privateLock {
			continue
		}
		if err := s.deleteOwnChild(objPath+"/"+k, reqID); err != nil {
			return err
		}
	}
	return nil
}
