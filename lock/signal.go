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
	ID     string    `json:"id,omitempty"` // a standing ask's (Engine.Ask), for Engine.Withdraw
	// Session is the ZooKeeper session of the engine that wrote an ask
	// (Engine.Ask): its requester waits in line with a node of that
	// session, so Grant.LiveAsks can tell a requester that died without
	// withdrawing (review of issue 18).
	Session int64 `json:"session,omitempty"`
	// Req is the request id (AcquireOptions.RequestID) of the acquire an
	// ask is made for: its node carries it in whichever session it
	// queues, so Grant.LiveAsks counts the ask live also when the session
	// it was stamped with was lost before the requester queued.
	Req string `json:"req,omitempty"`
}

// ErrNotSignallable is returned by Signal when the holder is not a Baton
// grant (the plugin's privateLock): nothing can be asked of it safely.
var ErrNotSignallable = errors.New("lock: the holder is not a Baton grant")

// KindWithdrawn is the Kind of the Signal a grant's OnSignal receives when
// a standing ask (Engine.Ask) it saw was withdrawn (Engine.Withdraw); its ID
// is the withdrawn ask's.
const KindWithdrawn = "withdrawn"

// maxAsks bounds the standing asks one privateLock carries.
const maxAsks = 32

// ErrTooManyAsks is returned by Ask when the holder already carries
// maxAsks standing asks.
var ErrTooManyAsks = errors.New("lock: the holder already carries too many standing asks")

// Signal writes sig into the privateLock of the object's current holder (or
// of the grant whose token is token, when token is not 0) and returns that
// holder. The write is a multi that also checks the object node's data
// version read with privateLock, so it lands on that grant's privateLock or
// not at all. It returns ErrNoNode when there is no holder (or it is not the
// one with token) and ErrNotSignallable for a holder that is not Baton's.
func (e *Engine) Signal(ctx context.Context, object string, token int64, sig Signal) (*Node, error) {
	e.stamp(&sig)
	return e.update(ctx, object, token, func(d *nodeData, _ *Node) (bool, error) {
		d.Signal = &sig
		return true, nil
	})
}

// Ask writes sig as a standing ask into the privateLock of the object's
// current holder: it is the holder's last Signal (delivered like Signal's)
// and stays among its Asks until its sender withdraws it (Withdraw, by
// sig.ID, random if empty) or the grant ends. check, if not nil, sees the
// holder before anything is written; its error is returned as it is and
// nothing is written. Ask returns the holder and the ask as written;
// ErrNoNode, ErrNotSignallable as Signal does, ErrTooManyAsks.
func (e *Engine) Ask(ctx context.Context, object string, sig Signal, check func(holder *Node) error) (*Node, Signal, error) {
	if e.opts.Protocol == Native {
		return nil, sig, fmt.Errorf("%w: ask %q", ErrNotNative, object)
	}
	e.stamp(&sig)
	if sig.ID == "" {
		sig.ID = newRequestID()
	}
	if sig.Session == 0 {
		// the session the requester waits in line with: a connected one,
		// not one just lost whose successor is not open yet (update waits
		// for it all the same)
		if s, err := e.connectedSession(ctx); err == nil {
			sig.Session = s.sessionID()
		}
	}
	n, err := e.update(ctx, object, 0, func(d *nodeData, holder *Node) (bool, error) {
		if check != nil {
			if err := check(holder); err != nil {
				return false, err
			}
		}
		asks := make([]Signal, 0, len(d.Asks)+1)
		for _, a := range d.Asks {
			if a.ID != sig.ID {
				asks = append(asks, a)
			}
		}
		if len(asks) >= maxAsks {
			return false, ErrTooManyAsks
		}
		d.Asks = append(asks, sig)
		// A signal that is not an ask (a revocation) stays: its holder
		// may not have read it yet, and finds this ask among the Asks.
		if d.Signal == nil || d.Signal.ID != "" {
			d.Signal = &sig
		}
		return true, nil
	})
	return n, sig, err
}

// Withdraw removes the standing ask id (Engine.Ask) from the privateLock of
// the grant whose token is token, if it is still there; the holder's
// engine then delivers a Signal of kind KindWithdrawn with that ID. A
// holder gone (ErrNoNode) or an ask already gone is not an error.
func (e *Engine) Withdraw(ctx context.Context, object string, token int64, id string) error {
	_, err := e.update(ctx, object, token, func(d *nodeData, _ *Node) (bool, error) {
		found := false
		asks := d.Asks[:0:0]
		for _, a := range d.Asks {
			if a.ID == id {
				found = true
				continue
			}
			asks = append(asks, a)
		}
		if d.Signal != nil && d.Signal.ID == id {
			d.Signal, found = nil, true
		}
		d.Asks = asks
		if len(d.Asks) == 0 {
			d.Asks = nil
		}
		return found, nil
	})
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	return err
}

