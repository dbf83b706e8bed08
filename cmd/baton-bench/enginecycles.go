package main

// zk-cycles --engine: W1's cycles through Baton's lock engine (lock.Engine,
// the native protocol, one session) instead of two bare multis: alone, or
// with --socket behind the lean sidecar's hand-written HTTP and canned
// answers. Between the go-zookeeper figures (zk-cycles, the lean sidecar)
// and `baton serve`, it splits Baton's own CPU per W1 cycle into the
// engine's (its requests, contexts, the session's validity bookkeeping and
// the connection's acknowledgement tracker) and the sidecar's (net/http's
// request, routing, the lease table, JSON).

import (
	"context"
	"errors"
	"time"

	"github.com/batonhq/baton/lock"
)

// engineObject is one object's W1 requests through an engine.
type engineObject struct {
	e   *lock.Engine
	obj string
	g   *lock.Grant
}

// newEngineObject starts a native engine on root, as `baton serve` runs it
// (the servers' tickTime, the session timeout of cost's sidecar).
func newEngineObject(addr, root string) (*engineObject, error) {
	e, err := lock.New(lock.Options{
		Servers: []string{addr}, Root: root, Protocol: lock.Native, NodeID: "engine-cycles",
		SessionTimeout: 15 * time.Second, TickTime: time.Duration(tickTime(addr)) * time.Millisecond,
		ForegroundWait: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	if err := waitConnected(e); err != nil {
		e.Close()
		return nil, err
	}
	return &engineObject{e: e, obj: "cost/w1"}, nil
}

func (o *engineObject) acquire() error {
	if o.g != nil {
		return errors.New("engine cycles: acquire while holding")
	}
	g, err := o.e.Acquire(context.Background(), o.obj, lock.Foreground, lock.AcquireOptions{Wait: time.Minute})
	if err != nil {
		return err
	}
	o.g = g
	return nil
}

func (o *engineObject) release() error {
	if o.g == nil {
		return errors.New("engine cycles: release without a grant")
	}
	err := o.g.Release(context.Background())
	o.g = nil
	return err
}
