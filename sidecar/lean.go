package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/httpapi"
)

// The lean path: the lock's three hot requests — acquire one object, renew
// a lease, release it — read and answered by the sidecar itself on the
// connection's goroutine, without net/http's server around the handler.
// Every connection starts here. Its requests go through the same router,
// authorization, handlers and error writer as net/http's; what is left out
// is net/http's machinery per request: the background read that watches
// for the caller leaving (a goroutine woken twice per request), its
// response buffers and chunking, and the allocations of its request state
// (issue 21: the sidecar's CPU per lock cycle).
//
// Only requests that are plainly HTTP/1.1 take it: one of the three routes,
// a Host, at most one Content-Length and no Transfer-Encoding, Expect or
// Upgrade, a head that fits leanBuf, a body of at most api.MaxBody. The
// first request that is anything else — another endpoint, HEAD, a chunked
// body, HTTP/1.0, a malformed head — hands the connection to net/http
// with the bytes read so far unread (peerConn.pre), and net/http serves it
// from then on, as it always did: what it answers (including its 400s and
// 413s) is unchanged.
//
// A caller that closes its connection (or its sending side) while its
// request runs cancels the request's context, as net/http's background
// read does: the connection is in the close watcher's epoll set (the one
// detached acquires use) for its whole life, for its hanging up alone, so
// a request costs no system call and no wake-up for this. An answer that
// cannot be written releases the lease it granted (noteGrant), as a
// detached acquire's does.

const (
	// leanBuf is a connection's read buffer: a request's head and a small
	// body fit in it. A head that does not goes to net/http.
	leanBuf = 2048
	// leanIdleTimeout is how long a connection waits for its next request
	// at least (net/http's IdleTimeout on the socket); at most twice that.
	leanIdleTimeout = 2 * time.Minute
	// leanCloseWait bounds the wait for running requests once the stop
	// has cancelled them.
	leanCloseWait = 2 * time.Second
)

// leanServer serves the socket's connections: the lean path, and net/http
// (hs, on ln) for the connections it hands over.
type leanServer struct {
	s    *Server
	h    http.Handler
	ln   *handList
	ctx  context.Context // every request's context descends from it: cancelled by close
	stop context.CancelFunc

	mu      sync.Mutex
	conns   map[*leanConn]struct{}
	closing bool
	wg      sync.WaitGroup // the connections' goroutines
}

func newLeanServer(s *Server, addr net.Addr) *leanServer {
	ctx, stop := context.WithCancel(context.Background())
	return &leanServer{s: s, h: s.handler, ln: newHandList(addr), ctx: ctx, stop: stop, conns: map[*leanConn]struct{}{}}
}

// serve accepts connections on ln until it is closed, then closes the
// list net/http accepts from.
func (ls *leanServer) serve(ln net.Listener) error {
	defer ls.ln.Close()
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// out of descriptors, or the like: as net/http, wait and retry
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			ls.s.log.Warn("accepting a connection failed; retrying", "err", err, "in", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		pc, ok := c.(*peerConn)
		if !ok || ls.s.opts.LeanPathOff || !ls.s.closes.available() { // no close watcher: net/http serves it
			ls.s.leanHanded.Add(1)
			ls.ln.hand(c)
			continue
		}
		lc := &leanConn{ls: ls, pc: pc, remote: pc.RemoteAddr().String()}
		ls.mu.Lock()
		if ls.closing {
			ls.mu.Unlock()
			pc.Close()
			continue
		}
		ls.conns[lc] = struct{}{}
		ls.wg.Add(1)
		ls.mu.Unlock()
		go lc.serve()
	}
}

