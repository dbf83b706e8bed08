package lock

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"
)

// MaxLockDelay bounds Options.LockDelay and AcquireOptions.LockDelay.
const MaxLockDelay = 10 * time.Minute

// LockDelayObserver is an optional Observer method: LockDelayed is called
// once per vanished holder a request waits out (see the package doc,
// "Lock-delay").
type LockDelayObserver interface {
	LockDelayed(object string)
}

// releaseMarker is the object node's data after a clean release by Baton:
// the released grant's token. The multi that grants sets the data to nil,
// so the data says whether the object's last Baton grant ended cleanly.
type releaseMarker struct {
	Released string `json:"released"`
}

func markerData(token int64) []byte {
	b, _ := json.Marshal(releaseMarker{Released: strconv.FormatInt(token, 10)})
	return b
}

// markRelease is the first op of every clean Baton deletion of its own
// privateLock: it records the token as released, and applies only while the
// object node has the version our grant set (no Baton grant since).
func markRelease(objPath string, objVersion int32, token int64) *zk.SetDataRequest {
	return &zk.SetDataRequest{Path: objPath, Data: markerData(token), Version: objVersion}
}

// lastHolderVanished decides, from the object node (read after privateLock
// was seen absent) and saw, the creation zxid of the newest privateLock this
// request saw (0: none), whether the object's last holder vanished rather
// than released. key names that holder: a request waits out the delay once
// per key, counted from its first observation of the absence.
//
//   - No Baton grant on this object node (data version 0): nothing vanished,
//     unless saw says otherwise.
//   - Data is a release marker for token T: the last Baton grant (T) was
//     released cleanly.
//   - Anything else (nil: the grant's own write; data we cannot parse): the
//     last Baton grant, token = the node's mzxid (the grant's multi wrote it
//     last), has no clean release: vanished.
//   - saw newer than the last Baton grant: that privateLock was not Baton's
//     (the plugin's grants do not write the object node); its end is not
//     recorded anywhere, so it counts as vanished.
func lastHolderVanished(data []byte, st *zk.Stat, saw int64) (key int64, vanished bool) {
	var last int64
	released := false
	if st.Version > 0 {
		last = st.Mzxid
		var m releaseMarker
		if len(data) > 0 && json.Unmarshal(data, &m) == nil {
			if t, err := strconv.ParseInt(m.Released, 10, 64); err == nil && t > 0 {
				last, released = t, true
			}
		}
	}
	if saw > last {
		return saw, true
	}
	if last == 0 || released {
		return 0, false
	}
	return last, true
}

// lockDelay runs when the request is first in order and its listing showed
// no privateLock, for a request with a lock-delay. It returns the object
// node's data version to guard the grant with (the multi fails if any grant
// or release happened since the read), or -1: list again (privateLock is
// back, the object is gone, or the delay was waited out and the state must
// be read again).
func (r *request) lockDelay(ctx context.Context) (int32, error) {
	ost, err := r.read(ctx, r.objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	key, vanished := lastHolderVanished(ost.data, ost.stat, r.sawPL)
	if !vanished {
		return ost.stat.Version, nil
	}
	// Is the holder the read names gone? privateLock absent between two
	// reads that show the object node unchanged: that holder's privateLock
	// is gone and no Baton release (nor grant) happened meanwhile. The
	// absence is timed after the second answer: conservative.
	exists, err := zcall(ctx, func() (bool, error) {
		ok, _, err := r.s.conn.Exists(r.plPath)
		return ok, err
	}, nil)
	if err != nil {
		return -1, err
	}
	if exists {
		return -1, nil
	}
	again, err := r.read(ctx, r.objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	if again.stat.Version != ost.stat.Version || again.stat.Mzxid != ost.stat.Mzxid {
		return -1, nil // a release or grant meanwhile: read again
	}
	now := time.Now()
	if r.vanishAt.IsZero() || key != r.vanishKey {
		r.vanishKey, r.vanishAt = key, now
		r.e.delays.Add(1)
		r.e.observe(func(o Observer) {
			if d, ok := o.(LockDelayObserver); ok {
				d.LockDelayed(r.object)
			}
		})
		r.e.log.Info("last holder vanished without releasing: waiting out the lock-delay", "object", r.object, "holder_token", key, "delay", r.delay)
	}
	wait := r.vanishAt.Add(r.delay).Sub(now)
	if wait <= 0 {
		return ost.stat.Version, nil
	}
	if r.tryOnce {
		return -1, ErrNotFirst
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.s.lost:
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	return -1, nil
}

// notePL records the creation zxid of the current privateLock, if any.
func (r *request) notePL(ctx context.Context) error {
	czxid, err := zcall(ctx, func() (int64, error) {
		ok, st, err := r.s.conn.Exists(r.plPath)
		if err != nil || !ok {
			return 0, err
		}
		return st.Czxid, nil
	}, nil)
	if err == nil {
		r.sawPL = max(r.sawPL, czxid)
	}
	return err
}
