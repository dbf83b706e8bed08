package sidecar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A waiting acquire is a connection that says nothing until it is answered,
// and with thousands of them (the 10,000-waiter probe) what net/http keeps
// per connection while its handler runs dominates the sidecar's memory: a
// 4 KiB read buffer, 4 and 2 KiB write buffers, the connection's goroutine
// with the deep stack of the handler it runs, its request state. So, once
// the sidecar has many acquires in flight, an acquire still waiting after a
// moment leaves net/http: the handler runs on a goroutine of its own, the
// connection is hijacked and net/http's goroutine and buffers go; a
// close watcher notices the caller leaving (one epoll set for all detached
// connections; elsewhere a goroutine reading each), and a closed connection
// cancels the wait, as net/http's background read does; the answer — exactly what the handler wrote — is
// written as one HTTP/1.1 response with "Connection: close", which every
// HTTP/1.1 client (curl, Java, Go) follows by opening a new connection for
// its next request. Below the threshold nothing changes: an uncontended
// acquire pays no extra goroutine.
const (
	// detachWaiters: acquires in flight on this sidecar from which a
	// waiting one is detached; above the peers harness's 64 waiters (W5),
	// whose handoffs keep their connections.
	detachWaiters = 256
	// detachAfter: how long an acquire runs under net/http first; most
	// grants that do not wait come within it.
	detachAfter = 20 * time.Millisecond
	// detachWriteTimeout bounds writing the answer to a detached caller.
	detachWriteTimeout = 10 * time.Second
)

// errCallerGone cancels a detached acquire whose caller closed its
// connection.
var errCallerGone = errors.New("sidecar: the caller closed its connection")

// detached states (detachState.state)
const (
	stAttached int32 = iota // net/http's goroutine waits for the handler
	stDetached              // the connection was hijacked: the handler's goroutine answers
	stFinished              // the handler returned while attached: net/http's goroutine answers
)

// detachable wraps an acquire handler (see the comment above); an error the
// handler returns is written into the recorded answer by the one error
// writer.
func (s *Server) detachable(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		// Counted here, not by admission (s.waiters): a burst of acquires
		// all arrive before the first is admitted.
		inflight := s.detach.inflight.Add(1)
		hj, ok := w.(http.Hijacker)
		if !ok || s.detach.waiters <= 0 || inflight < s.detach.waiters || r.ProtoMajor != 1 {
			defer s.detach.inflight.Add(-1)
			return h(w, r)
		}
		d := &detachState{rec: newRecorder(), body: &eofBody{rc: r.Body, eof: r.Body == nil || r.Body == http.NoBody}}
		r.Body = d.body
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
		r2 := r.WithContext(ctx)
		done := make(chan struct{})
		d.conn = make(chan net.Conn, 1)
		go func() {
			defer s.detach.inflight.Add(-1)
			if err := h(d.rec, r2); err != nil {
				s.errs.write(d.rec, r2, err)
			}
			if d.state.CompareAndSwap(stAttached, stFinished) {
				close(done)
				return
			}
			// detached: answer on the hijacked connection, if it was
			c := <-d.conn
			if c == nil { // the hijack failed: net/http's goroutine answers
				close(done)
				return
			}
			cancel(nil)
			d.answer(c)
			s.wg.Done()
		}()
		t := time.NewTimer(s.detach.after)
		defer t.Stop()
		for {
			select {
			case <-done:
				cancel(nil)
				d.rec.copyTo(w)
				return nil
			case <-r.Context().Done(): // the caller left (or the server closes)
				cancel(context.Cause(r.Context()))
				<-done
				d.rec.copyTo(w)
				return nil
			case <-t.C:
			}
			// The body must have been read to its end (else net/http's
			// reader is still in use): a handler not yet that far (a
			// burst of acquires) is looked at again later.
			if d.body.release() {
				break
			}
			t.Reset(s.detach.after)
		}
		// The state must still be attached.
		if !d.state.CompareAndSwap(stAttached, stDetached) {
			return d.waitAttached(w, r, done, cancel)
		}
		s.wg.Add(1) // before the hijack: the connection is still active, so Run has not reached teardown
		c, _, err := hj.Hijack()
		if err != nil {
			s.wg.Done()
			d.conn <- nil
			return d.waitAttached(w, r, done, cancel)
		}
		// Bytes the caller sent after the request (a pipelined request)
		// are dropped with net/http's reader: the answer closes the
		// connection, after which HTTP/1.1 has the caller send it again.
		s.detach.n.Add(1)
		if d.unwatch, ok = s.closes.watch(c, func() { cancel(errCallerGone) }); !ok {
			d.unwatch = func() {}
			go d.watch(c, cancel)
		}
		d.conn <- c
		return nil
	}
}

