// Package rawio reads and writes a connected socket with raw system calls,
// for the two connections on Baton's request path: the app's unix socket
// connection and the ZooKeeper session's TCP connection.
//
// Why: an ordinary net.Conn Read or Write enters the runtime's syscall
// bookkeeping (entersyscall), and when the process was idle a moment before
// — a sidecar waiting for ZooKeeper's answer or the app's next request
// always is — that wakes the runtime's sysmon thread from its deep sleep.
// sysmon then polls every 20 µs until it finds every P idle again. With
// GOMAXPROCS=1 on a small node that is two or more thread switches per idle
// gap, a quarter of the sidecar's CPU per lock cycle on a paravirtualised
// VM (`perf record` of `baton serve` under W1: runtime.sysmon 27 %).
//
// The sockets are non-blocking (the runtime's netpoller owns them), so a
// read or write never blocks: it copies what is there or answers EAGAIN, and
// the raw call is as short as the bookkeeping it skips. Waiting for
// readiness, deadlines and close are the runtime's own (syscall.RawConn), so
// SetDeadline, Close and net/http's background read behave as with net.Conn.
// Under the race detector the system calls are syscall's, which tell it of
// the happens-before a socket carries; the rest is the same.
//
// What sysmon is for still happens: it wakes at the process's next timer
// (the sidecar always has some: session keepers, lease expiry) or its next
// ordinary system call, and then preempts a goroutine that has run for
// 10 ms and polls the network if every P is busy. So a goroutine that runs
// long is preempted at the next timer instead of within 10 ms; a request on
// Baton's path runs for microseconds, and no validity depends on scheduling
// (it is counted from send times, on the monotonic clock).
package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// IO reads and writes one connection. The zero value or one made for a
// connection without a file descriptor uses the connection's own methods.
type IO struct {
	c  net.Conn
	rc syscall.RawConn
}

// New returns an IO for c, raw when c is a socket (syscall.Conn).
func New(c net.Conn) IO {
	x := IO{c: c}
	if !enabled {
		return x
	}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			x.rc = rc
		}
	}
	return x
}

// Raw reports whether reads and writes bypass the connection's methods.
func (x IO) Raw() bool { return x.rc != nil }

// Read is net.Conn's Read: at most len(p) bytes, io.EOF at the end of the
// stream, the connection's deadline and close errors as *net.OpError.
func (x IO) Read(p []byte) (int, error) {
	if x.rc == nil {
		return x.c.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	o := ops.Get().(*op)
	o.p, o.n, o.errno = p, 0, 0
	err := x.rc.Read(o.readFn)
	n, errno := o.n, o.errno
	o.p = nil
	ops.Put(o)
	if err != nil {
		return 0, x.opError("read", err)
	}
	if errno != 0 {
		return 0, x.opError("read", os.NewSyscallError("read", errno))
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Write is net.Conn's Write: all of p or an error.
func (x IO) Write(p []byte) (int, error) {
	if x.rc == nil {
		return x.c.Write(p)
	}
	o := ops.Get().(*op)
	o.p, o.n, o.errno = p, 0, 0
	err := x.rc.Write(o.writeFn)
	n, errno := o.n, o.errno
	o.p = nil
	ops.Put(o)
	if err != nil {
		return n, x.opError("write", err)
	}
	if errno != 0 {
		return n, x.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// op is one Read's or Write's state for the raw call: the buffer, and
// what the call did. Its methods are bound once and ops are pooled, so a
// Read or Write allocates nothing (a closure over p, n and errno cost two
// or three allocations per call, a dozen per W1 cycle).
type op struct {
	p               []byte
	n               int
	errno           syscall.Errno
	readFn, writeFn func(fd uintptr) bool // o.read, o.write
}

var ops = sync.Pool{New: func() any {
	o := new(op)
	o.readFn, o.writeFn = o.read, o.write
	return o
}}

// read is RawConn.Read's function: false (wait) while nothing is there.
func (o *op) read(fd uintptr) bool {
	for {
		m, e := read(fd, o.p)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		o.n, o.errno = m, e
		return true
	}
}

// write is RawConn.Write's function: false (wait) until all of o.p is
// written or an error ends it.
func (o *op) write(fd uintptr) bool {
	for o.n < len(o.p) {
		m, e := write(fd, o.p[o.n:])
		switch e {
		case 0:
			o.n += m
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}

// opError reports err as net.Conn's methods do: an *net.OpError with the
// operation, the addresses, and the cause (net.ErrClosed,
// os.ErrDeadlineExceeded or the system call's error).
func (x IO) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) { // RawConn's "raw-read"/"raw-write"
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: x.c.LocalAddr().Network(), Source: x.c.LocalAddr(), Addr: x.c.RemoteAddr(), Err: err}
}