// shutdown stops the lean connections the way http.Server.Shutdown stops
// its own: an idle one is closed now, one with a request running closes
// once it is answered. It returns when none is left, or ctx's error.
func (ls *leanServer) shutdown(ctx context.Context) error {
	ls.mu.Lock()
	ls.closing = true
	for lc := range ls.conns {
		if lc.idle {
			_ = lc.pc.SetReadDeadline(time.Unix(1, 0)) // wakes its wait for a request
		}
	}
	ls.mu.Unlock()
	select {
	case <-ls.connsDone():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connsDone is closed once every connection's goroutine has returned.
func (ls *leanServer) connsDone() <-chan struct{} {
	done := make(chan struct{})
	go func() { ls.wg.Wait(); close(done) }()
	return done
}

// close ends the requests still running (their context is cancelled) and
// waits a moment for their connections to close: a handler that does not
// return is left running, as http.Server.Close leaves its own. A write
// blocked on a caller that does not read fails (the write deadline too),
// as http.Server.Close's closing the connection makes it fail.
func (ls *leanServer) close() {
	ls.mu.Lock()
	ls.closing = true
	for lc := range ls.conns {
		_ = lc.pc.SetDeadline(time.Unix(1, 0))
	}
	ls.mu.Unlock()
	ls.stop()
	select {
	case <-ls.connsDone():
	case <-time.After(leanCloseWait):
		ls.s.log.Warn("requests still running as the sidecar stops", "after", leanCloseWait)
	}
}

// leanConn is one connection on the lean path.
type leanConn struct {
	ls     *leanServer
	pc     *peerConn
	br     *bufio.Reader
	remote string // pc.RemoteAddr().String(), every request's RemoteAddr: the same for the connection
	// idle: waiting for its next request (ls.mu)
	idle bool
	// renewIdle: when the read deadline of the wait for a request is next
	// pushed back
	renewIdle time.Time
	// headStart: when the request being read began, as net/http counts
	// its ReadTimeout (body included) from it: the connection's accept
	// for its first request, else the first bytes of a head that came in
	// several reads; zero for a head that came whole (it began just now)
	headStart time.Time

	// the caller's hanging up (hangup) and the running request's cancel
	// (goneMu)
	goneMu sync.Mutex
	gone   bool
	cancel context.CancelCauseFunc
}

// serve reads and answers requests until the connection closes or is
// handed to net/http.
func (lc *leanConn) serve() {
	ls := lc.ls
	handed := false
	unwatch, watched := ls.s.closes.watchHangup(lc.pc, lc.hangup)
	defer func() {
		if watched {
			unwatch() // before the close, or net/http's reads
		}
		ls.mu.Lock()
		delete(ls.conns, lc)
		ls.mu.Unlock()
		if !handed {
			lc.pc.Close()
		}
		ls.wg.Done()
	}()
	lc.br = getLeanReader(lc.pc)
	defer func() {
		if lc.br != nil && !handed {
			putLeanReader(lc.br)
		}
	}()
	base := context.WithValue(context.WithValue(ls.ctx, connKey{}, lc.pc), peerKey{}, lc.pc.p)
	lastPost := false
	first := true
	for {
		lc.headStart = time.Time{}
		switch now := time.Now(); {
		case first:
			// a new connection's first head within readHeaderTimeout
			// of its accept, as net/http's (renewIdle stays zero: the
			// next wait sets the idle deadline)
			_ = lc.pc.SetReadDeadline(now.Add(readHeaderTimeout))
			lc.headStart = now
		case now.After(lc.renewIdle):
			// between one and two idle timeouts: not a timer per request
			_ = lc.pc.SetReadDeadline(now.Add(2 * leanIdleTimeout))
			lc.renewIdle = now.Add(leanIdleTimeout)
		}
		ls.mu.Lock()
		if ls.closing {
			ls.mu.Unlock()
			return
		}
		lc.idle = true // from now on shutdown's deadline wakes the wait
		ls.mu.Unlock()
		if lastPost {
			// as net/http: up to 4 CR or LF bytes after a POST are
			// ignored (RFC 9112 §2.2: old clients send CRLF after a
			// POST's body)
			peek, _ := lc.br.Peek(4)
			_, _ = lc.br.Discard(leadingCRorLF(peek))
		}
		head, err := readHead(lc.br, lc, first)
		first = false
		ls.mu.Lock()
		lc.idle = false
		closing := ls.closing
		ls.mu.Unlock()
		if err != nil && (len(head) == 0 || closing || isTimeout(err)) {
			// closed, timed out (net/http too closes a connection whose
			// head did not come in time, unanswered), or shutting down
			return
		}
		var req *leanRequest
		if err == nil {
			req = parseLean(head)
		}
		if req == nil || req.length > int64(api.MaxBody) || !watched || ls.crowded(req) {
			// net/http serves it, from its first byte
			if watched {
				unwatch()
				watched = false
			}
			_ = lc.pc.SetReadDeadline(time.Time{})
			lc.pc.pre = lc.br
			handed = true
			ls.s.leanHanded.Add(1)
			ls.ln.hand(lc.pc)
			return
		}
		_, _ = lc.br.Discard(len(head))
		ls.s.leanServed.Add(1)
		if !lc.answer(base, req) {
			return
		}
		lastPost = req.method == http.MethodPost
	}
}

// answer reads req's body, runs the handler and writes its answer; false
// when the connection must close.
func (lc *leanConn) answer(base context.Context, req *leanRequest) bool {
	var body io.ReadCloser = http.NoBody
	var rest *io.LimitedReader // a body still arriving: the handler reads it
	switch {
	case req.length > 0 && int64(lc.br.Buffered()) >= req.length:
		b := make([]byte, req.length)
		_, _ = io.ReadFull(lc.br, b)
		body = httpapi.NewBufferedBody(b)
	case req.length > 0:
		start := lc.headStart
		if start.IsZero() {
			start = time.Now()
		}
		_ = lc.pc.SetReadDeadline(start.Add(lc.ls.s.opts.readTimeout()))
		lc.renewIdle = time.Time{} // the next wait sets its own
		rest = &io.LimitedReader{R: lc.br, N: req.length}
		body = io.NopCloser(rest)
	}
	if rest == nil && lc.br.Buffered() == 0 {
		// nothing more from the caller yet: its buffer waits in the pool
		// while the request does (a waiting acquire keeps no buffer)
		putLeanReader(lc.br)
		lc.br = nil
		defer func() { lc.br = getLeanReader(lc.pc) }()
	}
	ctx, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	r := &http.Request{
		Method: req.method, URL: req.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: req.header, Body: body, ContentLength: req.length, Host: req.host,
		RequestURI: req.target, Close: req.close, RemoteAddr: lc.remote,
	}
	r = r.WithContext(ctx)
	w := newRecorder()

	lc.goneMu.Lock()
	if lc.gone { // hung up already (it sent this request, then closed)
		cancel(errCallerGone)
	}
	lc.cancel = cancel
	lc.goneMu.Unlock()
	panicked := lc.run(w, r)
	lc.goneMu.Lock()
	lc.cancel = nil
	lc.goneMu.Unlock()

	if panicked {
		return false // as net/http: the connection closes, unanswered
	}
	// a body the handler did not read to its end leaves the connection
	// out of step: it closes after the answer
	closing := req.close || lc.ls.isClosing() || (rest != nil && rest.N > 0)
	if _, err := lc.pc.Write(w.response(!closing)); err != nil {
		return false // a grant in it is released (peerConn.wrote)
	}
	return !closing
}

// run runs the handler; true if it panicked (logged as net/http logs it,
// except http.ErrAbortHandler).
func (lc *leanConn) run(w http.ResponseWriter, r *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				lc.ls.s.log.Error("panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(buf))
			}
		}
	}()
	lc.ls.h.ServeHTTP(w, r)
	return false
}

