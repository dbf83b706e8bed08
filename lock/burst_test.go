package lock_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// createsConn counts, on the wire, the creates sent and not yet answered on
// a ZooKeeper connection (by xid: ZooKeeper answers in order), and their
// peak.
type createsConn struct {
	net.Conn
	m *createsInFlight

	wbuf, rbuf []byte
	wfirst     bool // the connect request, which has no xid, is behind us
	rfirst     bool
}

type createsInFlight struct {
	mu      sync.Mutex
	creates map[int32]bool
	now     int
	peak    int
}

func (c *createsConn) Write(p []byte) (int, error) {
	c.m.mu.Lock()
	zkFrames(&c.wbuf, &c.wfirst, p, func(f []byte) {
		if len(f) >= 8 {
			switch op := int32(binary.BigEndian.Uint32(f[4:])); op {
			case 1, 15, 19, 21: // create, create2, createContainer, createTTL
				c.m.creates[int32(binary.BigEndian.Uint32(f))] = true
				c.m.now++
				c.m.peak = max(c.m.peak, c.m.now)
			}
		}
	})
	c.m.mu.Unlock()
	return c.Conn.Write(p)
}

// zkFrames appends p to *buf and calls each with every whole
// length-prefixed ZooKeeper frame in it (without its length), skipping the
// connection's first (the connect request or answer: no xid).
func zkFrames(buf *[]byte, first *bool, p []byte, each func(f []byte)) {
	*buf = append(*buf, p...)
	for len(*buf) >= 4 {
		n := int(binary.BigEndian.Uint32(*buf))
		if len(*buf) < 4+n {
			break
		}
		f := (*buf)[4 : 4+n]
		*buf = (*buf)[4+n:]
		if !*first {
			*first = true
			continue
		}
		each(f)
	}
}

func (c *createsConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.m.mu.Lock()
	zkFrames(&c.rbuf, &c.rfirst, p[:k], func(f []byte) {
		if len(f) >= 4 {
			xid := int32(binary.BigEndian.Uint32(f))
			if c.m.creates[xid] {
				delete(c.m.creates, xid)
				c.m.now--
			}
		}
	})
	c.m.mu.Unlock()
	return k, err
}

// A burst of arrivals on one engine sends its creates at most 64 at a time:
// ZooKeeper answers a session in order, and an unbounded burst queued every
// create ahead of the keeper's sync until the session's newest
// acknowledgement was older than its timeout (10,000 arrivals on a loaded
// machine lost the session). Counted on the wire; every waiter is still
// granted, in turn, under the overlap and fencing checker.
func TestBurstCreatesBounded(t *testing.T) {
	for _, proto := range []struct {
		name string
		set  func(*lock.Options)
	}{{"plugin", func(*lock.Options) {}}, {"native", native}} {
		t.Run(proto.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			m := &createsInFlight{creates: map[int32]bool{}}
			e := newEngine(t, zkServer.Servers(), root, proto.set, func(o *lock.Options) {
				o.Dialer = func(network, addr string, timeout time.Duration) (net.Conn, error) {
					c, err := net.DialTimeout(network, addr, timeout)
					if err != nil {
						return nil, err
					}
					return &createsConn{Conn: c, m: m}, nil
				}
			})
			var chk overlapChecker
			gate := acquire(t, e, "burst", lock.Foreground, lock.AcquireOptions{})
			chk.enter(gate.Token())
			const n = 600
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				typ := lock.Foreground
				if i%3 == 0 {
					typ = lock.Background
				}
				wg.Go(func() {
					<-start
					g, err := e.Acquire(context.Background(), "burst", typ, lock.AcquireOptions{Wait: 3 * time.Minute})
					if err != nil {
						t.Error(err)
						return
					}
					chk.enter(g.Token())
					chk.leave()
					release(t, g)
				})
			}
			close(start)
			conn := rawConn(t, zkServer.Servers())
			waitFor(t, 2*time.Minute, "every waiter queued", func() bool { return len(children(t, conn, root, "burst")) >= n+1 })
			chk.leave()
			release(t, gate)
			wg.Wait()
			m.mu.Lock()
			peak, left := m.peak, m.now
			m.mu.Unlock()
			if chk.overlaps != 0 || chk.badToken != 0 || chk.grants != n+1 {
				t.Errorf("overlaps %d, tokens not increasing %d, grants %d of %d", chk.overlaps, chk.badToken, chk.grants, n+1)
			}
			if peak > 64 {
				t.Errorf("%d arrivals at once: %d creates in flight at the peak; want at most 64", n, peak)
			}
			if left != 0 {
				t.Errorf("%d creates never answered", left)
			}
			t.Logf("%d arrivals at once: at most %d creates in flight", n, peak)
		})
	}
}
