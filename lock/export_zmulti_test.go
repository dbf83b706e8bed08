package lock

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
)

// ReviewZmultiConn returns the go-zookeeper connection of e's current
// session (review of 8cd0531: the test queues its own requests on it).
func ReviewZmultiConn(e *Engine) (*zk.Conn, error) {
	s, err := e.current()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("no session")
	}
	return s.conn, nil
}

// ReviewZmultiBounded runs boundedMulti on e's current session: the
// multi within the session's create bound, orphan getting what comes after
// ctx ended.
func ReviewZmultiBounded(ctx context.Context, e *Engine, ops []any, orphan func([]zk.MultiResponse, error)) ([]zk.MultiResponse, error) {
	s, err := e.current()
	if err != nil {
		return nil, err
	}
	return boundedMulti(ctx, s, ops, orphan)
}
