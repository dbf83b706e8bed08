package main

// zk-cycles --raw: the floors of a W1 cycle's sidecar CPU. The same
// ZooKeeper work as zk-cycles (Baton's two native multis), and with
// --socket the same HTTP/1.1 answers as the lean sidecar, with no
// ZooKeeper client library in the way: one request in flight, encoded by
// hand into one buffer, the reply read into another, the answers canned,
// no allocation per cycle. Per HTTP request a sidecar of this shape must
// read the request, write the multi, read its reply and write the answer;
// the two modes differ only in how they wait:
//
//   - --raw blocking: one OS thread, blocking sockets made with raw system
//     calls, none of Go's runtime (no netpoller, no goroutine hand-off, no
//     syscall bookkeeping). It costs the kernel's work on those calls (the
//     TCP loopback to ZooKeeper, the unix socket to the client, the sleeps
//     and wake-ups between them) and almost nothing else: the physical
//     floor, below which no sidecar process on this machine can go.
//   - --raw netpoll: one goroutine on Go's netpoller, through Baton's
//     internal/rawio (the raw non-blocking calls `baton serve` makes on both
//     connections): the floor of a Go sidecar, what Go's way of waiting
//     (a read that finds nothing, the poller, parking and waking) adds.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/batonhq/baton/internal/rawio"
)

// rawSock is a connected socket: blockingFD or rawio.IO.
type rawSock interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
}

// blockingFD is a blocking socket read and written with raw system calls
// that do not tell the scheduler (they block the one thread the process
// serves on; nothing else needs it).
type blockingFD int

func (fd blockingFD) Read(p []byte) (int, error) {
	n, err := rawCall(syscall.SYS_READ, uintptr(fd), p)
	if err == nil && n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}

func (fd blockingFD) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := rawCall(syscall.SYS_WRITE, uintptr(fd), p[done:])
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// rawZKConn is one ZooKeeper session, one request in flight at a time.
type rawZKConn struct {
	s      rawSock
	closer func()
	wmu    *sync.Mutex // writes, when a ticker pings beside the requests (netpoll)
	xid    int32
	out    []byte // the request being encoded
	in     []byte // replies read (grown to fit), unread ones in in[lo:hi]
	lo, hi int
}

// rawCall runs a read or write system call without telling the scheduler.
func rawCall(trap, fd uintptr, p []byte) (int, error) {
	for {
		var ptr uintptr
		if len(p) > 0 {
			ptr = uintptr(unsafe.Pointer(&p[0]))
		}
		n, _, errno := syscall.RawSyscall(trap, fd, ptr, uintptr(len(p)))
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// dialRawZK opens a session on addr (ip:port): blocking, a blocking
// socket; otherwise one on the netpoller, read and written through rawio.
func dialRawZK(addr string, timeout time.Duration, blocking bool) (*rawZKConn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--zk %q: want ip:port: %w", addr, err)
	}
	c := &rawZKConn{out: make([]byte, 0, 512), in: make([]byte, 4096), wmu: new(sync.Mutex)}
	if blocking {
		if !ap.Addr().Is4() {
			return nil, fmt.Errorf("--zk %q: want an IPv4 address", addr)
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
			syscall.Close(fd)
			return nil, err
		}
		// as every ZooKeeper client (go-zookeeper through net.Dial) sets it
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); err != nil {
			syscall.Close(fd)
			return nil, err
		}
		c.s, c.closer = blockingFD(fd), func() { syscall.Close(fd) }
	} else {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		c.s, c.closer = rawio.New(nc), func() { nc.Close() }
	}
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd
	c.out = c.out[:0]
	c.out = binary.BigEndian.AppendUint32(c.out, 0)
	c.out = binary.BigEndian.AppendUint32(c.out, 0)
	c.out = binary.BigEndian.AppendUint64(c.out, 0)
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(timeout/time.Millisecond))
	c.out = binary.BigEndian.AppendUint64(c.out, 0)
	c.out = appendBuf(c.out, make([]byte, 16))
	if err := c.send(); err != nil {
		c.close()
		return nil, err
	}
	body, err := c.frame()
	if err != nil {
		c.close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	if len(body) < 16 || binary.BigEndian.Uint64(body[8:]) == 0 {
		c.close()
		return nil, errors.New("connect: no session")
	}
	return c, nil
}

func (c *rawZKConn) close() { c.closer() }

// send writes c.out, whose first four bytes are room for its length.
func (c *rawZKConn) send() error {
	binary.BigEndian.PutUint32(c.out, uint32(len(c.out)-4))
	c.wmu.Lock()
	_, err := c.s.Write(c.out)
	c.wmu.Unlock()
	return err
}