// leanReaders are the lean connections' read buffers.
var leanReaders sync.Pool

func getLeanReader(c io.Reader) *bufio.Reader {
	if br, ok := leanReaders.Get().(*bufio.Reader); ok {
		br.Reset(c)
		return br
	}
	return bufio.NewReaderSize(c, leanBuf)
}

func putLeanReader(br *bufio.Reader) {
	br.Reset(nil)
	leanReaders.Put(br)
}

// hangup is the close watcher's: the caller hung up; the request running,
// and any it sent before, are cancelled.
func (lc *leanConn) hangup() {
	lc.goneMu.Lock()
	defer lc.goneMu.Unlock()
	lc.gone = true
	if lc.cancel != nil {
		lc.cancel(errCallerGone)
	}
}

// crowded reports an acquire that arrives while the sidecar has many in
// flight (detachWaiters): net/http serves it, and detaches it if it waits
// (detach.go). A lean acquire waits on its connection's goroutine, with
// the stack the request grew (the lean path's own frames below the
// handler's): 10,000 of them waiting took 267 MiB, 26 KB each, where
// detached ones took 211 MiB.
func (ls *leanServer) crowded(req *leanRequest) bool {
	d := &ls.s.detach
	return req.acquire && d.waiters > 0 && d.inflight.Load() >= d.waiters
}

