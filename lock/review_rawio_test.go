package lock_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
)

// Review tests of the tracked ZooKeeper connection read and written through
// internal/rawio, with buffered reads (lock/tracker.go).

// rrWrite is one request go-zookeeper wrote: when its Write began and ended.
type rrWrite struct {
	before, after time.Time
	xid, op       int32
}

// rrConn sits above a tracked connection, where go-zookeeper calls it, and
// notes each request as go-zookeeper writes it (one Write per request). It
// can cut the TCP connection under the tracker once go-zookeeper has read
// cutAt bytes (in the middle of a response).
type rrConn struct {
	net.Conn // the tracked connection
	tcp      *net.TCPConn
	sink     *lock.ReviewRawioSink
	below    *rrBelow // nil: the tracked connection is over tcp itself (raw)
	mu       sync.Mutex
	writes   []rrWrite
	nw       int
	read     atomic.Int64
	cutAt    atomic.Int64
}

// rrBelow sits under the tracked connection (which then uses its methods,
// not raw system calls) and notes when each request's Write to the socket
// began: the latest time the tracker may count the request as sent.
type rrBelow struct {
	net.Conn
	mu     sync.Mutex
	starts []time.Time
}

func (b *rrBelow) Write(p []byte) (int, error) {
	now := time.Now()
	b.mu.Lock()
	b.starts = append(b.starts, now)
	b.mu.Unlock()
	return b.Conn.Write(p)
}

func (c *rrConn) Write(p []byte) (int, error) {
	before := time.Now()
	n, err := c.Conn.Write(p)
	after := time.Now()
	c.mu.Lock()
	if c.nw > 0 && len(p) >= 12 { // the first is the connect request (no xid)
		c.writes = append(c.writes, rrWrite{before, after, int32(binary.BigEndian.Uint32(p[4:8])), int32(binary.BigEndian.Uint32(p[8:12]))})
	}
	c.nw++
	c.mu.Unlock()
	return n, err
}

func (c *rrConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if r := c.read.Add(int64(n)); c.cutAt.Load() > 0 && r >= c.cutAt.Load() {
		c.tcp.Close()
	}
	return n, err
}

// rrDialer dials ZooKeeper over TCP with a receive buffer smaller than a
// large answer (it takes many reads; a tiny one makes TCP crawl) and wraps each connection as the engine does.
type rrDialer struct {
	t     *testing.T
	below bool // put an rrBelow under the tracked connection
	mu    sync.Mutex
	conns []*rrConn
}

func (d *rrDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	tcp := c.(*net.TCPConn)
	tcp.SetReadBuffer(64 << 10)
	var under net.Conn = tcp
	var below *rrBelow
	if d.below {
		below = &rrBelow{Conn: tcp}
		under = below
	}
	tc, sink, raw := lock.ReviewRawioTrack(under)
	if raw != !d.below {
		d.t.Errorf("the tracked connection over %T: raw %v", under, raw)
	}
	rc := &rrConn{Conn: tc, tcp: tcp, sink: sink, below: below}
	d.mu.Lock()
	d.conns = append(d.conns, rc)
	d.mu.Unlock()
	return rc, nil
}

func (d *rrDialer) conn(i int) *rrConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i >= len(d.conns) {
		return nil
	}
	return d.conns[i]
}

// rrLeaderOps: the requests the tracker must report as answered through
// the leader (when they succeed: every one of this test's does).
var rrLeaderOps = map[int32]bool{1: true, 2: true, 5: true, 7: true, 9: true, 13: true, 14: true, 15: true, 19: true, 20: true, 21: true}

// check compares what the tracker reported on c with what go-zookeeper
// wrote: the i-th answer is the i-th request's (ZooKeeper answers in order),
// counted from a send time inside that request's Write (never later: the
// session's validity is counted from it), read no earlier than it was sent,
// through the leader exactly for successful writes. complete: every request
// was answered (else the answers are a prefix: the connection was cut).
func (c *rrConn) check(t *testing.T, name string, complete bool) (answered int) {
	t.Helper()
	var acks []lock.ReviewRawioAck
	var hs int
	var w []rrWrite
	var starts []time.Time
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		acks, hs = c.sink.Acks()
		c.mu.Lock()
		w = append([]rrWrite(nil), c.writes...)
		c.mu.Unlock()
		if c.below != nil {
			c.below.mu.Lock()
			starts = append([]time.Time(nil), c.below.starts[min(1, len(c.below.starts)):]...) // after the connect request
			c.below.mu.Unlock()
		}
		// A request is recorded once its Write returns: its answer can be
		// matched before that (a loaded machine deschedules the writer
		// between the system call and the record), so more answers than
		// requests is looked at again.
		if (!complete && len(acks) <= len(w)) || (complete && len(acks) == len(w)) || time.Now().After(deadline) {
			break
		}
	}
	if hs != 1 {
		t.Errorf("%s: %d handshakes, want 1", name, hs)
	}
	if len(acks) > len(w) || complete && len(acks) != len(w) {
		t.Errorf("%s: %d answers matched for %d requests written", name, len(acks), len(w))
	}
	bad := 0
	for i, a := range acks[:min(len(acks), len(w))] {
		q := w[i]
		late := c.below != nil && (i >= len(starts) || a.Sent.After(starts[i]))
		if late || a.Sent.Before(q.before) || a.Sent.After(q.after) || a.At.Before(a.Sent) || a.Leader != rrLeaderOps[q.op] {
			if bad++; bad <= 5 {
				t.Errorf("%s: answer %d (request xid %d, op %d written %s .. %s): sent %s, read %s, leader %v, counted after its system call began %v",
					name, i, q.xid, q.op, q.before.Format("15:04:05.000000"), q.after.Format("15:04:05.000000"),
					a.Sent.Format("15:04:05.000000"), a.At.Format("15:04:05.000000"), a.Leader, late)
			}
		}
	}
	return len(acks)
}

