package rawio

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/testenv"
)

// Review tests (independent review of the raw-syscall connection): rawio
// must be indistinguishable from net.Conn's own methods for the callers
// Baton has (net/http, go-zookeeper, lock.isConnErr, the detach code).

// sameErr fails unless raw's error is net.Conn's, as callers see it: the
// same text (operation, network, both addresses, cause), the same types
// down the chain, the same answers to Timeout, errors.Is(net.ErrClosed),
// errors.Is(os.ErrDeadlineExceeded).
func sameErr(t *testing.T, what string, raw, std error) {
	t.Helper()
	if raw == nil || std == nil {
		if raw != std {
			t.Errorf("%s: raw error %v, net.Conn's %v", what, raw, std)
		}
		return
	}
	if raw.Error() != std.Error() {
		t.Errorf("%s: raw error %q, net.Conn's %q", what, raw, std)
	}
	for r, s := raw, std; r != nil || s != nil; r, s = errors.Unwrap(r), errors.Unwrap(s) {
		if reflect.TypeOf(r) != reflect.TypeOf(s) {
			t.Errorf("%s: raw error chain has %T where net.Conn's has %T", what, r, s)
			break
		}
	}
	var rn, sn net.Error
	if errors.As(raw, &rn) != errors.As(std, &sn) || (rn != nil && rn.Timeout() != sn.Timeout()) {
		t.Errorf("%s: Timeout differs: raw %v, net.Conn's %v", what, raw, std)
	}
	for _, target := range []error{net.ErrClosed, os.ErrDeadlineExceeded, io.EOF, syscall.EPIPE, syscall.ECONNRESET} {
		if errors.Is(raw, target) != errors.Is(std, target) {
			t.Errorf("%s: errors.Is(%v) differs: raw %v, net.Conn's %v", what, target, raw, std)
		}
	}
}

