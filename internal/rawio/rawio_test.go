package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pairs returns connected pairs over a unix socket and over TCP on the
// loopback: the two kinds of connection Baton wraps.
func pairs(t *testing.T) map[string][2]net.Conn {
	t.Helper()
	out := map[string][2]net.Conn{}
	for _, nw := range []string{"unix", "tcp"} {
		addr := "127.0.0.1:0"
		if nw == "unix" {
			addr = filepath.Join(t.TempDir(), "s")
		}
		l, err := net.Listen(nw, addr)
		if err != nil {
			t.Fatal(err)
		}
		acc := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				close(acc)
				return
			}
			acc <- c
		}()
		c, err := net.Dial(nw, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, ok := <-acc
		if !ok {
			t.Fatal("accept failed")
		}
		l.Close()
		t.Cleanup(func() { c.Close(); s.Close() })
		out[nw] = [2]net.Conn{c, s}
	}
	return out
}

func TestRawIOIsUsedForSockets(t *testing.T) {
	for nw, p := range pairs(t) {
		if !New(p[0]).Raw() || !New(p[1]).Raw() {
			t.Errorf("%s: not raw", nw)
		}
	}
	a, b := net.Pipe() // no file descriptor: the connection's own methods
	defer a.Close()
	defer b.Close()
	if New(a).Raw() {
		t.Error("net.Pipe: raw")
	}
}

// A large write is written whole although the socket takes it in parts
// (EAGAIN, wait, go on), and read back byte for byte in small reads.
func TestRawIOLargeWriteAndSmallReads(t *testing.T) {
	for nw, p := range pairs(t) {
		w, r := New(p[0]), New(p[1])
		msg := make([]byte, 8<<20)
		for i := range msg {
			msg[i] = byte(i * 7)
		}
		var wn int
		var werr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			wn, werr = w.Write(msg)
		}()
		got := make([]byte, 0, len(msg))
		buf := make([]byte, 1000)
		for len(got) < len(msg) {
			n, err := r.Read(buf)
			if err != nil {
				t.Fatalf("%s: read after %d bytes: %v", nw, len(got), err)
			}
			got = append(got, buf[:n]...)
		}
		wg.Wait()
		if werr != nil || wn != len(msg) {
			t.Fatalf("%s: write = %d, %v; want %d, nil", nw, wn, werr, len(msg))
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("%s: bytes differ", nw)
		}
		if n, err := r.Read(nil); n != 0 || err != nil {
			t.Errorf("%s: empty read = %d, %v", nw, n, err)
		}
	}
}

// The end of the stream is io.EOF, after the bytes sent before it.
func TestRawIOEOF(t *testing.T) {
	for nw, p := range pairs(t) {
		if _, err := p[0].Write([]byte("bye")); err != nil {
			t.Fatal(err)
		}
		p[0].Close()
		r := New(p[1])
		b, err := io.ReadAll(r)
		if err != nil || string(b) != "bye" {
			t.Errorf("%s: ReadAll = %q, %v; want \"bye\", nil", nw, b, err)
		}
		if n, err := r.Read(make([]byte, 4)); n != 0 || err != io.EOF {
			t.Errorf("%s: read after EOF = %d, %v; want 0, EOF", nw, n, err)
		}
	}
}

// A read deadline ends a waiting read with a timeout, as net.Conn's does
// (net/http and go-zookeeper depend on it), and the connection stays usable.
func TestRawIODeadline(t *testing.T) {
	for nw, p := range pairs(t) {
		r := New(p[1])
		p[1].SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := r.Read(make([]byte, 4))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: read past deadline = %v; want a timeout", nw, err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "read" || oe.Net != nw {
			t.Errorf("%s: error %#v; want *net.OpError read %s", nw, err, nw)
		}
		p[1].SetReadDeadline(time.Time{})
		if _, err := p[0].Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4)
		if n, err := r.Read(b); n != 1 || err != nil || b[0] != 'x' {
			t.Errorf("%s: read after the deadline was cleared = %d, %v", nw, n, err)
		}
	}
}

// Close during a waiting read ends it with net.ErrClosed.
func TestRawIOCloseWakesRead(t *testing.T) {
	for nw, p := range pairs(t) {
		r := New(p[1])
		done := make(chan error, 1)
		go func() {
			_, err := r.Read(make([]byte, 4))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		p[1].Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s: read on close = %v; want net.ErrClosed", nw, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: read not woken by Close", nw)
		}
		if _, err := r.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: write after close = %v; want net.ErrClosed", nw, err)
		}
	}
}

// Writing to a connection whose peer is gone fails with the system call's
// error inside a *net.OpError (what Baton's isConnErr looks for).
func TestRawIOWriteToClosedPeer(t *testing.T) {
	for nw, p := range pairs(t) {
		w := New(p[0])
		p[1].Close()
		var err error
		for i := 0; i < 100 && err == nil; i++ { // TCP: the first write may land before the reset
			_, err = w.Write(make([]byte, 64<<10))
			time.Sleep(time.Millisecond)
		}
		var oe *net.OpError
		var se *os.SyscallError
		if !errors.As(err, &oe) || oe.Op != "write" || !errors.As(err, &se) {
			t.Fatalf("%s: write to a closed peer = %v; want *net.OpError of a system call", nw, err)
		}
		if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: %v; want EPIPE or ECONNRESET", nw, err)
		}
	}
}

// A socket whose O_NONBLOCK was cleared (by a library taking its file, say)
// must not turn a raw read into a blocking call that holds its P: the next
// stop-the-world would then wait for it forever (the process hung, timers
// included, when read used plain read(2)). A hang fails this test by the
// test binary's timeout.
func TestRawIOBlockingSocketDoesNotHang(t *testing.T) {
	for nw, p := range pairs(t) {
		sc := p[1].(syscall.Conn)
		rc, err := sc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Control(func(fd uintptr) { err = syscall.SetNonblock(int(fd), false) }); err != nil {
			t.Fatal(err)
		}
		r := New(p[1])
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 8)
			n, err := r.Read(b)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(b[:n])
		}()
		time.Sleep(20 * time.Millisecond) // the read is waiting
		runtime.GC()                      // stops the world: every P must come to a safe point
		if _, err := p[0].Write([]byte("late")); err != nil {
			t.Fatal(err)
		}
		if s := <-got; s != "late" {
			t.Errorf("%s: read %q; want \"late\"", nw, s)
		}
	}
}