// TestReviewRawioTrackerLargeAnswersAndCut: the tracked connection, raw
// and buffered, against a real ZooKeeper: pipelined writes (multis of 100
// creates), watch events between answers, getChildren answers of ~220 KB (far
// more than the 4 KiB buffer and the 64 KiB socket buffer, so read both
// through the buffer and straight into go-zookeeper's), syncs and setData;
// every answer is matched to its own request with its own send time. Then
// the TCP connection is cut in the middle of an answer with requests in
// flight: go-zookeeper dials again, the new connection starts with nothing of
// the old one's buffer (one handshake, its answers matched from the first),
// and the old one's answers are a prefix of its requests, never another's.
//
// Run twice: over the socket itself (raw system calls), and over a wrapper
// that notes when each write to the socket begins, so that the tracker's send
// time is also checked against that (never later).
func TestReviewRawioTrackerLargeAnswersAndCut(t *testing.T) {
	t.Run("raw", func(t *testing.T) { rrLargeAnswersAndCut(t, false) })
	t.Run("wrapped", func(t *testing.T) { rrLargeAnswersAndCut(t, true) })
}

func rrLargeAnswersAndCut(t *testing.T, below bool) {
	d := &rrDialer{t: t, below: below}
	zc, _, err := zk.Connect(zkServer.Servers(), 10*time.Second, zk.WithDialer(d.dial), zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	for deadline := time.Now().Add(20 * time.Second); zc.State() != zk.StateHasSession; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no session")
		}
	}
	acl := zk.WorldACL(zk.PermAll)
	parent := "/review_rawio_" + fmt.Sprint(time.Now().UnixNano())
	if _, err := zc.Create(parent, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	const kids = 2000
	name := func(i int) string { return fmt.Sprintf("%s/%04d-%s", parent, i, strings.Repeat("x", 100)) }
	defer func() { // through a connection of its own: zc may be the one that failed
		cc := rawConn(t, zkServer.Servers())
		names, _, _ := cc.Children(parent)
		for len(names) > 0 {
			var ops []any
			for _, n := range names[:min(100, len(names))] {
				ops = append(ops, &zk.DeleteRequest{Path: parent + "/" + n, Version: -1})
			}
			if _, err := cc.Multi(ops...); err != nil {
				t.Errorf("cleanup: %v", err)
				break
			}
			names = names[min(100, len(names)):]
		}
		cc.Delete(parent, -1)
	}()

	_, _, ev, err := zc.ExistsW(parent + "/w") // an event comes between answers
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for b := g; b < kids/100; b += 4 {
				var ops []any
				for i := b * 100; i < (b+1)*100; i++ {
					ops = append(ops, &zk.CreateRequest{Path: name(i), Acl: acl})
				}
				if _, err := zc.Multi(ops...); err != nil {
					t.Errorf("multi: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, err := zc.Create(parent+"/w", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ev:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
	_, _, cev, err := zc.ChildrenW(parent) // outstanding across the cut: setWatches on the new connection
	if err != nil {
		t.Fatal(err)
	}
	list := func(rounds int, mustWork bool, want int) {
		for g := range 6 {
			wg.Go(func() {
				for r := range rounds {
					ch, _, err := zc.Children(parent)
					if err == nil && len(ch) != want {
						t.Errorf("getChildren: %d children, want %d", len(ch), want)
					}
					if err == nil && g == 0 {
						_, err = zc.Set(parent, []byte(fmt.Sprint(r)), -1)
					}
					if err == nil && g == 1 {
						_, err = zc.Sync(parent)
					}
					if err != nil && mustWork {
						t.Errorf("request: %v", err)
					}
				}
			})
		}
	}
	list(6, true, kids+1)
	wg.Wait()
	c1 := d.conn(0)
	c1.check(t, "first connection", true)

	// Cut in the middle of an answer, with requests in flight.
	c1.cutAt.Store(c1.read.Load() + 100_000)
	list(6, false, kids+1)
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); d.conn(1) == nil || zc.State() != zk.StateHasSession; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no new connection after the cut")
		}
	}
	c1.check(t, "cut connection", false)

	c2 := d.conn(1)
	if _, err := zc.Create(parent+"/after", nil, 0, acl); err != nil { // fires the child watch, set again on c2
		t.Fatal(err)
	}
	select {
	case <-cev:
	case <-time.After(10 * time.Second):
		t.Fatal("no child watch event on the new connection")
	}
	list(4, true, kids+2)
	wg.Wait()
	if n := c2.check(t, "new connection", true); n < 24 {
		t.Errorf("new connection: %d answers, want at least 24", n)
	}
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
