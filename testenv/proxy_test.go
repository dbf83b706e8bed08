package testenv

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer is a raw TCP echo upstream that also reports every chunk it receives.
type echoServer struct {
	ln   net.Listener
	got  chan string
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, got: make(chan string, 100)}
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conn = append(e.conn, c)
			e.mu.Unlock()
			e.wg.Go(func() {
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.got <- string(buf[:n])
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conn {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

// received waits for the upstream to receive want.
func (e *echoServer) received(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-e.got:
		if got != want {
			t.Fatalf("upstream received %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("upstream did not receive %q", want)
	}
}

// nothingReceived checks that the upstream receives nothing for a while.
func (e *echoServer) nothingReceived(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-e.got:
		t.Fatalf("upstream received %q, want nothing", got)
	case <-time.After(d):
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

// expect reads exactly len(want) bytes within d.
func expect(t *testing.T, c net.Conn, want string, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

// expectSilence checks that nothing arrives on c for d.
func expectSilence(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v; want silence (deadline exceeded)", buf[:n], err)
	}
}

func TestProxyForwards(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := ProxyT(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	send(t, c, "hello")
	e.received(t, "hello")
	expect(t, c, "hello", 10*time.Second)
	if p.Conns() != 1 || p.Accepted() != 1 {
		t.Errorf("Conns(), Accepted() = %d, %d; want 1, 1", p.Conns(), p.Accepted())
	}
}

func TestProxyBlackHoleDownstream(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := ProxyT(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	send(t, c, "warm")
	expect(t, c, "warm", 10*time.Second)
	e.received(t, "warm")

	p.BlackHoleDownstream()
	send(t, c, "ping")
	e.received(t, "ping")                     // the request reaches the server...
	expectSilence(t, c, 300*time.Millisecond) // ...its reply is lost

	p.Heal()
	send(t, c, "pong")
	e.received(t, "pong")
	expect(t, c, "pong", 10*time.Second) // not "ping": swallowed bytes are never delivered late
}

func TestProxyBlackHole(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := ProxyT(t, e.ln.Addr().String())
	old := dial(t, p.Addr())
	send(t, old, "warm")
	expect(t, old, "warm", 10*time.Second)
	e.received(t, "warm")

	p.BlackHole()
	send(t, old, "lost1")
	fresh := dial(t, p.Addr()) // new connections are accepted, and stalled too
	send(t, fresh, "lost2")
	e.nothingReceived(t, 300*time.Millisecond)
	expectSilence(t, old, 100*time.Millisecond)
	expectSilence(t, fresh, 100*time.Millisecond)

	p.Heal()
	for _, c := range []net.Conn{old, fresh} {
		send(t, c, "again")
		e.received(t, "again")
		expect(t, c, "again", 10*time.Second)
	}
}

// TestProxyHoldUpstream: held client->server bytes reach the server only on
// Heal, in order and whole (not dropped, unlike a black hole); replies still
// pass meanwhile.
func TestProxyHoldUpstream(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := ProxyT(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	send(t, c, "warm")
	expect(t, c, "warm", 10*time.Second)
	e.received(t, "warm")

	p.HoldUpstream()
	send(t, c, "one")
	e.nothingReceived(t, 300*time.Millisecond)
	expectSilence(t, c, 100*time.Millisecond)
	p.Heal()
	e.received(t, "one")
	expect(t, c, "one", 10*time.Second)
	send(t, c, "two")
	e.received(t, "two")
	expect(t, c, "two", 10*time.Second)
}

func TestProxyLatency(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := ProxyT(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	const d = 150 * time.Millisecond
	p.SetLatency(d)
	t0 := time.Now()
	send(t, c, "slow")
	expect(t, c, "slow", 10*time.Second)
	if rtt := time.Since(t0); rtt < 2*d {
		t.Errorf("round trip with latency %v took %v, want >= %v", d, rtt, 2*d)
	}
	p.Heal()
	t0 = time.Now()
	send(t, c, "fast")
	expect(t, c, "fast", 10*time.Second)
	if rtt := time.Since(t0); rtt >= 5*time.Second {
		t.Errorf("round trip after Heal took %v", rtt)
	}
}

func TestProxyResetConnections(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := ProxyT(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	send(t, c, "one")
	expect(t, c, "one", 10*time.Second)

	p.ResetConnections()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 8)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after ResetConnections = %d, %v; want EOF or reset", n, err)
	}
	c2 := dial(t, p.Addr())
	send(t, c2, "two")
	expect(t, c2, "two", 10*time.Second)
}

func TestProxyUpstreamDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := ProxyT(t, addr)
	c := dial(t, p.Addr())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 8)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read via proxy to a dead upstream = %d, %v; want EOF", n, err)
	}
}

func TestProxyClose(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p, err := StartProxy(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	send(t, c, "x")
	expect(t, c, "x", 10*time.Second)
	p.BlackHole() // a stalled connection must not keep Close waiting
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 8)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read after Close = %v, want EOF or reset", err)
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c2.Close()
		t.Errorf("dial after Close succeeded")
	}
}

// An upstream close during a black hole stays hidden until Heal, as a
// partition hides a FIN; then the client sees the close.
func TestProxyHidesCloseDuringBlackHole(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	p := ProxyT(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	send(t, c, "hi")
	expect(t, c, "hi", 10*time.Second)
	e.received(t, "hi")

	p.BlackHoleDownstream()
	e.mu.Lock()
	for _, sc := range e.conn {
		sc.Close()
	}
	e.mu.Unlock()
	send(t, c, "anyone?") // reaches a closed socket: the RST is news for the client, held too
	expectSilence(t, c, 300*time.Millisecond)

	p.Heal()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 8)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Heal = %d, %v; want EOF or reset", n, err)
	}
}
