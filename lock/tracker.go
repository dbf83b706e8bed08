package lock

import (
	"bufio"
	"encoding/binary"
	"net"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/rawio"
)

// frameParser follows ZooKeeper's length-prefixed frames in one direction of
// a TCP stream and hands the first bytes of each frame's body to a callback.
type frameParser struct {
	lenBuf  [4]byte
	lenN    int
	remain  int // body bytes left in the current frame
	hdr     [16]byte
	hdrN    int
	hdrWant int
	frame   int // index of the current frame on this connection
	start   time.Time
}

// feed consumes p. want(i) says how many body bytes of frame i to capture;
// cb(i, hdr, start) runs once they are there (or the frame ended earlier),
// with the time the frame's first byte was fed.
func (f *frameParser) feed(p []byte, now time.Time, want func(int) int, cb func(int, []byte, time.Time)) {
	for len(p) > 0 {
		if f.remain == 0 && f.lenN < 4 {
			if f.lenN == 0 {
				f.start = now
			}
			n := copy(f.lenBuf[f.lenN:], p)
			f.lenN += n
			p = p[n:]
			if f.lenN < 4 {
				return
			}
			f.remain = int(binary.BigEndian.Uint32(f.lenBuf[:]))
			f.hdrN = 0
			f.hdrWant = min(want(f.frame), f.remain, len(f.hdr))
			if f.remain == 0 {
				cb(f.frame, nil, f.start)
				f.frame++
				f.lenN = 0
			}
			continue
		}
		if f.hdrN < f.hdrWant {
			n := copy(f.hdr[f.hdrN:f.hdrWant], p)
			f.hdrN += n
			f.remain -= n
			p = p[n:]
			if f.hdrN == f.hdrWant {
				cb(f.frame, f.hdr[:f.hdrN], f.start)
			}
		} else {
			n := min(len(p), f.remain)
			f.remain -= n
			p = p[n:]
		}
		if f.remain == 0 {
			f.frame++
			f.lenN = 0
		}
	}
}

// ackSink receives what a tracked connection learns.
type ackSink interface {
	// handshake: the server answered the connect request sent at sent.
	handshake(sessionID int64, timeout time.Duration, sent time.Time)
	// setWatchesSent: go-zookeeper wrote a setWatches request, so it has
	// finished building them (see session.settle).
	setWatchesSent()
	// acked: the server answered, at at, a request sent at sent. leader
	// says the answer went through the leader (a write or a sync that
	// succeeded), not one a follower gives by itself (reads, pings).
	acked(sent, at time.Time, leader bool)
}

type pending struct {
	xid  int32
	op   int32
	sent time.Time
}

// pendingRing is the requests in flight on a connection, oldest first: a
// ring that grows when full and never shrinks, so that steady traffic (a
// request or a few in flight) allocates nothing per request.
type pendingRing struct {
	buf     []pending
	head, n int
}

func (r *pendingRing) push(p pending) {
	if r.n == len(r.buf) {
		buf := make([]pending, max(8, 2*len(r.buf)))
		for i := range r.n {
			buf[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = p
	r.n++
}

// popThrough removes the oldest request with xid and every older one (a
// server answers a session's requests in order: those were answered or
// will never be), and returns it; ok false when none has xid.
func (r *pendingRing) popThrough(xid int32) (p pending, ok bool) {
	for i := range r.n {
		if q := r.buf[(r.head+i)%len(r.buf)]; q.xid == xid {
			r.head = (r.head + i + 1) % len(r.buf)
			r.n -= i + 1
			return q, true
		}
	}
	return pending{}, false
}

const (
	opSetWatches  = 101
	opSetWatches2 = 105
)

// leaderOps are the request types a follower forwards to the leader and
// answers only after the leader's reply (ZooKeeper's FollowerRequestProcessor:
// writes and sync). Reads, pings and setWatches are answered by whichever
// server the session is connected to, even one cut off from its leader.
var leaderOps = map[int32]bool{
	1:  true, // create
	2:  true, // delete
	5:  true, // setData
	7:  true, // setACL
	9:  true, // sync
	13: true, // check
	14: true, // multi
	15: true, // create2
	19: true, // createContainer
	20: true, // deleteContainer
	21: true, // createTTL
}

// trackedConn wraps one TCP connection to a ZooKeeper server and reports, for
// every response, the send time of the request it answers. ZooKeeper answers
// a session's requests in order, so a FIFO matched by xid is enough.
type trackedConn struct {
	net.Conn
	io   rawio.IO      // Conn's Read and Write without waking the runtime's sysmon (internal/rawio)
	br   *bufio.Reader // over fill: go-zookeeper reads a response's length, then its body; one system call takes both
	sink ackSink

	wmu         sync.Mutex
	w           frameParser
	mu          sync.Mutex
	connectSent time.Time
	inflight    pendingRing
	rmu         sync.Mutex
	r           frameParser
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.w.feed(p, time.Now(), func(i int) int {
		if i == 0 {
			return 4 // connect request: no xid; its first field marks the send
		}
		return 8 // xid, type
	}, func(i int, hdr []byte, start time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if i == 0 {
			c.connectSent = start
			return
		}
		if len(hdr) == 8 {
			op := int32(binary.BigEndian.Uint32(hdr[4:]))
			c.inflight.push(pending{
				xid:  int32(binary.BigEndian.Uint32(hdr)),
				op:   op,
				sent: start,
			})
			if op == opSetWatches || op == opSetWatches2 {
				go c.sink.setWatchesSent() // not under c.mu
			}
		}
	})
	c.wmu.Unlock()
	return c.io.Write(p)
}

func newTrackedConn(c net.Conn, sink ackSink) *trackedConn {
	t := &trackedConn{Conn: c, io: rawio.New(c), sink: sink}
	t.br = bufio.NewReaderSize(readerFunc(t.fill), 4096)
	return t
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// Read hands go-zookeeper what fill read, buffered: a response and its length
// prefix come in one read from the socket instead of two.
func (c *trackedConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// fill reads from the socket and notes the responses the bytes complete, at
// the moment they arrived.
func (c *trackedConn) fill(p []byte) (int, error) {
	n, err := c.io.Read(p)
	if n > 0 {
		c.rmu.Lock()
		c.r.feed(p[:n], time.Now(), func(i int) int {
			if i == 0 {
				return 16 // protocolVersion, timeOut, sessionId
			}
			return 16 // xid, zxid, err
		}, c.onResponse)
		c.rmu.Unlock()
	}
	return n, err
}

func (c *trackedConn) onResponse(i int, hdr []byte, at time.Time) {
	if i == 0 {
		if len(hdr) < 16 {
			return
		}
		timeout := time.Duration(int32(binary.BigEndian.Uint32(hdr[4:8]))) * time.Millisecond
		sid := int64(binary.BigEndian.Uint64(hdr[8:16]))
		c.mu.Lock()
		sent := c.connectSent
		c.mu.Unlock()
		c.sink.handshake(sid, timeout, sent)
		return
	}
	if len(hdr) < 4 {
		return
	}
	xid := int32(binary.BigEndian.Uint32(hdr))
	if xid == -1 { // watch event, not a response
		return
	}
	ok := len(hdr) >= 16 && binary.BigEndian.Uint32(hdr[12:16]) == 0
	c.mu.Lock()
	p, _ := c.inflight.popThrough(xid)
	c.mu.Unlock()
	if !p.sent.IsZero() {
		c.sink.acked(p.sent, at, ok && leaderOps[p.op])
	}
}
