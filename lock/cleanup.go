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
//   - privateLock is deleted only in a multi that also checks the object
//     node's data version: every Baton grant bumps it in the multi that
//     creates privateLock, so the version we saw at our grant matches only
//     while no other Baton grant has happened, and then privateLock at
//     version 1 is ours (the plugin's privateLock is version 0).
type cleanup struct {
	kind       cleanupKind
	objPath    string
	node       string // child name: cleanChild, cleanRelease
	objVersion int32  // object node's data version at our grant: cleanPL, cleanRelease
	plVersion  int32  // privateLock's data version: 1, more after signals; 0 = plVersion
	reqID      string // cleanChild, cleanSweep
}

func (c cleanup) plv() int32 {
	if c.plVersion == 0 {
		return plVersion
	}
	return c.plVersion
}

type cleanupKind int

const (
	cleanChild   cleanupKind = iota // our child, if still ours
	cleanPL                         // our privateLock, if no Baton grant happened since
	cleanRelease                    // a release whose outcome is unknown
	cleanSweep                      // every node of a request whose creates may have landed unseen
)

func (c cleanup) String() string {
	switch c.kind {
	case cleanChild:
		return "child " + c.objPath + "/" + c.node
	case cleanPL:
		return "privateLock " + c.objPath
	case cleanRelease:
		return "release " + c.objPath + "/" + c.node
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
		return s.deleteOwnPL(c.objPath, c.objVersion, c.plv())
	case cleanRelease:
		_, err := s.conn.Multi(releaseOps(c.objPath, c.node, c.objVersion, c.plv())...)
		if err == nil || !gone(err) {
			return err
		}
		// Not applied as a whole: privateLock or our child may be gone
		// already, privateLock may carry a newer signal, or it is someone
		// else's. Delete what is ours.
		if err := s.deleteOwnPL(c.objPath, c.objVersion, -1); err != nil {
			return err
		}
		return s.deleteOwnChild(c.objPath+"/"+c.node, c.reqID)
	case cleanSweep:
		return s.sweep(c.objPath, c.reqID)
	}
	return fmt.Errorf("lock: unknown cleanup kind %d", c.kind)
}

// releaseOps deletes privateLock and our child in one multi that applies
// only while no other Baton grant has happened on the object since ours.
func releaseOps(objPath, node string, objVersion, plv int32) []any {
	return []any{
		&zk.CheckVersionRequest{Path: objPath, Version: objVersion},
		&zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: plv},
		&zk.DeleteRequest{Path: objPath + "/" + node, Version: -1},
	}
}

// deleteOwnPL deletes privateLock while the object node still has the
// version our grant set. plv is privateLock's version: 1 unless signals were
// written into it; -1 reads it first and accepts only a Baton privateLock
// (version ≥ 1; the plugin's has version 0).
func (s *session) deleteOwnPL(objPath string, objVersion, plv int32) error {
	if plv < 0 {
		_, st, err := s.conn.Get(objPath + "/" + privateLock)
		if gone(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Version < plVersion {
			return nil // not a Baton privateLock
		}
		plv = st.Version
	}
	_, err := s.conn.Multi(
		&zk.CheckVersionRequest{Path: objPath, Version: objVersion},
		&zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: plv},
	)
	if gone(err) {
		return nil
	}
	return err
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
	for range 3 {
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
			_, err := s.conn.Multi(
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
		break
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