// detachState is one detachable acquire's.
type detachState struct {
	state atomic.Int32
	rec   *recorder
	body  *eofBody
	conn  chan net.Conn // the hijacked connection, nil if the hijack failed
	// unwatch stops the close watcher's watch (set before conn is sent)
	unwatch func()
}

// waitAttached is the acquire under net/http to its end.
func (d *detachState) waitAttached(w http.ResponseWriter, r *http.Request, done chan struct{}, cancel context.CancelCauseFunc) error {
	select {
	case <-done:
	case <-r.Context().Done():
		cancel(context.Cause(r.Context()))
		<-done
	}
	cancel(nil)
	d.rec.copyTo(w)
	return nil
}

// watch reads the detached connection until it closes (the caller left:
// cancel the acquire); what the caller says meanwhile (a pipelined
// request) is dropped, the answer closes the connection. It is the
// fallback of the server's closeWatcher (detach_linux.go: one epoll set
// for all).
func (d *detachState) watch(c net.Conn, cancel context.CancelCauseFunc) {
	var b [8]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			cancel(errCallerGone)
			return
		}
	}
}

// answer writes the recorded answer as one HTTP/1.1 response and closes c.
// A lease granted whose answer cannot be written (the caller left as it was
// granted) is released: nobody knows of it (peerConn.wrote).
func (d *detachState) answer(c net.Conn) {
	d.unwatch()
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(detachWriteTimeout))
	_, _ = c.Write(d.rec.response(false))
}

// eofBody is a request body that reports whether it was read to its end,
// and can then let go of net/http's reader (release).
type eofBody struct {
	mu  sync.Mutex
	rc  io.ReadCloser
	eof bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rc == nil {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *eofBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rc == nil {
		return nil
	}
	return b.rc.Close()
}

// release drops net/http's body if it was read to its end.
func (b *eofBody) release() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.eof {
		return false
	}
	b.rc = nil
	return true
}

// recorder is the ResponseWriter a detachable handler writes to.
type recorder struct {
	mu     sync.Mutex
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		w.status = code
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}

// copyTo replays the answer on net/http's writer.
func (w *recorder) copyTo(dst http.ResponseWriter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := dst.Header()
	for k, v := range w.header {
		h[k] = v
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	dst.WriteHeader(w.status)
	_, _ = dst.Write(w.body.Bytes())
}

// response is the answer as HTTP/1.1 bytes, closing the connection unless
// keepAlive.
func (w *recorder) response(keepAlive bool) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	// the keys in order without a heap allocation for the few an answer has
	var buf [8]string
	keys := buf[:0]
	for k := range w.header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := make([]byte, 0, 160+w.body.Len())
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	for _, k := range keys {
		switch k {
		case "Content-Length", "Connection", "Transfer-Encoding", "Date":
			continue
		}
		for _, v := range w.header[k] {
			b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
		}
	}
	b = append(append(append(b, "Date: "...), httpDate()...), "\r\n"...)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(w.body.Len()), 10)
	b = append(b, "\r\n"...)
	if !keepAlive {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, w.body.Bytes()...)
}

// httpDate is the Date header's value now, formatted once a second.
func httpDate() string {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateStamp{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.s
}

type dateStamp struct {
	sec int64
	s   string
}

var lastDate atomic.Pointer[dateStamp]