func (ls *leanServer) isClosing() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.closing
}

// headBegun is readHead's: a head has begun and waits for more bytes,
// which must come within readHeaderTimeout, as net/http's (not during a
// stop: its deadline stays).
func (lc *leanConn) headBegun() {
	ls := lc.ls
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if !ls.closing {
		now := time.Now()
		_ = lc.pc.SetReadDeadline(now.Add(readHeaderTimeout))
		lc.renewIdle = time.Time{} // the next wait sets the idle deadline
		if lc.headStart.IsZero() {
			lc.headStart = now
		}
	}
}

// isTimeout reports a read cut off by its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// leadingCRorLF is how many of b's first bytes are CR or LF.
func leadingCRorLF(b []byte) int {
	n := 0
	for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
		n++
	}
	return n
}

// errHeadTooLong: the head did not fit in the buffer (net/http reads it).
var errHeadTooLong = errors.New("sidecar: request head over the lean path's buffer")

// errBareLF: a line of the head ends in LF without CR (net/http reads it).
var errBareLF = errors.New("sidecar: request head with a bare LF")

// bareLF reports an LF not preceded by CR in b.
func bareLF(b []byte) bool {
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			return true
		}
	}
	return false
}

// readHead returns the next request's head, up to and including its blank
// line, without consuming it. With an error, head is what was read so far
// (empty: nothing came before the connection closed or timed out). A head
// that does not come whole in one read is given readHeaderTimeout from
// then (lc.headBegun), unless timed (it has its deadline already).
func readHead(br *bufio.Reader, lc *leanConn, timed bool) ([]byte, error) {
	for n := 1; ; {
		if n > br.Size() {
			b, _ := br.Peek(br.Buffered())
			return b, errHeadTooLong
		}
		if _, err := br.Peek(n); err != nil { // waits for n bytes
			b, _ := br.Peek(br.Buffered())
			return b, err
		}
		b, _ := br.Peek(br.Buffered()) // all that came
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i >= 0 {
			b = b[:i+4]
		}
		if bareLF(b) { // lines ended by LF alone: net/http's to read
			return b, errBareLF
		}
		if i >= 0 {
			return b, nil
		}
		if !timed && lc != nil {
			lc.headBegun()
			timed = true
		}
		n = len(b) + 1 // wait for more
	}
}

// leanRequest is a request head the lean path serves.
type leanRequest struct {
	method, target, host string
	url                  *url.URL
	header               http.Header
	length               int64
	close                bool
	acquire              bool // POST /v1/locks/{object}/acquire
}

