package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/rawio"
)

// transport is HTTP/1.1 over the sidecar's unix socket with keep-alive
// connections, where the calling goroutine writes the request and reads the
// answer itself. net/http's Transport hands every request to a writer and a
// reader goroutine per connection; on an idle 2-core machine each of those
// hand-offs can cost a thread wake-up, which showed as ~100 µs per lock
// cycle. Parsing stays with net/http (Request.Write, ReadResponse).
type transport struct {
	dial func(ctx context.Context) (net.Conn, error)

	mu     sync.Mutex
	idle   []*pconn
	closed bool
}

type pconn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

const maxIdle = 64

// aLongTimeAgo is a deadline in the past, to interrupt a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

func (t *transport) get(ctx context.Context) (*pconn, bool, error) {
	t.mu.Lock()
	if n := len(t.idle); n > 0 {
		pc := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		return pc, true, nil
	}
	t.mu.Unlock()
	c, err := t.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	rw := rawio.New(c) // without waking the runtime's sysmon after each idle gap (internal/rawio)
	return &pconn{c: c, br: bufio.NewReader(rw), bw: bufio.NewWriter(rw)}, false, nil
}

func (t *transport) put(pc *pconn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.idle) >= maxIdle {
		pc.c.Close()
		return
	}
	t.idle = append(t.idle, pc)
}

// closeIdle closes the idle connections (in-flight ones close when done).
func (t *transport) closeIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, pc := range idle {
		pc.c.Close()
	}
}

// roundTrip sends req and returns the status and the whole body (at most
// 16 MiB). A kept-alive connection the sidecar closed meanwhile (idle
// timeout) is detected by an EOF before any byte of the answer and the
// request is sent once more on a fresh connection: the sidecar never reads
// a request from a connection it closed.
func (t *transport) roundTrip(ctx context.Context, req *http.Request, body []byte) (*http.Response, []byte, error) {
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.get(ctx)
		if err != nil {
			return nil, nil, err
		}
		if body != nil {
			req.Body = io.NopCloser(bytesReader(body))
			req.ContentLength = int64(len(body))
		}
		stop := context.AfterFunc(ctx, func() { _ = pc.c.SetDeadline(aLongTimeAgo) })
		resp, b, err := exchange(pc, req)
		interrupted := !stop()
		if err != nil {
			pc.c.Close()
			if interrupted || ctx.Err() != nil {
				return nil, nil, context.Cause(ctx)
			}
			if reused && attempt == 0 && staleConn(err) {
				continue
			}
			return nil, nil, err
		}
		if resp.Close || interrupted {
			pc.c.Close()
		} else {
			t.put(pc)
		}
		return resp, b, nil
	}
}

func exchange(pc *pconn, req *http.Request) (*http.Response, []byte, error) {
	if err := req.Write(pc.bw); err != nil {
		return nil, nil, err
	}
	if err := pc.bw.Flush(); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(pc.br, req)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	return resp, b, nil
}

// staleConn reports errors of a kept-alive connection the peer had closed.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		isConnReset(err)
}
