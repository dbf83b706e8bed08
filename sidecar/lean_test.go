package sidecar_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
)

// rawHTTP is one connection to the sidecar written to by hand.
type rawHTTP struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, s *sc) *rawHTTP {
	t.Helper()
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawHTTP{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawHTTP) send(s string) {
	r.t.Helper()
	if _, err := r.c.Write([]byte(s)); err != nil {
		r.t.Fatal(err)
	}
}

// read reads one response (to a request with method).
func (r *rawHTTP) read(method string) (*http.Response, []byte) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(r.br, &http.Request{Method: method})
	if err != nil {
		r.t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("reading a body: %v", err)
	}
	resp.Body.Close()
	return resp, b
}

func post(path, body string, extra ...string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: baton\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, strings.Join(extra, ""), len(body), body)
}

func leaseOf(t *testing.T, resp *http.Response, b []byte) api.Lease {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var l api.Lease
	if err := json.Unmarshal(b, &l); err != nil || l.LeaseID == "" {
		t.Fatalf("not a lease: %s (%v)", b, err)
	}
	return l
}

// TestLeanKeepAliveThenNetHTTP: acquire, renew and release on one
// connection are answered by the lean path (keep-alive, the same bytes as
// net/http's: status, JSON headers, Content-Length); the first request it
// does not serve (GET /healthz) hands the connection to net/http with that
// request unread, and net/http answers it and the next ones, an acquire
// included, on the same connection.
func TestLeanKeepAliveThenNetHTTP(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	served0, handed0 := sidecar.LeanCounts(s.srv)
	r := dialRaw(t, s)

	r.send(post("/v1/locks/lean-a/acquire", `{"lease_ms":60000}`))
	resp, b := r.read("POST")
	l := leaseOf(t, resp, b)
	if resp.Close || resp.Header.Get("Content-Type") != "application/json" || resp.ContentLength != int64(len(b)) || resp.Header.Get("Date") == "" {
		t.Errorf("lean answer: close %v, headers %v, length %d for %d bytes", resp.Close, resp.Header, resp.ContentLength, len(b))
	}
	r.send(post("/v1/leases/"+l.LeaseID+"/renew", `{"lease_ms":30000}`))
	resp, b = r.read("POST")
	if rl := leaseOf(t, resp, b); rl.LeaseID != l.LeaseID {
		t.Errorf("renew answered lease %q", rl.LeaseID)
	}
	r.send("DELETE /v1/leases/" + l.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\n")
	resp, b = r.read("DELETE")
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"released":true`)) {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	served, handed := sidecar.LeanCounts(s.srv)
	if served-served0 != 3 || handed != handed0 {
		t.Fatalf("lean path answered %d requests and handed %d connections; want 3 and 0", served-served0, handed-handed0)
	}

	r.send("GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n")
	resp, b = r.read("GET")
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"zookeeper"`)) {
		t.Fatalf("healthz after the lean requests: %d %s", resp.StatusCode, b)
	}
	r.send(post("/v1/locks/lean-a/acquire", `{}`))
	resp, b = r.read("POST")
	l = leaseOf(t, resp, b)
	s.release(l.LeaseID)
	served, handed = sidecar.LeanCounts(s.srv)
	if served-served0 != 3 || handed-handed0 != 1 {
		t.Fatalf("after /healthz: lean path answered %d, handed %d; want 3 and 1", served-served0, handed-handed0)
	}
}

