package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Check reports whether token is the object's current grant (Chubby's
// CheckSequencer): current is true only if the object's privateLock exists
// right now with creation zxid token, the grant's fencing token. holder is
// the current grant's token, 0 when the object is free.
//
// The read is preceded by a sync of the object's path, so that a session
// connected to a lagging follower still sees every grant and release the
// ensemble committed before Check was called: a token made stale by a new
// grant whose acquire has returned is never reported current. Check does not
// consult any lease: a grant whose holder was told it is lost stays current
// until its privateLock is deleted, which Baton does not do before the last
// validity it told that holder.
//
// An error wraps ErrUnavailable when ZooKeeper could not be read in time, or
// ErrInvalidObject for a bad object name.
func (e *Engine) Check(ctx context.Context, object string, token int64) (current bool, holder int64, err error) {
	s, objPath, err := e.objectPath(ctx, object)
	if err != nil {
		return false, 0, err
	}
	if _, err := zcall(ctx, func() (string, error) { return s.conn.Sync(objPath) }, nil); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return false, 0, checkErr(ctx, objPath, "sync", err)
	}
	if e.opts.Protocol == Native {
		cur, holder, err := e.checkNative(ctx, s, objPath, token)
		if err != nil && !errors.Is(err, ErrForeignNode) {
			return false, 0, checkErr(ctx, objPath, "read", err)
		}
		return cur, holder, err
	}
	st, err := zcall(ctx, func() (*zk.Stat, error) {
		ok, st, err := s.conn.Exists(objPath + "/" + privateLock)
		if err == nil && !ok {
			st = nil
		}
		return st, err
	}, nil)
	if err != nil {
		return false, 0, checkErr(ctx, objPath, "read", err)
	}
	if st == nil {
		return false, 0, nil
	}
	return st.Czxid == token, st.Czxid, nil
}

// checkErr wraps an error of Check: the context's own end as is (the
// caller's deadline or cancellation), anything else from ZooKeeper as
// ErrUnavailable.
func checkErr(ctx context.Context, objPath, op string, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("lock: check %s: %s: %w", objPath, op, err)
	}
	return fmt.Errorf("%w: check %s: %s: %v", ErrUnavailable, objPath, op, err)
}
