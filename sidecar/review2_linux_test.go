package sidecar_test

// Review of the detached acquire (detach.go, detach_linux.go): callers
// driven by hand over raw connections.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
	"github.com/go-zookeeper/zk"
)

// rawAcquire sends an acquire of obj on a connection of its own and
// returns the connection, its answer unread.
func rawAcquire(t testing.TB, s *sc, obj, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		obj, len(body), body); err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads one response from c (within 20 s).
func readAnswer(t testing.TB, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, b
}

// startDetach runs a sidecar on a lock root of its own (under the test's)
// whose waiting acquires detach from the waiters-th in flight, after
// 10 ms; waiters 0: never.
func startDetach(t *testing.T, sub string, waiters int64) *sc {
	t.Helper()
	return startDetachAt(t, testConfig(t, testRoot(t)+"/"+sub, "n1"), waiters, true)
}

// assertNoLeases: the sidecar has no lease.
func assertNoLeases(t testing.TB, s *sc) {
	t.Helper()
	var ls api.LeaseList
	_, b := s.call("GET", "/v1/leases", "")
	if err := json.Unmarshal(b, &ls); err != nil || len(ls.Leases) != 0 {
		t.Errorf("leases left: %s", b)
	}
}

var zkOf sync.Map // *sc: a ZooKeeper client for childCount

func childCount(t testing.TB, s *sc, obj string) int {
	t.Helper()
	c, ok := zkOf.Load(s)
	if !ok {
		c, _ = zkOf.LoadOrStore(s, rawConn(s.t))
	}
	k, _, err := c.(*zk.Conn).Children(s.cfg.LockRoot + "/" + obj)
	if err != nil {
		t.Fatal(err)
	}
	return len(k)
}