// TestLeanPipelinedAndTrickled: requests sent together are answered in
// order, and a request that arrives a byte at a time is answered once its
// last byte arrives.
func TestLeanPipelinedAndTrickled(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	r := dialRaw(t, s)
	r.send(post("/v1/locks/lean-p1/acquire", `{}`) + post("/v1/locks/lean-p2/acquire", `{"info":"second"}`))
	resp, b := r.read("POST")
	l1 := leaseOf(t, resp, b)
	resp, b = r.read("POST")
	l2 := leaseOf(t, resp, b)
	if l1.Object != "lean-p1" || l2.Object != "lean-p2" || l2.Info != "second" {
		t.Fatalf("pipelined answers out of order: %+v, %+v", l1, l2)
	}
	req := "DELETE /v1/leases/" + l1.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\n" + "DELETE /v1/leases/" + l2.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\n"
	for i := range len(req) {
		r.send(req[i : i+1])
		if i%16 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	for range 2 {
		if resp, b := r.read("DELETE"); resp.StatusCode != 200 {
			t.Fatalf("trickled release: %d %s", resp.StatusCode, b)
		}
	}
	if st := s.leaseCount(); st != 0 {
		t.Fatalf("%d leases left", st)
	}
}

// leaseCount is the sidecar's leases as /healthz tells them.
func (s *sc) leaseCount() int {
	s.t.Helper()
	var h struct {
		Leases int `json:"leases"`
	}
	if err := json.Unmarshal(s.mustCall(200, "GET", "/healthz", ""), &h); err != nil {
		s.t.Fatal(err)
	}
	return h.Leases
}

// TestLeanHandsOverWhatItDoesNotServe: requests on the lean path's routes
// that are not plainly HTTP/1.1 go to net/http, which answers them as it
// always did: a chunked body, an Expect: 100-continue, a head over the
// lean buffer, lines ended by LF alone and HTTP/1.0 are served, no Host
// and two lengths are a 400, a body over 1 MiB is a 413.
func TestLeanHandsOverWhatItDoesNotServe(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	cases := []struct {
		name, req string
		want      int
	}{
		{"chunked", "POST /v1/locks/lean-h/acquire HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 200},
		{"expect", "POST /v1/locks/lean-h/acquire HTTP/1.1\r\nHost: b\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", 200},
		{"no host", "POST /v1/locks/lean-h/acquire HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"two lengths", "POST /v1/locks/lean-h/acquire HTTP/1.1\r\nHost: b\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400},
		{"too large", fmt.Sprintf("POST /v1/locks/lean-h/acquire HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n{\"info\":\"%s\"}", api.MaxBody+13, strings.Repeat("x", api.MaxBody+1)), 413},
		{"long head", "POST /v1/locks/lean-h/acquire HTTP/1.1\r\nHost: b\r\nX-Pad: " + strings.Repeat("p", 3000) + "\r\nContent-Length: 2\r\n\r\n{}", 200},
		{"bare LF", "POST /v1/locks/lean-h/acquire HTTP/1.1\nHost: b\nContent-Length: 2\n\n{}", 200},
		{"http/1.0", "POST /v1/locks/lean-h/acquire HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, handed0 := sidecar.LeanCounts(s.srv)
			r := dialRaw(t, s)
			r.send(c.req)
			resp, b := r.read("POST")
			if c.name == "expect" && resp.StatusCode == http.StatusContinue {
				resp, b = r.read("POST")
			}
			if resp.StatusCode != c.want {
				t.Fatalf("%d %s, want %d", resp.StatusCode, b, c.want)
			}
			if _, handed := sidecar.LeanCounts(s.srv); handed != handed0+1 {
				t.Errorf("not handed to net/http (%d → %d)", handed0, handed)
			}
			if resp.StatusCode == 200 {
				s.release(leaseOf(t, resp, b).LeaseID)
			}
		})
	}
}

// TestLeanCallerLeavesWhileWaiting: a caller that closes its connection
// while its acquire waits on the lean path ends the wait (the close
// watcher cancels it): the sidecar counts no waiter, its node goes, and the
// object goes to the next caller when the holder releases.
func TestLeanCallerLeavesWhileWaiting(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	conn := rawConn(t)
	h := s.acquire("lean-w", `{"lease_ms":60000}`)
	r := dialRaw(t, s)
	r.send(post("/v1/locks/lean-w/acquire", `{"wait_ms":60000}`))
	waitFor(t, 10*time.Second, "the acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
	time.Sleep(20 * time.Millisecond) // past leanWatchAfter: watched by epoll
	r.c.Close()
	waitFor(t, 10*time.Second, "the wait ends", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 0 })
	waitFor(t, 10*time.Second, "its node goes", func() bool {
		kids, _, err := conn.Children(s.cfg.LockRoot + "/lean-w")
		return err == nil && len(kids) == 2 // the holder's child and privateLock (plugin)
	})
	s.release(h.LeaseID)
	l := s.acquire("lean-w", `{"wait_ms":0}`)
	s.release(l.LeaseID)
}

// TestLeanConnectionClose: "Connection: close" is answered with it and the
// connection closed.
func TestLeanConnectionClose(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	r := dialRaw(t, s)
	served0, _ := sidecar.LeanCounts(s.srv)
	r.send(post("/v1/locks/lean-c/acquire", `{}`, "Connection: close\r\n"))
	resp, b := r.read("POST")
	l := leaseOf(t, resp, b)
	if !resp.Close {
		t.Errorf("no Connection: close in the answer")
	}
	if served, _ := sidecar.LeanCounts(s.srv); served != served0+1 {
		t.Errorf("not served by the lean path")
	}
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := r.br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close: read %v, %v; want EOF", n, err)
	}
	s.release(l.LeaseID)
}