// TestReviewRawioErrorsAreNetConns: on one connection, the raw read or
// write and net.Conn's give the same result and the same error, in the
// states a caller meets: a deadline in the past with bytes waiting (both
// refuse: the deadline is checked first), a deadline in the past on write,
// an empty read and write, the end of the stream, a closed connection.
func TestReviewRawioErrorsAreNetConns(t *testing.T) {
	for nw, p := range pairs(t) {
		c, s := p[0], p[1]
		x := New(s)
		if !x.Raw() {
			t.Fatalf("%s: not raw", nw)
		}
		if _, err := c.Write([]byte("abcd")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // the bytes are there
		s.SetReadDeadline(time.Unix(1, 0))
		b := make([]byte, 8)
		rn, rerr := x.Read(b)
		sn, serr := s.Read(b)
		if rn != sn {
			t.Errorf("%s: read past deadline with bytes waiting: raw %d, net.Conn %d", nw, rn, sn)
		}
		sameErr(t, nw+" read past deadline", rerr, serr)
		s.SetReadDeadline(time.Time{})
		if n, err := x.Read(b[:0]); n != 0 || err != nil {
			t.Errorf("%s: empty read = %d, %v", nw, n, err)
		}
		if n, err := x.Read(b[:2]); n != 2 || err != nil || string(b[:2]) != "ab" { // a short buffer: the rest stays
			t.Errorf("%s: read(2) = %d %q, %v", nw, n, b[:n], err)
		}
		if n, err := x.Read(b); n != 2 || err != nil || string(b[:2]) != "cd" {
			t.Errorf("%s: read = %d %q, %v", nw, n, b[:n], err)
		}

		s.SetWriteDeadline(time.Unix(1, 0))
		rn, rerr = x.Write([]byte("x"))
		sn, serr = s.Write([]byte("x"))
		if rn != sn {
			t.Errorf("%s: write past deadline: raw %d, net.Conn %d", nw, rn, sn)
		}
		sameErr(t, nw+" write past deadline", rerr, serr)
		s.SetWriteDeadline(time.Time{})
		if n, err := x.Write(nil); n != 0 || err != nil {
			t.Errorf("%s: empty write = %d, %v", nw, n, err)
		}

		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		rn, rerr = x.Read(b)
		sn, serr = s.Read(b)
		if rn != 0 || sn != 0 || rerr != io.EOF || serr != io.EOF { // io.EOF itself: io.ReadFull and bufio compare with ==
			t.Errorf("%s: at the end: raw %d, %#v; net.Conn %d, %#v", nw, rn, rerr, sn, serr)
		}

		s.Close()
		_, rerr = x.Read(b)
		_, serr = s.Read(b)
		sameErr(t, nw+" read after close", rerr, serr)
		rn, rerr = x.Write([]byte("x"))
		sn, serr = s.Write([]byte("x"))
		if rn != sn {
			t.Errorf("%s: write after close: raw %d, net.Conn %d", nw, rn, sn)
		}
		sameErr(t, nw+" write after close", rerr, serr)
	}
}

// TestReviewRawioResetIsNetConns: a TCP reset (the peer closes with
// SO_LINGER 0: what a ZooKeeper server that drops a session's connection, or
// testenv's proxy cut, does) reads as ECONNRESET inside a *net.OpError of the
// read system call, with the connection's addresses, as net.Conn's does.
func TestReviewRawioResetIsNetConns(t *testing.T) {
	var errs [2]error
	var conns [2]net.Conn
	for i := range 2 {
		p := pairs(t)["tcp"]
		c, s := p[0], p[1]
		if _, err := c.Write([]byte("unread")); err != nil { // unread at the closing end: a reset, not a FIN
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		s.(*net.TCPConn).SetLinger(0)
		s.Close()
		time.Sleep(10 * time.Millisecond)
		b := make([]byte, 8)
		if i == 0 {
			_, errs[i] = New(c).Read(b)
		} else {
			_, errs[i] = c.Read(b)
		}
		conns[i] = c
	}
	if !errors.Is(errs[0], syscall.ECONNRESET) {
		t.Fatalf("raw read after a reset = %v; want ECONNRESET", errs[0])
	}
	var ro, so *net.OpError
	var rs, ss *os.SyscallError
	if !errors.As(errs[0], &ro) || !errors.As(errs[1], &so) || !errors.As(errs[0], &rs) || !errors.As(errs[1], &ss) {
		t.Fatalf("raw %#v, net.Conn %#v; want both *net.OpError of an *os.SyscallError", errs[0], errs[1])
	}
	if ro.Op != so.Op || ro.Net != so.Net || rs.Syscall != ss.Syscall || rs.Err != ss.Err {
		t.Errorf("raw %q, net.Conn %q: op, net or system call differ", errs[0], errs[1])
	}
	if ro.Source.String() != conns[0].LocalAddr().String() || ro.Addr.String() != conns[0].RemoteAddr().String() {
		t.Errorf("raw error %q: addresses are not the connection's (%s -> %s)", errs[0], conns[0].LocalAddr(), conns[0].RemoteAddr())
	}
}

// TestReviewRawioDeadlineWhileReading: net/http's background read is ended
// by setting the read deadline in the past while the read waits (Hijack and
// the end of a request do this); the read must come back as a timeout, and
// the connection must read the next bytes once the deadline is cleared.
func TestReviewRawioDeadlineWhileReading(t *testing.T) {
	for nw, p := range pairs(t) {
		x := New(p[1])
		done := make(chan error, 1)
		go func() {
			_, err := x.Read(make([]byte, 1))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond) // waiting in the netpoller
		p[1].SetReadDeadline(time.Unix(1, 0))
		select {
		case err := <-done:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("%s: read ended by a deadline in the past = %v; want a timeout", nw, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: a deadline set in the past did not end the waiting read", nw)
		}
		p[1].SetReadDeadline(time.Time{})
		p[0].Write([]byte("n"))
		b := make([]byte, 1)
		if n, err := x.Read(b); n != 1 || err != nil || b[0] != 'n' {
			t.Errorf("%s: next read = %d %q, %v", nw, n, b[:n], err)
		}
	}
}

// TestReviewRawioConcurrentWritesWhole: net.Conn's Write is atomic with
// respect to other Writes (the fd's write lock is held until all of p is
// written); rawio's must be too, though each Write goes through EAGAIN and
// waits many times (the reader is slow). Eight writers of 1 MiB each of its
// own byte: the stream must be eight unbroken runs.
func TestReviewRawioConcurrentWritesWhole(t *testing.T) {
	for nw, p := range pairs(t) {
		x := New(p[0])
		const size = 1 << 20
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if n, err := x.Write(bytes.Repeat([]byte{byte('a' + i)}, size)); n != size || err != nil {
					t.Errorf("%s: writer %d: %d, %v", nw, i, n, err)
				}
			}()
		}
		go func() { wg.Wait(); p[0].Close() }()
		var got []byte
		b := make([]byte, 3000) // small reads: the writers wait for room many times
		for {
			n, err := p[1].Read(b)
			got = append(got, b[:n]...)
			if err != nil {
				break
			}
		}
		if len(got) != 8*size {
			t.Fatalf("%s: read %d bytes, want %d", nw, len(got), 8*size)
		}
		seen := map[byte]bool{}
		for off := 0; off < len(got); off += size {
			c := got[off]
			if seen[c] || !bytes.Equal(got[off:off+size], bytes.Repeat([]byte{c}, size)) {
				i := off + bytes.IndexFunc(got[off:off+size], func(r rune) bool { return byte(r) != c })
				t.Fatalf("%s: the writes are interleaved: byte %d is %q inside the run of %q from %d", nw, i, got[i], c, off)
			}
			seen[c] = true
		}
	}
}

// TestReviewRawioPartialWriteCounted: a write that its deadline ends half
// way reports how much it wrote, and that is exactly what the peer reads
// (go-zookeeper closes the connection after such a write, and the tracker
// has already noted the request: the count must not be invented). The same
// for a write ended by Close.
func TestReviewRawioPartialWriteCounted(t *testing.T) {
	for _, how := range []string{"deadline", "close"} {
		for nw, p := range pairs(t) {
			x := New(p[0])
			msg := make([]byte, 16<<20) // more than loopback's socket buffers (at most 4 MiB + 6 MiB)
			for i := range msg {
				msg[i] = byte(i % 251)
			}
			if how == "deadline" {
				p[0].SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			} else {
				time.AfterFunc(100*time.Millisecond, func() { p[0].Close() })
			}
			n, err := x.Write(msg)
			var ne net.Error
			if how == "deadline" && (!errors.As(err, &ne) || !ne.Timeout()) || how == "close" && !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s %s: write = %d, %v", nw, how, n, err)
			}
			if n <= 0 || n >= len(msg) {
				t.Fatalf("%s %s: wrote %d of %d; want a part", nw, how, n, len(msg))
			}
			p[0].Close()
			got, _ := io.ReadAll(p[1])
			if len(got) != n || !bytes.Equal(got, msg[:n]) {
				t.Errorf("%s %s: Write said %d bytes, the peer read %d (equal prefix: %v)", nw, how, n, len(got), bytes.Equal(got, msg[:min(n, len(got))]))
			}
		}
	}
}

// TestReviewRawioTLSFallsBack: over TLS (ZooKeeper's secure client port)
// New keeps tls.Conn's own methods — a raw read would hand go-zookeeper
// ciphertext — and the bytes round-trip.
func TestReviewRawioTLSFallsBack(t *testing.T) {
	ca := testenv.NewCA(t, "rawio")
	p := pairs(t)["tcp"]
	srv := tls.Server(p[1], &tls.Config{Certificates: []tls.Certificate{ca.Server}})
	cli := tls.Client(p[0], &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	x := New(cli)
	if x.Raw() {
		t.Fatal("rawio over tls.Conn is raw: it would read and write the ciphertext")
	}
	go func() {
		b := make([]byte, 5)
		if _, err := io.ReadFull(srv, b); err == nil {
			srv.Write(bytes.ToUpper(b))
		}
	}()
	if _, err := x.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(x, b); err != nil || string(b) != "HELLO" {
		t.Fatalf("read %q, %v", b, err)
	}
}
