package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// Signal is a request to the holder of an object, written into the holder's
// privateLock by any engine (any sidecar) and delivered to the holder's
// engine through the watch it keeps on privateLock anyway: no request per
// grant when nobody signals, one data event when somebody does.
type Signal struct {
	Kind   string    `json:"kind"`             // e.g. "revoke", "preempt"
	Reason string    `json:"reason,omitempty"` // free text for logs and answers
	From   string    `json:"from,omitempty"`   // sender's sidecar.node.id
	Who    string    `json:"who,omitempty"`    // the caller behind the sender, e.g. "uid=0 pid=42"
	At     time.Time `json:"at"`               // sender's clock, informative
	WaitMS int64     `json:"wait_ms,omitempty"`
}

// ErrNotSignallable is returned by Signal when the holder is not a Baton
// grant (the plugin's privateLock): nothing can be asked of it safely.
var ErrNotSignallable = errors.New("lock: the holder is not a Baton grant")

// Signal writes sig into the privateLock of the object's current holder (or
// of the grant whose token is token, when token is not 0) and returns that
// holder. The write is a multi that also checks the object node's data
// version read with privateLock, so it lands on that grant's privateLock or
// not at all. It returns ErrNoNode when there is no holder (or it is not the
// one with token) and ErrNotSignallable for a holder that is not Baton's.
func (e *Engine) Signal(ctx context.Context, object string, token int64, sig Signal) (*Node, error) {
	name, err := EscapeObject(object)
	if err != nil {
		return nil, err
	}
	if sig.From == "" {
		sig.From = e.opts.NodeID
	}
	if sig.At.IsZero() {
		sig.At = time.Now().UTC().Truncate(time.Millisecond)
	}
	s, err := e.connectedSession(ctx)
	if err != nil {
		return nil, err
	}
	objPath := e.root + "/" + name
	for range 5 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		_, ost, err := s.conn.Get(objPath)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, ErrNoNode
		}
		if err != nil {
			return nil, fmt.Errorf("lock: signal %q: %w", object, err)
		}
		data, pst, err := s.conn.Get(objPath + "/" + privateLock)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, ErrNoNode
		}
		if err != nil {
			return nil, fmt.Errorf("lock: signal %q: %w", object, err)
		}
		if token != 0 && pst.Czxid != token {
			return nil, ErrNoNode
		}
		holder := toNode("", data, pst)
		holder.Token = pst.Czxid
		var d nodeData
		if !holder.Known || json.Unmarshal(data, &d) != nil || pst.Version < plVersion {
			return &holder, ErrNotSignallable
		}
		d.Signal = &sig
		nd, _ := json.Marshal(d)
		_, err = s.conn.Multi(
			&zk.CheckVersionRequest{Path: objPath, Version: ost.Version},
			&zk.SetDataRequest{Path: objPath + "/" + privateLock, Data: nd, Version: pst.Version},
		)
		switch {
		case err == nil:
			holder.Name = holderChild(s, objPath, d.Req)
			return &holder, nil
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
			continue // another grant or another signal meanwhile: read again
		default:
			return nil, fmt.Errorf("lock: signal %q: %w", object, err)
		}
	}
	return nil, fmt.Errorf("lock: signal %q: privateLock kept changing", object)
}

// holderChild returns the name of the child whose data names request req
// (the grant's own child, which privateLock does not name), or "" when none
// does any more. The holder's child is normally first in grant order, so
// this is one listing and one read; past 100 reads (a background holder
// behind a long foreground queue) it gives up with "".
func holderChild(s *session, objPath, req string) string {
	kids, _, err := s.conn.Children(objPath)
	if err != nil {
		return ""
	}
	queue, _ := sortedQueue(kids)
	for _, c := range queue[:min(len(queue), 100)] {
		data, _, err := s.conn.Get(objPath + "/" + c)
		if err != nil {
			continue
		}
		var d nodeData
		if json.Unmarshal(data, &d) == nil && d.Req == req {
			return c
		}
	}
	return ""
}
