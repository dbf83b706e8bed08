package lock_test

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ZooKeeper request types the tests cut after.
const (
	opCreate = 1
	opPing   = 11
	opMulti  = 14
)

// cutDialer lets a test lose the reply of one request: once armed, the
// connection is closed right after the client has written a request of the
// armed type (so the server receives and applies it) and new connections are
// refused for hold. go-zookeeper writes each request with one Write call.
type cutDialer struct {
	mu      sync.Mutex
	op      int32 // armed request type; 0 = none
	hold    time.Duration
	refuse  time.Time
	cutDone chan struct{}
}

func newCutDialer() *cutDialer { return &cutDialer{} }

// arm cuts after the next request of type op and refuses reconnects for hold;
// the returned channel is closed once the cut happened.
func (d *cutDialer) arm(op int32, hold time.Duration) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.op, d.hold, d.cutDone = op, hold, make(chan struct{})
	return d.cutDone
}

// heal accepts connections again.
func (d *cutDialer) heal() {
	d.mu.Lock()
	d.refuse = time.Time{}
	d.mu.Unlock()
}

func (d *cutDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	refusing := time.Now().Before(d.refuse)
	d.mu.Unlock()
	if refusing {
		time.Sleep(50 * time.Millisecond)
		return nil, errors.New("cutDialer: refusing connections")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &cutConn{cuttable: cuttable{Conn: c, name: "cutConn"}, d: d}, nil
}

// cuttable is the connection of the test dialers that cut it: once dead
// (set before the request that cuts it is written), nothing is read after
// it. Each dialer's Write decides when.
type cuttable struct {
	net.Conn
	name string
	dead atomic.Bool
}

func (c *cuttable) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.dead.Load() {
		return 0, errors.New(c.name + ": connection cut")
	}
	return n, err
}

type cutConn struct {
	cuttable
	d *cutDialer
}

func (c *cutConn) Write(p []byte) (int, error) {
	c.d.mu.Lock()
	op := c.d.op
	c.d.mu.Unlock()
	if op == 0 || len(p) < 12 || int32(binary.BigEndian.Uint32(p[8:12])) != op {
		return c.Conn.Write(p)
	}
	c.dead.Store(true)
	n, err := c.Conn.Write(p)
	time.Sleep(30 * time.Millisecond) // the server applies it; its reply is never read
	c.d.mu.Lock()
	c.d.op = 0
	c.d.refuse = time.Now().Add(c.d.hold)
	close(c.d.cutDone)
	c.d.mu.Unlock()
	c.Conn.Close()
	return n, err
}