// TestDetachedCallerLeavesAfterSendingMore: a caller that sends more bytes
// while its acquire waits detached (a pipelined request), then leaves,
// must still end the wait: its node goes. The close watcher's one-shot
// registration is spent on the bytes, so the close that follows is not
// noticed and the node stays for the whole wait_ms.
func TestDetachedCallerLeavesAfterSendingMore(t *testing.T) {
	s := startDetaching(t)
	h := s.acquire("p", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv)
	c := rawAcquire(t, s, "p", `{"wait_ms":60000}`)
	waitFor(t, 10*time.Second, "the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
	waitFor(t, 10*time.Second, "the waiter's node", func() bool { return childCount(t, s, "p") == 3 })
	e0 := sidecar.WatcherEvents(s.srv)
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the watcher saw the bytes", func() bool { return sidecar.WatcherEvents(s.srv) > e0 })
	c.Close()
	waitFor(t, 10*time.Second, "the waiter's node gone after its caller left", func() bool { return childCount(t, s, "p") == 2 })
	s.release(h.LeaseID)
}

// TestDetachedGrantNobodyReceives: a grant whose answer cannot be written
// (the caller shut its reading side: the write fails with EPIPE, as it does
// for a caller that leaves just after the grant) must be released, not
// left as a lease nobody knows of holding the lock until it expires.
func TestDetachedGrantNobodyReceives(t *testing.T) {
	s := startDetaching(t)
	h := s.acquire("g", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv)
	c := rawAcquire(t, s, "g", `{"wait_ms":60000,"lease_ms":60000}`)
	waitFor(t, 10*time.Second, "the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
	waitFor(t, 10*time.Second, "the waiter's node", func() bool { return childCount(t, s, "g") == 3 })
	if err := c.(*net.UnixConn).CloseRead(); err != nil {
		t.Fatal(err)
	}
	s.release(h.LeaseID)
	waitFor(t, 10*time.Second, "the object free again", func() bool {
		st, b := s.call("POST", "/v1/locks/g/acquire", `{"wait_ms":0}`)
		if st == http.StatusOK {
			s.release(decodeLease(t, b).LeaseID)
		}
		return st == http.StatusOK
	})
	assertNoLeases(t, s)
}

// TestDetachedHalfClose: a caller that shuts its writing side while its
// acquire waits detached is taken as leaving (as net/http's background
// read takes the EOF): the wait ends, and the caller, still reading, is
// answered 400 "request cancelled by the client" and then EOF.
func TestDetachedHalfClose(t *testing.T) {
	for _, detached := range []bool{false, true} {
		var s *sc
		if detached {
			s = startDetach(t, "d", 1)
		} else {
			s = startDetach(t, "a", 0) // the attached path, for comparison
		}
		h := s.acquire("hc", `{"lease_ms":60000}`)
		n0 := sidecar.Detached(s.srv)
		c := rawAcquire(t, s, "hc", `{"wait_ms":60000}`)
		waitFor(t, 10*time.Second, "the waiter's node", func() bool { return childCount(t, s, "hc") == 3 })
		if detached {
			waitFor(t, 10*time.Second, "the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
		} else if got := sidecar.Detached(s.srv) - n0; got != 0 {
			t.Fatalf("%d acquires detached, want 0", got)
		}
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		resp, b := readAnswer(t, c)
		if resp.StatusCode != http.StatusBadRequest || decodeError(t, b).Kind != api.BadRequest {
			t.Errorf("detached %v: half-closed caller answered %d %s", detached, resp.StatusCode, b)
		}
		waitFor(t, 10*time.Second, "the waiter's node gone", func() bool { return childCount(t, s, "hc") == 2 })
		c.Close()
		s.release(h.LeaseID)
	}
}

// TestDetachedWaitersOnShutdown: a drain with detached waiters answers
// each 503 ShuttingDown, and no node is left once the holder releases.
func TestDetachedWaitersOnShutdown(t *testing.T) {
	s := startDetaching(t)
	h := s.acquire("sd", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv)
	var cs []net.Conn
	for range 3 {
		cs = append(cs, rawAcquire(t, s, "sd", `{"wait_ms":60000}`))
	}
	waitFor(t, 10*time.Second, "the waiters detached", func() bool { return sidecar.Detached(s.srv) == n0+3 })
	waitFor(t, 10*time.Second, "the waiters' nodes", func() bool { return childCount(t, s, "sd") == 5 })
	down := make(chan error, 1)
	go func() { down <- s.srv.Shutdown(context.Background()) }()
	for i, c := range cs {
		resp, b := readAnswer(t, c)
		if resp.StatusCode != http.StatusServiceUnavailable || decodeError(t, b).Kind != api.ShuttingDown || !resp.Close {
			t.Errorf("waiter %d on shutdown: %d close=%v %s", i, resp.StatusCode, resp.Close, b)
		}
	}
	if n := childCount(t, s, "sd"); n != 2 {
		t.Errorf("%d children of the object while draining, want 2 (privateLock, the holder's)", n)
	}
	s.release(h.LeaseID)
	if err := <-down; err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, rawConn(t), s.cfg.LockRoot)
}

// TestDetachedAnswerBytes: the detached answer is what net/http writes for
// the same answer, with Connection: close: same status line, same headers
// (Cache-Control, Content-Type, Content-Length, Date), same body; also to
// an HTTP/1.0 caller.
func TestDetachedAnswerBytes(t *testing.T) {
	scs := map[bool]*sc{false: startDetach(t, "a", 0), true: startDetach(t, "d", 1)}
	for _, s := range scs {
		h := s.acquire("ab", `{"lease_ms":60000}`)
		defer s.release(h.LeaseID)
	}
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		answers := map[bool]*http.Response{}
		bodies := map[bool][]byte{}
		for _, detached := range []bool{false, true} {
			s := scs[detached]
			n0 := sidecar.Detached(s.srv)
			c, err := net.Dial("unix", s.cfg.SocketPath)
			if err != nil {
				t.Fatal(err)
			}
			body := `{"wait_ms":200}`
			fmt.Fprintf(c, "POST /v1/locks/ab/acquire %s\r\nHost: baton\r\nContent-Length: %d\r\n\r\n%s", proto, len(body), body)
			resp, b := readAnswer(t, c)
			c.Close()
			if got := sidecar.Detached(s.srv) - n0; (got == 1) != detached {
				t.Fatalf("%s detached %v: %d detached", proto, detached, got)
			}
			answers[detached], bodies[detached] = resp, b
		}
		a, d := answers[false], answers[true]
		if a.StatusCode != http.StatusLocked || d.Status != a.Status {
			t.Errorf("%s: status %q detached, %q attached", proto, d.Status, a.Status)
		}
		for _, k := range []string{"Content-Type", "Cache-Control"} {
			if d.Header.Get(k) != a.Header.Get(k) {
				t.Errorf("%s: %s %q detached, %q attached", proto, k, d.Header.Get(k), a.Header.Get(k))
			}
		}
		if d.ContentLength != int64(len(bodies[true])) || d.Header.Get("Date") == "" || !d.Close {
			t.Errorf("%s: detached header %v", proto, d.Header)
		}
		ea, ed := decodeError(t, bodies[false]), decodeError(t, bodies[true])
		if ea.Kind != ed.Kind || ea.Object != ed.Object || ea.Holder == nil != (ed.Holder == nil) {
			t.Errorf("%s: body %s detached, %s attached", proto, bodies[true], bodies[false])
		}
	}
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestDetachedManyWaiters: 600 waiters on one object with the default
// threshold: all but the threshold's detach, the sidecar keeps about one goroutine
// per detached waiter, and when the callers leave every wait ends, every
// node goes, and the goroutines and descriptors come back to where they
// were.
func TestDetachedManyWaiters(t *testing.T) {
	const n = 600
	cfg := testConfig(t, testRoot(t), "n1")
	cfg.ZKSessionTimeout = 15 * time.Second // the race detector and a shared machine
	// detaching is net/http's (lean.go)
	s := start(t, cfg, func(o *sidecar.Options) { o.LeanPathOff = true })
	h := s.acquire("m", `{"lease_ms":60000}`)
	g0, f0 := runtime.NumGoroutine(), openFDs(t)
	n0 := sidecar.Detached(s.srv)
	var cs []net.Conn
	for range n {
		cs = append(cs, rawAcquire(t, s, "m", `{"wait_ms":120000}`))
	}
	waitFor(t, 60*time.Second, "the waiters' nodes", func() bool { return childCount(t, s, "m") == n+2 })
	// A waiter detaches once it waits: its node may be there a moment
	// before (a fresh clone's run saw 343 of the 344 right after the last
	// node appeared).
	for end := time.Now().Add(10 * time.Second); sidecar.Detached(s.srv)-n0 < n-sidecar.DetachWaiters && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if d := sidecar.Detached(s.srv) - n0; d < n-sidecar.DetachWaiters {
		t.Errorf("%d of %d waiters detached, want all but %d at most", d, n, sidecar.DetachWaiters)
	}
	// about one goroutine per detached waiter once the listings settle
	// (net/http keeps two per waiting connection)
	waitFor(t, 30*time.Second, "at most 1.5 goroutines per waiter", func() bool {
		return float64(runtime.NumGoroutine()-g0)/n <= 1.5
	})
	t.Logf("%d waiters: %d detached, goroutines %d -> %d, fds %d -> %d", n, sidecar.Detached(s.srv)-n0, g0, runtime.NumGoroutine(), f0, openFDs(t))
	for _, c := range cs {
		c.Close()
	}
	waitFor(t, 60*time.Second, "every waiter's node gone", func() bool { return childCount(t, s, "m") == 2 })
	waitFor(t, 20*time.Second, "no acquire waiting", func() bool {
		var hz api.Health
		_, b := s.call("GET", "/healthz", "")
		return json.Unmarshal(b, &hz) == nil && hz.ZooKeeper.Waiting == 0
	})
	back := func() bool { return runtime.NumGoroutine() <= g0+10 && openFDs(t) <= f0+5 }
	for end := time.Now().Add(20 * time.Second); !back() && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	if !back() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines %d (were %d), fds %d (were %d); goroutines:\n%s", runtime.NumGoroutine(), g0, openFDs(t), f0, buf)
	}
	s.release(h.LeaseID)
	if st, b := s.call("POST", "/v1/locks/m/acquire", `{"wait_ms":0}`); st != 200 {
		t.Fatalf("after the waiters left: %d %s", st, b)
	} else if !strings.Contains(string(b), "lease_id") {
		t.Fatalf("after the waiters left: %s", b)
	}
}

// TestDetachedPipelinedCallerStays: a caller that pipelines a request
// behind its acquire — sent with it (then in net/http's reader when the
// connection is hijacked) or while it waits — and stays gets the acquire's
// answer, whole, with Connection: close, and nothing after it (the
// pipelined request is dropped: HTTP/1.1 has it sent again); a chunked
// body detaches too.
func TestDetachedPipelinedCallerStays(t *testing.T) {
	s := startDetaching(t)
	const next = "GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n"
	for _, tc := range []struct{ name, req, after string }{
		{"with", "POST /v1/locks/ps/acquire HTTP/1.1\r\nHost: baton\r\nContent-Length: 17\r\n\r\n{\"wait_ms\":30000}" + next, ""},
		{"while waiting", "POST /v1/locks/ps/acquire HTTP/1.1\r\nHost: baton\r\nContent-Length: 17\r\n\r\n{\"wait_ms\":30000}", next},
		{"chunked", "POST /v1/locks/ps/acquire HTTP/1.1\r\nHost: baton\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n{\"wait_\r\na\r\nms\":30000}\r\n0\r\n\r\n", next},
	} {
		h := s.acquire("ps", `{"lease_ms":60000}`)
		n0 := sidecar.Detached(s.srv)
		c, err := net.Dial("unix", s.cfg.SocketPath)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.req); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, tc.name+": the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
		if tc.after != "" {
			if _, err := io.WriteString(c, tc.after); err != nil {
				t.Fatal(err)
			}
		}
		s.release(h.LeaseID)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !resp.Close {
			t.Fatalf("%s: %d close=%v %s", tc.name, resp.StatusCode, resp.Close, b)
		}
		s.release(decodeLease(t, b).LeaseID)
		if rest, _ := io.ReadAll(br); len(rest) != 0 {
			t.Errorf("%s: after the answer: %q", tc.name, rest)
		}
		c.Close()
	}
}

