package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/notify"
)

// Proxy is a TCP fault proxy between clients and one upstream address (a
// ZooKeeper node, the Kafka broker, anything TCP). Each accepted connection
// gets its own upstream connection; bytes are copied both ways unless a fault
// is set. Faults apply to current and new connections alike. Methods are safe
// for concurrent use.
//
// Black holes drop bytes rather than hold them: the proxy keeps reading both
// sides (so the sender's writes succeed, as on a real network that loses
// packets), and what it reads while a direction is black-holed is discarded
// and never delivered late. A side that closes or resets during a black hole
// is not reported to the other side until Heal (then the connection is
// closed), as a partition hides a peer's FIN or RST. Without faults, when
// either side closes or fails, the proxy closes both sides of that
// connection (no half-close).
type Proxy struct {
	ln       net.Listener
	upstream string
	ctx      context.Context // cancelled by Close; bounds upstream dials
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu       sync.Mutex
	holeUp   bool             // drop client->server bytes
	holeDown bool             // drop server->client bytes
	holdUp   bool             // hold client->server bytes until Heal (then delivered, in order)
	latency  time.Duration    // added to each direction
	changed  notify.Broadcast // every fault change
	conns    map[*proxyConn]struct{}
	closed   bool
	accepted int
}

// StartProxy listens on a free 127.0.0.1 port (chosen by the kernel, outside
// the reserved range) and forwards to upstream, which is dialed afresh for
// each accepted connection (it need not be up yet). Close it when done.
func StartProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testenv: proxy listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, upstream: upstream, ctx: ctx, cancel: cancel, conns: make(map[*proxyConn]struct{})}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// ProxyT starts a Proxy for a test: t.Fatalf on error, Close in t.Cleanup.
func ProxyT(t TB, upstream string) *Proxy {
	t.Helper()
	p, err := StartProxy(upstream)
	if err != nil {
		t.Fatalf("testenv: start proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Addr returns the proxy's listen address, "127.0.0.1:port". Give it to clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// BlackHole stops all bytes in both directions on current and new
// connections; connections stay open and new ones are still accepted.
func (p *Proxy) BlackHole() { p.setHoles(true, true) }

// BlackHoleDownstream passes client->server bytes and swallows
// server->client bytes: a request reaches the server, its reply is lost.
func (p *Proxy) BlackHoleDownstream() { p.setHoles(false, true) }

// BlackHoleUpstream swallows client->server bytes and passes server->client bytes.
func (p *Proxy) BlackHoleUpstream() { p.setHoles(true, false) }

// HoldUpstream holds client->server bytes until Heal, which delivers them
// in order: a request that is slow to reach the server, not a lost one.
// Server->client bytes still pass.
func (p *Proxy) HoldUpstream() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdUp = true
	p.changed.Notify()
}

// Heal removes all faults (black holes, holds and latency). Bytes dropped
// while black-holed stay dropped; held bytes are delivered now; connections
// whose peer closed meanwhile are closed now.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holeUp, p.holeDown, p.holdUp, p.latency = false, false, false, 0
	p.changed.Notify()
}

// waitUnheld returns once client->server bytes are no longer held (or the
// connection is done).
func (c *proxyConn) waitUnheld() {
	for {
		c.p.mu.Lock()
		held, changed := c.p.holdUp, c.p.changed.Wait()
		c.p.mu.Unlock()
		if !held {
			return
		}
		select {
		case <-changed:
		case <-c.done:
			return
		}
	}
}

// SetLatency delays every chunk of bytes by d in each direction (so a
// request/response round trip takes at least 2d more); 0 removes it. It
// applies to bytes read after the call.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
	p.changed.Notify()
}

// ResetConnections closes every current connection, both sides, with a TCP
// RST (the client sees "connection reset" or EOF). New connections are still
// accepted.
func (p *Proxy) ResetConnections() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns the number of connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if !already {
		p.cancel()
		p.ln.Close()
		p.ResetConnections()
	}
	p.wg.Wait()
	return nil
}

func (p *Proxy) setHoles(up, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holeUp, p.holeDown = up, down
	p.changed.Notify()
}

// fault returns direction's black-hole flag, the latency and the change channel.
func (p *Proxy) fault(up bool) (hole bool, latency time.Duration, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	hole = p.holeDown
	if up {
		hole = p.holeUp
	}
	return hole, p.latency, p.changed.Wait()
}

func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *Proxy) serve(client net.Conn) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	server, err := d.DialContext(dctx, "tcp", p.upstream)
	cancel()
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.accepted++
	p.mu.Unlock()
	up, down := make(chan chunk, 64), make(chan chunk, 64)
	p.wg.Go(func() { c.read(client, up, true) })
	p.wg.Go(func() { c.write(server, up, true) })
	p.wg.Go(func() { c.read(server, down, false) })
	p.wg.Go(func() { c.write(client, down, false) })
}

type chunk struct {
	b   []byte
	due time.Time
}

type proxyConn struct {
	p              *Proxy
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

// close closes both sides once; rst sends a TCP RST instead of a FIN.
func (c *proxyConn) close(rst bool) {
	c.once.Do(func() {
		for _, nc := range []net.Conn{c.client, c.server} {
			if tc, ok := nc.(*net.TCPConn); ok && rst {
				tc.SetLinger(0)
			}
			nc.Close()
		}
		close(c.done)
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// waitUnholed waits until direction up (client->server) or down is not
// black-holed, or the connection is closed.
func (c *proxyConn) waitUnholed(up bool) {
	for {
		hole, _, changed := c.p.fault(up)
		if !hole {
			return
		}
		select {
		case <-changed:
		case <-c.done:
			return
		}
	}
}

// read copies src into ch, stamping each chunk with its delivery time. On
// EOF or error it closes ch (the writer closes the connection after
// delivering what was read), but first waits out a black hole on its
// direction so the peer does not learn of the close through it.
func (c *proxyConn) read(src net.Conn, ch chan<- chunk, up bool) {
	defer close(ch)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_, lat, _ := c.p.fault(up)
			select {
			case ch <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(lat)}:
			case <-c.done:
				return
			}
		}
		if err != nil {
			c.waitUnholed(up)
			return
		}
	}
}

// write delivers chunks from ch to dst at their due time, dropping those
// whose direction is black-holed at that time. A failed write (dst closed
// or reset) is news travelling the other way, so it closes the connection
// only once that direction is not black-holed.
func (c *proxyConn) write(dst net.Conn, ch <-chan chunk, up bool) {
	defer c.close(false)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var ck chunk
		var ok bool
		select {
		case ck, ok = <-ch:
			if !ok {
				return
			}
		case <-c.done:
			return
		}
		if wait := time.Until(ck.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.done:
				return
			}
		}
		if up {
			c.waitUnheld()
		}
		if hole, _, _ := c.p.fault(up); hole {
			continue
		}
		if _, err := dst.Write(ck.b); err != nil {
			c.waitUnholed(!up)
			return
		}
	}
}