func (e *Engine) stamp(sig *Signal) {
	if sig.From == "" {
		sig.From = e.opts.NodeID
	}
	if sig.At.IsZero() {
		sig.At = time.Now().UTC().Truncate(time.Millisecond)
	}
}

// update applies change to the data of the object's holder (the grant with
// token, when not 0) and writes it in a multi checked against the object
// node's data version and privateLock's version; it reads again on a
// conflict. change returns whether to write at all.
func (e *Engine) update(ctx context.Context, object string, token int64, change func(d *nodeData, holder *Node) (bool, error)) (*Node, error) {
	op := fmt.Sprintf("signal %q", object)
	return e.onHolder(ctx, object, token, op, func(s *session, objPath string, h holderRead) (*Node, bool, error) {
		holder := h.holder
		var d nodeData
		if !holder.Known || json.Unmarshal(h.data, &d) != nil || h.pl.Version < plVersion {
			return &holder, false, ErrNotSignallable
		}
		write, err := change(&d, &holder)
		if err != nil || !write {
			return &holder, false, err
		}
		nd, _ := json.Marshal(d)
		_, err = s.conn.Multi(
			&zk.CheckVersionRequest{Path: objPath, Version: h.obj.Version},
			&zk.SetDataRequest{Path: objPath + "/" + privateLock, Data: nd, Version: h.pl.Version},
		)
		switch {
		case err == nil:
			holder.Name = holderChild(s, objPath, d.Req)
			return &holder, false, nil
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
			return nil, true, nil // another grant or another signal meanwhile: read again
		default:
			return nil, false, fmt.Errorf("lock: %s: %w", op, err)
		}
	})
}

// objectPath checks the object's name and returns a connected session and
// the object node's path: the start of every call on one object.
func (e *Engine) objectPath(ctx context.Context, object string) (*session, string, error) {
	name, err := EscapeObject(object)
	if err != nil {
		return nil, "", err
	}
	s, err := e.connectedSession(ctx)
	if err != nil {
		return nil, "", err
	}
	return s, e.root + "/" + name, nil
}

// holderRead is what readHolder read: the object node's stat, privateLock's
// data and stat, and the holder they describe.
type holderRead struct {
	obj    *zk.Stat
	data   []byte
	pl     *zk.Stat
	holder Node
}

// onHolder calls try with the object's holder as readHolder reads it (the
// grant with token, when not 0), and reads again while try reports that
// the holder or privateLock changed meanwhile (again), 5 times at most.
// ErrNoNode: the object is not held (or not by that grant). op names the
// call in errors ("lock: op: ..."); try's own errors are returned as they
// are.
func (e *Engine) onHolder(ctx context.Context, object string, token int64, op string,
	try func(s *session, objPath string, h holderRead) (n *Node, again bool, err error)) (*Node, error) {
	if e.opts.Protocol == Native { // signals, asks and orphans are privateLock's
		return nil, fmt.Errorf("%w: %s", ErrNotNative, op)
	}
	s, objPath, err := e.objectPath(ctx, object)
	if err != nil {
		return nil, err
	}
	for range 5 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var h holderRead
		h.obj, h.data, h.pl, h.holder, err = readHolder(s, objPath, token)
		if errors.Is(err, ErrNoNode) {
			return nil, ErrNoNode
		}
		if err != nil {
			return nil, fmt.Errorf("lock: %s: %w", op, err)
		}
		n, again, err := try(s, objPath, h)
		if !again {
			return n, err
		}
	}
	return nil, fmt.Errorf("lock: %s: privateLock kept changing", op)
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

// readHolder reads the object node, then its privateLock, and returns the
// object node's stat (read first: a write guarded by its version lands on
// this holder or not at all), privateLock's data and stat, and the holder it
// describes. ErrNoNode: no object, no holder, or (token not 0) not the grant
// with that token.
func readHolder(s *session, objPath string, token int64) (obj *zk.Stat, data []byte, pl *zk.Stat, holder Node, err error) {
	_, obj, err = s.conn.Get(objPath)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil, Node{}, ErrNoNode
	}
	if err != nil {
		return nil, nil, nil, Node{}, err
	}
	data, pl, err = s.conn.Get(objPath + "/" + privateLock)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil, Node{}, ErrNoNode
	}
	if err != nil {
		return nil, nil, nil, Node{}, err
	}
	if token != 0 && pl.Czxid != token {
		return nil, nil, nil, Node{}, ErrNoNode
	}
	holder = toNode("", data, pl)
	holder.Token = pl.Czxid
	return obj, data, pl, holder, nil
}