// frame returns the body of the next length-prefixed frame, reading as
// much as it needs.
func (c *rawZKConn) frame() ([]byte, error) {
	for {
		if have := c.hi - c.lo; have >= 4 {
			need := 4 + int(binary.BigEndian.Uint32(c.in[c.lo:]))
			if have >= need {
				b := c.in[c.lo+4 : c.lo+need]
				c.lo += need
				return b, nil
			}
			if need > len(c.in)-c.lo { // make room: move the partial frame down, grow
				c.hi = copy(c.in, c.in[c.lo:c.hi])
				c.lo = 0
				if need > len(c.in) {
					c.in = append(c.in, make([]byte, need-len(c.in))...)
				}
			}
		} else if c.lo > 0 {
			c.hi = copy(c.in, c.in[c.lo:c.hi])
			c.lo = 0
		}
		n, err := c.s.Read(c.in[c.hi:])
		if err != nil {
			return nil, err
		}
		c.hi += n
	}
}

// call sends c.out (a request whose header starts at byte 4) and returns
// the reply's body after its header, skipping ping replies.
func (c *rawZKConn) call() ([]byte, error) {
	if err := c.send(); err != nil {
		return nil, err
	}
	for {
		b, err := c.frame()
		if err != nil {
			return nil, err
		}
		if len(b) < 16 {
			return nil, errors.New("short reply")
		}
		xid := int32(binary.BigEndian.Uint32(b))
		if xid == -2 { // a ping's reply
			continue
		}
		if code := int32(binary.BigEndian.Uint32(b[12:])); code != 0 {
			return nil, fmt.Errorf("ZooKeeper error %d", code)
		}
		return b[16:], nil
	}
}

// begin starts a request of opcode op in c.out.
func (c *rawZKConn) begin(op int32) {
	c.xid++
	c.out = c.out[:4]
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(c.xid))
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(op))
}

// ping sends a ping (xid -2, op 11); its reply is skipped by the next call.
func (c *rawZKConn) ping() error {
	p := binary.BigEndian.AppendUint32(make([]byte, 0, 12), 8)
	p = binary.BigEndian.AppendUint32(p, uint32(0xfffffffe))
	p = binary.BigEndian.AppendUint32(p, 11)
	c.wmu.Lock()
	_, err := c.s.Write(p)
	c.wmu.Unlock()
	return err
}

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBuf(b, p []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// the world ACL (perms all, scheme world, id anyone)
func appendWorldACL(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, 31)
	b = appendStr(b, "world")
	return appendStr(b, "anyone")
}

// multi op header: type, done, err
func appendMultiHeader(b []byte, op int32, done bool) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(op))
	if done {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return binary.BigEndian.AppendUint32(b, 0xffffffff)
}

const (
	zkOpCreate  = 1
	zkOpDelete  = 2
	zkOpSetData = 5
	zkOpMulti   = 14
)

// rawObject is zkObject's two multis, hand-encoded.
type rawObject struct {
	c       *rawZKConn
	root    string
	version int32
	child   []byte // the child's path, from the acquire's reply
	dataAcq []byte
	dataRel []byte
}

func newRawObject(addr, root string, blocking bool) (*rawObject, error) {
	c, err := dialRawZK(addr, sessionTimeout, blocking)
	if err != nil {
		return nil, err
	}
	c.begin(zkOpCreate)
	c.out = appendStr(c.out, root)
	c.out = appendBuf(c.out, nil)
	c.out = appendWorldACL(c.out)
	c.out = binary.BigEndian.AppendUint32(c.out, 0)
	if _, err := c.call(); err != nil {
		c.close()
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	return &rawObject{c: c, root: root, child: make([]byte, 0, 128),
		dataAcq: []byte(`{"native":1,"h":[{"r":"r","t":0}]}`), dataRel: []byte(`{"native":1}`)}, nil
}

// acquire: create root/A_x_r_<seq> (ephemeral, sequential) and set the
// root's data guarded by its version, in one multi.
func (o *rawObject) acquire() error {
	c := o.c
	c.begin(zkOpMulti)
	c.out = appendMultiHeader(c.out, zkOpCreate, false)
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(len(o.root)+len("/A_x_r_")))
	c.out = append(c.out, o.root...)
	c.out = append(c.out, "/A_x_r_"...)
	c.out = appendBuf(c.out, []byte(`{"r":"r"}`))
	c.out = appendWorldACL(c.out)
	c.out = binary.BigEndian.AppendUint32(c.out, 3) // ephemeral | sequential
	c.out = appendMultiHeader(c.out, zkOpSetData, false)
	c.out = appendStr(c.out, o.root)
	c.out = appendBuf(c.out, o.dataAcq)
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(o.version))
	c.out = appendMultiHeader(c.out, -1, true)
	b, err := c.call()
	if err != nil {
		return err
	}
	// the first op's result: header (type 1, done, err), then its path
	if len(b) < 13 || int32(binary.BigEndian.Uint32(b)) != zkOpCreate {
		return errors.New("acquire multi failed")
	}
	n := int(binary.BigEndian.Uint32(b[9:]))
	if len(b) < 13+n {
		return errors.New("short create result")
	}
	o.child = append(o.child[:0], b[13:13+n]...)
	o.version++
	return nil
}

