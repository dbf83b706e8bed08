package lock

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
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
	// acked: the server answered a request sent at sent.
	acked(sent time.Time)
}

type pending struct {
	xid  int32
	sent time.Time
}

// trackedConn wraps one TCP connection to a ZooKeeper server and reports, for
// every response, the send time of the request it answers. ZooKeeper answers
// a session's requests in order, so a FIFO matched by xid is enough.
type trackedConn struct {
	net.Conn
	sink ackSink

	wmu         sync.Mutex
	w           frameParser
	mu          sync.Mutex
	connectSent time.Time
	inflight    []pending
	rmu         sync.Mutex
	r           frameParser
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.w.feed(p, time.Now(), func(i int) int {
		if i == 0 {
			return 0 // connect request: no xid
		}
		return 4
	}, func(i int, hdr []byte, start time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if i == 0 {
			c.connectSent = start
			return
		}
		if len(hdr) == 4 {
			c.inflight = append(c.inflight, pending{int32(binary.BigEndian.Uint32(hdr)), start})
		}
	})
	c.wmu.Unlock()
	return c.Conn.Write(p)
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.rmu.Lock()
		c.r.feed(p[:n], time.Now(), func(i int) int {
			if i == 0 {
				return 16 // protocolVersion, timeOut, sessionId
			}
			return 4 // xid
		}, c.onResponse)
		c.rmu.Unlock()
	}
	return n, err
}

func (c *trackedConn) onResponse(i int, hdr []byte, _ time.Time) {
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
	c.mu.Lock()
	var sent time.Time
	for k, p := range c.inflight {
		if p.xid == xid {
			sent = p.sent
			c.inflight = c.inflight[k+1:]
			break
		}
	}
	c.mu.Unlock()
	if !sent.IsZero() {
		c.sink.acked(sent)
	}
}