// TestLeanShutdownClosesIdle: a stop closes an idle lean connection and
// lets a running request finish with its answer.
func TestLeanShutdownClosesIdle(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "n1")
	cfg.ShutdownGrace = time.Second // the lease held is released at its end
	s := start(t, cfg)
	idle := dialRaw(t, s)
	idle.send(post("/v1/locks/lean-s/acquire", `{}`))
	resp, b := idle.read("POST")
	leaseOf(t, resp, b)
	busy := dialRaw(t, s)
	busy.send(post("/v1/locks/lean-s/acquire", `{"wait_ms":60000}`))
	waitFor(t, 10*time.Second, "the acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
	s.cancel()
	resp, b = busy.read("POST")
	if resp.StatusCode == 200 {
		t.Fatalf("a waiting acquire granted during shutdown: %s", b)
	}
	// the idle connection stays open through the drain (its holder may
	// renew and release on it), which lasts the grace (the lease on it is
	// not released)
	_ = idle.c.SetReadDeadline(time.Now().Add(s.cfg.ShutdownGrace + 20*time.Second))
	if _, err := idle.br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after the stop: %v, want EOF", err)
	}
}

// TestLeanCrowdedAcquireDetaches: with many acquires in flight (here the
// threshold is 1) a new acquire goes to net/http, which detaches it when it
// waits (detach.go: a waiting connection keeps less there); below the
// threshold acquires stay on the lean path.
func TestLeanCrowdedAcquireDetaches(t *testing.T) {
	s := startDetachAt(t, testConfig(t, testRoot(t), "n1"), 1, false)

	h := s.acquire("lean-crowd", `{"lease_ms":60000}`) // alone in flight: lean
	served0, handed0 := sidecar.LeanCounts(s.srv)
	d0 := sidecar.Detached(s.srv)
	first := dialRaw(t, s)
	first.send(post("/v1/locks/lean-crowd/acquire", `{"wait_ms":60000}`))
	waitFor(t, 10*time.Second, "the first waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
	second := dialRaw(t, s)
	second.send(post("/v1/locks/lean-crowd/acquire", `{"wait_ms":60000}`))
	waitFor(t, 10*time.Second, "the second detached", func() bool { return sidecar.Detached(s.srv) == d0+1 })
	// (the metrics polls are net/http's too: count the acquires answered)
	served, handed := sidecar.LeanCounts(s.srv)
	if served != served0+1 || handed < handed0+1 {
		t.Errorf("lean path: %d answered, %d handed; want 1 and at least 1", served-served0, handed-handed0)
	}
	s.release(h.LeaseID)
	resp, b := first.read("POST")
	l := leaseOf(t, resp, b)
	s.release(l.LeaseID)
	resp, b = second.read("POST")
	l = leaseOf(t, resp, b)
	if !resp.Close {
		t.Errorf("a detached answer without Connection: close")
	}
	s.release(l.LeaseID)
}

// TestLeanReadTimeoutFromHeadStart: the read timeout bounds a request from
// the moment its head began, body included, as net/http's ReadTimeout: a
// head that took 1.2 s to arrive leaves its body 0.8 s of a 2 s timeout,
// not another 2 s. The same sidecar without the lean path (net/http)
// answers alike.
func TestLeanReadTimeoutFromHeadStart(t *testing.T) {
	const rt = 2 * time.Second
	for _, leanOff := range []bool{false, true} {
		t.Run(fmt.Sprintf("leanOff=%v", leanOff), func(t *testing.T) {
			cfg := testConfig(t, testRoot(t), fmt.Sprintf("sc-lrt-%v", leanOff))
			start(t, cfg, func(o *sidecar.Options) { o.ReadTimeout, o.LeanPathOff = rt, leanOff })
			for _, second := range []bool{false, true} {
				c, err := net.Dial("unix", cfg.SocketPath)
				if err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(c)
				if second { // a first request answered (one the lean path serves), then the timed one on the same connection
					if _, err := io.WriteString(c, "DELETE /v1/leases/no-such-lease HTTP/1.1\r\nHost: baton\r\n\r\n"); err != nil {
						t.Fatal(err)
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil || resp.StatusCode != 404 {
						t.Fatalf("release of no lease: %v %v, want 404", resp, err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
				}
				t0 := time.Now()
				if _, err := io.WriteString(c, "POST /v1/locks/lrt/acquire HTTP/1.1\r\nHost: baton\r\n"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(1200 * time.Millisecond)
				if _, err := io.WriteString(c, "Content-Length: 100\r\n\r\n{"); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				resp, err := http.ReadResponse(br, nil)
				took := time.Since(t0)
				if err != nil {
					t.Fatalf("second=%v: no answer to a stalled body: %v", second, err)
				}
				b, _ := io.ReadAll(resp.Body)
				c.Close()
				if resp.StatusCode != 400 || !strings.Contains(string(b), `"field":"body"`) {
					t.Errorf("second=%v: stalled body: %d %s, want 400 naming the body", second, resp.StatusCode, b)
				}
				// from the head's start: about 2 s; from its end it would be 3.2 s
				if took < rt-100*time.Millisecond || took > rt+700*time.Millisecond {
					t.Errorf("second=%v: the stalled request was cut %v after its head began, want about %v", second, took, rt)
				}
			}
		})
	}
}