// release: delete the child and set the root's data, in one multi.
func (o *rawObject) release() error {
	c := o.c
	c.begin(zkOpMulti)
	c.out = appendMultiHeader(c.out, zkOpDelete, false)
	c.out = appendBuf(c.out, o.child)
	c.out = binary.BigEndian.AppendUint32(c.out, 0xffffffff)
	c.out = appendMultiHeader(c.out, zkOpSetData, false)
	c.out = appendStr(c.out, o.root)
	c.out = appendBuf(c.out, o.dataRel)
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(o.version))
	c.out = appendMultiHeader(c.out, -1, true)
	b, err := c.call()
	if err != nil {
		return err
	}
	if len(b) < 9 || int32(binary.BigEndian.Uint32(b)) != zkOpDelete {
		return errors.New("release multi failed")
	}
	o.version++
	return nil
}

// pinThread keeps the blocking floor on one OS thread. The netpoll floor
// is not pinned: a goroutine locked to its thread that parks hands its P
// to another thread and must be handed it back when it is woken (two
// thread switches per wait), which no sidecar pays.
func pinThread(blocking bool) {
	if blocking {
		runtime.LockOSThread()
	}
}

// rawCycles is zkCycles on the raw client.
func rawCycles(addr, root string, blocking bool, cycles, warmup int) error {
	pinThread(blocking)
	o, err := newRawObject(addr, root, blocking)
	if err != nil {
		return err
	}
	defer o.c.close()
	return runCycles(o.acquire, o.release, cycles, warmup)
}

// rawServe is leanServe (shape multi) on the raw client: one connection
// at a time, each request read whole (headers and a Content-Length body),
// answered after its multi. blocking: raw blocking sockets, and a read
// that waited 2 s pings ZooKeeper so the session outlives a quiet client;
// otherwise the netpoller through rawio, and a ticker pings.
func rawServe(addr, root, sock string, blocking bool) error {
	pinThread(blocking)
	o, err := newRawObject(addr, root, blocking)
	if err != nil {
		return err
	}
	defer o.c.close()
	var accept func() (rawSock, func(), error)
	if blocking {
		ln, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := syscall.Bind(ln, &syscall.SockaddrUnix{Name: sock}); err != nil {
			return err
		}
		if err := syscall.Listen(ln, 16); err != nil {
			return err
		}
		accept = func() (rawSock, func(), error) {
			fd, _, err := syscall.Accept4(ln, syscall.SOCK_CLOEXEC)
			if err != nil {
				return nil, nil, err
			}
			tv := syscall.Timeval{Sec: 2}
			if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
				return nil, nil, err
			}
			return blockingFD(fd), func() { syscall.Close(fd) }, nil
		}
	} else {
		ln, err := net.Listen("unix", sock)
		if err != nil {
			return err
		}
		go func() {
			for range time.Tick(2 * time.Second) {
				_ = o.c.ping()
			}
		}()
		accept = func() (rawSock, func(), error) {
			c, err := ln.Accept()
			if err != nil {
				return nil, nil, err
			}
			return rawio.New(c), func() { c.Close() }, nil
		}
	}
	buf := make([]byte, 8192)
	for {
		conn, closeConn, err := accept()
		if err != nil {
			return err
		}
		if err := rawAnswer(o, conn, buf); err != nil {
			return err
		}
		closeConn()
	}
}

// rawAnswer answers the requests on conn until it ends; the error is
// ZooKeeper's connection's.
func rawAnswer(o *rawObject, conn rawSock, buf []byte) error {
	have := 0
	for {
		method, used, err := parseRawRequest(buf[:have])
		if err != nil {
			return nil
		}
		if used == 0 { // incomplete: read more
			if have == len(buf) {
				return nil
			}
			n, err := conn.Read(buf[have:])
			if err == syscall.EAGAIN { // blocking: 2 s without a request
				if err := o.c.ping(); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return nil
			}
			have += n
			continue
		}
		answer := w1Answer(o, method == 'P', method == 'D')
		if _, err := conn.Write(answer); err != nil {
			return nil
		}
		have = copy(buf, buf[used:have])
	}
}

// parseRawRequest finds one whole HTTP/1.1 request at the start of b: its
// method's first byte and its length (0 if b holds less than one).
func parseRawRequest(b []byte) (method byte, used int, err error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return 0, 0, nil
	}
	end += 4
	clen := 0
	for h := b[:end]; len(h) > 0; {
		line := h
		if i := bytes.IndexByte(h, '\n'); i >= 0 {
			line, h = h[:i], h[i+1:]
		} else {
			h = nil
		}
		if len(line) > 15 && bytes.EqualFold(line[:15], []byte("content-length:")) {
			v := bytes.TrimSpace(line[15:])
			if len(v) == 0 || len(v) > 9 {
				return 0, 0, fmt.Errorf("content-length %q", v)
			}
			for _, d := range v { // no allocation per request
				if d < '0' || d > '9' {
					return 0, 0, fmt.Errorf("content-length %q", v)
				}
				clen = clen*10 + int(d-'0')
			}
		}
	}
	if len(b) < end+clen {
		return 0, 0, nil
	}
	return b[0], end + clen, nil
}