// parseLean parses head; nil when the lean path does not serve it
// (net/http then does, and answers a malformed one as it always did).
func parseLean(head []byte) *leanRequest {
	line, rest, ok := bytes.Cut(head, []byte("\r\n"))
	if !ok {
		return nil
	}
	method, line, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(line, []byte(" "))
	if !ok1 || !ok2 || string(proto) != "HTTP/1.1" {
		return nil
	}
	req := &leanRequest{method: string(method), target: string(target), header: make(http.Header, 4)}
	var ok3 bool
	if req.acquire, ok3 = leanRoute(req.method, req.target); !ok3 {
		return nil
	}
	if plainTarget(req.target) {
		req.url = &url.URL{Path: req.target} // what ParseRequestURI returns for it
	} else {
		u, err := url.ParseRequestURI(req.target)
		if err != nil {
			return nil
		}
		req.url = u
	}
	hosts, lengths := 0, 0
	for len(rest) > 2 {
		var hl []byte
		hl, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(hl, []byte(":"))
		if !ok {
			return nil // an obs-fold, a line without a name
		}
		// net/http's checks: a token for the name, no control
		// characters but HTAB in the value (canonicalizing keeps a
		// name's validity)
		key, v := headerKey(name), string(bytes.Trim(value, " \t"))
		if !httpguts.ValidHeaderFieldName(key) || !httpguts.ValidHeaderFieldValue(v) {
			return nil
		}
		switch key {
		case "Host": // in Request.Host, not the header, as net/http has it
			if !httpguts.ValidHostHeader(v) {
				return nil // net/http's 400
			}
			hosts++
			req.host = v
			continue
		case "Content-Length":
			lengths++
			// as net/http reads it: digits alone ("-0" and "+1" are
			// not lengths)
			n, err := strconv.ParseUint(v, 10, 63)
			if err != nil {
				return nil
			}
			req.length = int64(n)
		case "Connection":
			switch {
			case strings.EqualFold(v, "close"):
				req.close = true
			case strings.EqualFold(v, "keep-alive"):
			default:
				return nil // an upgrade, a list
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer":
			return nil
		}
		req.header[key] = append(req.header[key], v)
	}
	if hosts != 1 || lengths > 1 {
		return nil
	}
	return req
}

// commonKeys are the header names HTTP clients send on the lock's
// requests, as canonical strings: one of them, spelled canonically, costs
// no allocation (headerKey).
var commonKeys = []string{"Host", "User-Agent", "Content-Length", "Content-Type", "Accept", "Accept-Encoding", "Connection"}

// plainTarget reports whether t is a path of letters, digits, "-", ".",
// "_", "~" and "/" beginning with "/": nothing to decode or split off, so
// url.ParseRequestURI(t) is &url.URL{Path: t} (FuzzPlainTarget), found
// without its work (1 % of a W1 cycle's CPU).
func plainTarget(t string) bool {
	if t == "" || t[0] != '/' {
		return false
	}
	for i := 1; i < len(t); i++ {
		switch c := t[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_', c == '~', c == '/':
		default:
			return false
		}
	}
	return true
}

// headerKey is textproto.CanonicalMIMEHeaderKey(string(name)), without
// the string's allocation for a common name already canonical.
func headerKey(name []byte) string {
	for _, k := range commonKeys {
		if string(name) == k {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

// leanRoute reports whether method and target are one of the lean path's
// routes: POST /v1/locks/{object}/acquire, POST /v1/leases/{id}/renew and
// DELETE /v1/leases/{id} (a query allowed; the router checks the rest);
// acquire says it is the first.
func leanRoute(method, target string) (acquire, ok bool) {
	p, _, _ := strings.Cut(target, "?")
	// the path value between prefix and suffix: one non-empty segment
	segment := func(prefix, suffix string) bool {
		v, ok1 := strings.CutPrefix(p, prefix)
		v, ok2 := strings.CutSuffix(v, suffix)
		return ok1 && ok2 && v != "" && !strings.Contains(v, "/")
	}
	switch method {
	case http.MethodPost:
		if segment("/v1/locks/", "/acquire") {
			return true, true
		}
		return false, segment("/v1/leases/", "/renew")
	case http.MethodDelete:
		return false, segment("/v1/leases/", "")
	}
	return false, false
}

// handList is the listener net/http serves: it accepts the connections
// the lean path hands over.
type handList struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newHandList(addr net.Addr) *handList {
	return &handList{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// hand gives c to net/http; closed when net/http no longer accepts.
func (l *handList) hand(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *handList) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handList) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handList) Addr() net.Addr { return l.addr }
