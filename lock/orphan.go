package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// ErrNotOrphan is returned by FreeOrphan when the object's holder is not an
// orphan: its child is there (a grant, or an acquire recovering), or it is
// not a Baton privateLock.
var ErrNotOrphan = errors.New("lock: the holder is not an orphan")

type orphanVerdict int

const (
	notOrphan    orphanVerdict = iota // its child is there
	orphanUnsure                      // something changed while we looked
	isOrphan
)

// orphanCheck reports whether holder, a Baton privateLock read before the
// call, is an orphan: no child of its session carries its request id. Every
// Baton grant's child exists before or with its privateLock and is deleted
// with it or after it, so a privateLock that lived from before a listing
// until after that listing's children were read, with none of them its
// holder's, has no grant behind it (unless someone deleted the holder's
// child by hand). A child that vanished between the listing and its read
// could be the holder's: unsure then. It returns privateLock's stat as last
// read, for an orphan.
func (e *Engine) orphanCheck(ctx context.Context, s *session, objPath string, holder *Node) (orphanVerdict, *zk.Stat, error) {
	kids, err := zcall(ctx, func() ([]string, error) {
		c, _, err := s.conn.Children(objPath)
		return c, err
	}, nil)
	if err != nil {
		return unsureOf(err)
	}
	// In the plugin's order: the holder was first when granted, and only
	// foreground children created since can sort ahead of it, so a live
	// holder's child is met at once (the order does not change the verdict).
	queue, _ := sortedQueue(kids)
	for _, k := range queue {
		r, err := s.get(ctx, objPath+"/"+k)
		if err != nil {
			return unsureOf(err)
		}
		if r.stat.EphemeralOwner == holder.Session && reqOf(r.data) == holder.RequestID {
			return notOrphan, nil, nil
		}
	}
	r, err := s.get(ctx, objPath+"/"+privateLock)
	if err != nil {
		return unsureOf(err)
	}
	if r.stat.Czxid != holder.Token {
		return orphanUnsure, nil, nil
	}
	return isOrphan, r.stat, nil
}

// unsureOf is orphanCheck's verdict after a failed read: unsure, with the
// error unless the node was gone.
func unsureOf(err error) (orphanVerdict, *zk.Stat, error) {
	if errors.Is(err, zk.ErrNoNode) {
		return orphanUnsure, nil, nil
	}
	return orphanUnsure, nil, err
}

// FreeOrphan deletes the object's privateLock if it is an orphan (see
// Node.Orphan) and, when token is not 0, its creation zxid is token. The
// delete is a multi that checks the object node's version read before
// privateLock (every Baton grant bumps it) and privateLock's version, so it
// removes that node or nothing. It returns the orphan, ErrNoNode when
// the object is not held (or not with token), and ErrNotOrphan when the
// holder is a grant, an acquire in progress or not Baton's. Safe for
// concurrent use.
func (e *Engine) FreeOrphan(ctx context.Context, object string, token int64) (*Node, error) {
	op := fmt.Sprintf("free orphan of %q", object)
	return e.onHolder(ctx, object, token, op, func(s *session, objPath string, h holderRead) (*Node, bool, error) {
		holder := h.holder
		if !holder.Known || h.pl.Version < plVersion {
			return &holder, false, ErrNotOrphan
		}
		verdict, last, err := e.orphanCheck(ctx, s, objPath, &holder)
		if err != nil {
			return nil, false, fmt.Errorf("lock: %s: %w", op, err)
		}
		switch verdict {
		case notOrphan:
			return &holder, false, ErrNotOrphan
		case orphanUnsure:
			return nil, true, nil // changed meanwhile: look again
		}
		holder.Orphan = true
		_, err = s.conn.Multi(
			&zk.CheckVersionRequest{Path: objPath, Version: h.obj.Version},
			&zk.DeleteRequest{Path: objPath + "/" + privateLock, Version: last.Version},
		)
		switch {
		case err == nil:
			e.log.Warn("orphan privateLock freed", "object", object, "token", holder.Token,
				"session", fmt.Sprintf("0x%x", holder.Session), "request_id", holder.RequestID, "sidecar", holder.Sidecar)
			return &holder, false, nil
		case gone(err):
			return nil, true, nil // changed meanwhile: look again
		default:
			return nil, false, fmt.Errorf("lock: %s: %w", op, err)
		}
	})
}