// TestDetachedExpectContinue: a caller that sends Expect: 100-continue
// (curl does, for a large body) gets 100 Continue, then, detached, the
// acquire's answer.
func TestDetachedExpectContinue(t *testing.T) {
	s := startDetaching(t)
	h := s.acquire("ec", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv)
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"wait_ms":30000}`
	fmt.Fprintf(c, "POST /v1/locks/ec/acquire HTTP/1.1\r\nHost: baton\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body))
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	cont, err := http.ReadResponse(br, nil)
	if err != nil || cont.StatusCode != http.StatusContinue {
		t.Fatalf("100 Continue: %v %v", cont, err)
	}
	io.WriteString(c, body)
	waitFor(t, 10*time.Second, "the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
	s.release(h.LeaseID)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	s.release(decodeLease(t, b).LeaseID)
}

// TestDetachedThresholdBackAndForth: with a threshold of 3 acquires in
// flight, the third waiter detaches and the first two do not; once they all
// ended (granted, timed out, left), a new waiter is again below the
// threshold; the stock Go client's next request after a Connection: close
// answer goes on a new connection and works.
func TestDetachedThresholdBackAndForth(t *testing.T) {
	s := startDetach(t, "t", 3)
	for round := range 2 {
		h := s.acquire("tb", `{"lease_ms":60000}`)
		n0 := sidecar.Detached(s.srv)
		w1 := rawAcquire(t, s, "tb", `{"wait_ms":30000}`)
		waitFor(t, 10*time.Second, "w1's node", func() bool { return childCount(t, s, "tb") == 3 })
		w2 := detachedAcquire(s, "tb", `{"wait_ms":30000}`)
		waitFor(t, 10*time.Second, "w2's node", func() bool { return childCount(t, s, "tb") == 4 })
		w3 := rawAcquire(t, s, "tb", `{"wait_ms":1000}`)
		waitFor(t, 10*time.Second, "w3 detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
		if resp, b := readAnswer(t, w3); resp.StatusCode != http.StatusLocked || !resp.Close {
			t.Fatalf("round %d: w3 %d %s", round, resp.StatusCode, b)
		}
		w1.Close() // leaves
		waitFor(t, 10*time.Second, "w1's node gone", func() bool { return childCount(t, s, "tb") == 3 })
		s.release(h.LeaseID)
		a := <-w2
		if a.err != nil || a.status != 200 || a.close {
			t.Fatalf("round %d: w2 (attached) %d close=%v %s %v", round, a.status, a.close, a.body, a.err)
		}
		s.release(decodeLease(t, a.body).LeaseID)
		if d := sidecar.Detached(s.srv) - n0; d != 1 {
			t.Errorf("round %d: %d detached, want 1 (w3)", round, d)
		}
	}
	// the stock client, one http.Client, its acquire detached, then more
	// requests on it
	h := s.acquire("tb", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv)
	w1, w2 := rawAcquire(t, s, "tb", `{"wait_ms":30000}`), rawAcquire(t, s, "tb", `{"wait_ms":30000}`)
	defer w1.Close()
	defer w2.Close()
	waitFor(t, 10*time.Second, "two waiters", func() bool { return childCount(t, s, "tb") == 4 })
	got := make(chan answer, 1)
	go func() {
		resp, err := s.hc.Post("http://baton/v1/locks/tb/acquire", "application/json", strings.NewReader(`{"wait_ms":1000}`))
		if err != nil {
			got <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- answer{status: resp.StatusCode, close: resp.Close, body: b}
	}()
	a := <-got
	if a.err != nil || a.status != http.StatusLocked || !a.close || sidecar.Detached(s.srv) != n0+1 {
		t.Fatalf("stock client, detached: %d close=%v %s %v", a.status, a.close, a.body, a.err)
	}
	for range 3 {
		if st, b := s.call("GET", "/v1/locks/tb", ""); st != 200 {
			t.Fatalf("the stock client after a Connection: close answer: %d %s", st, b)
		}
	}
	s.release(h.LeaseID)
}

// TestDetachedCallerKilled: curl, waiting detached, is killed: the wait
// ends (its node goes, no acquire waiting) and no lease is left.
func TestDetachedCallerKilled(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	s := startDetaching(t)
	h := s.acquire("k", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv)
	cmd := exec.Command("curl", "-sS", "--unix-socket", s.cfg.SocketPath, "-H", "Content-Type: application/json",
		"-d", `{"wait_ms":60000}`, "http://baton/v1/locks/k/acquire")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "curl detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
	waitFor(t, 10*time.Second, "curl's node", func() bool { return childCount(t, s, "k") == 3 })
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitFor(t, 10*time.Second, "curl's node gone", func() bool { return childCount(t, s, "k") == 2 })
	s.release(h.LeaseID)
	assertNoLeases(t, s)
}

// TestDetachedLeaveAsGranted: callers that close their connection at the
// moment their detached acquire is granted (the holder's release and the
// close sent together, 20 rounds): whichever comes first, the object is
// free again at once — the grant released by lease() (the caller gone) or
// by the answer's failed write — and no lease is left.
func TestDetachedLeaveAsGranted(t *testing.T) {
	s := startDetaching(t)
	for round := range 20 {
		h := s.acquire("lg", `{"lease_ms":60000}`)
		n0 := sidecar.Detached(s.srv)
		c := rawAcquire(t, s, "lg", `{"wait_ms":60000,"lease_ms":60000}`)
		waitFor(t, 10*time.Second, "the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
		waitFor(t, 10*time.Second, "the waiter's node", func() bool { return childCount(t, s, "lg") == 3 })
		go c.Close()
		s.release(h.LeaseID)
		waitFor(t, 10*time.Second, fmt.Sprintf("round %d: the object free again", round), func() bool {
			st, b := s.call("POST", "/v1/locks/lg/acquire", `{"wait_ms":0}`)
			if st == http.StatusOK {
				s.release(decodeLease(t, b).LeaseID)
			}
			return st == http.StatusOK
		})
	}
	assertNoLeases(t, s)
}
