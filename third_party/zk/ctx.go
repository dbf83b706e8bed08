package zk

// Baton's patch (BATON_PATCH.md): calls that stop waiting when a context
// ends, made by the caller's goroutine. Without them a caller that must
// not outwait its context (a lock wait with a deadline, on a server that
// stalls) runs each call on another goroutine and waits for either: two
// goroutine hand-offs per call, and a call that may still be sent after
// its caller gave up, behind the caller's next request.

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotSent is what a call's late function gets when the call's context
// ended before the request was handed to the connection: it was never sent.
var ErrNotSent = errors.New("zk: request not sent: its context ended first")

// MultiCtx is Multi, except that it returns ctx's error as soon as ctx ends
// without an answer. late (if not nil) is then called once, on a goroutine
// of its own: with the answer when it comes (a request already handed to
// the connection runs on the server all the same), or with ErrNotSent when
// the request was never handed to the connection. ctx's error is ctx.Err()
// itself, and an answer's error never is (a connection whose Write failed
// with context.Canceled or DeadlineExceeded hands go-zookeeper that value:
// it comes wrapped), so a caller can tell the two apart. When MultiCtx
// returns anything else, late is not called.
func (c *Conn) MultiCtx(ctx context.Context, late func([]MultiResponse, error), ops ...interface{}) ([]MultiResponse, error) {
	req, err := newMultiRequest(ops)
	if err != nil {
		return nil, err
	}
	res := &multiResponse{}
	recv, err := c.queueRequestCtx(ctx, opMulti, req, res)
	if err != nil {
		if late != nil {
			go late(nil, ErrNotSent)
		}
		return nil, err
	}
	select {
	case r := <-recv:
		return multiResult(res, answerErr(r.err))
	case <-c.shouldQuit:
		return nil, ErrConnectionClosed // as in request: res may still be written
	case <-ctx.Done():
		if late != nil {
			go func() {
				select {
				case r := <-recv:
					late(multiResult(res, r.err))
				case <-c.shouldQuit:
					late(nil, ErrConnectionClosed)
				}
			}()
		}
		return nil, ctx.Err()
	}
}

// queueRequestCtx is queueRequest for a request that is not sent once ctx
// has ended: it returns ctx's error when the request was not handed to the
// connection (a request of a closed connection is, and is answered
// ErrConnectionClosed).
func (c *Conn) queueRequestCtx(ctx context.Context, opcode int32, req interface{}, res interface{}) (<-chan response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rq := &request{
		xid:        c.nextXid(),
		opcode:     opcode,
		pkt:        req,
		recvStruct: res,
		recvChan:   make(chan response, 2),
	}
	select {
	case <-c.shouldQuit:
		rq.recvChan <- response{-1, ErrConnectionClosed}
	case c.sendChan <- rq:
		select { // a tie, as in queueRequest
		case <-c.shouldQuit:
			rq.recvChan <- response{-1, ErrConnectionClosed}
		default:
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return rq.recvChan, nil
}

// answerErr is an answer's error, never a context's own (see MultiCtx).
func answerErr(err error) error {
	if err == context.Canceled || err == context.DeadlineExceeded {
		return fmt.Errorf("zk: connection: %w", err)
	}
	return err
}
