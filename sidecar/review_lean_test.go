package sidecar_test

// Review of the lean path (lean.go): the same bytes sent to a sidecar with
// the lean path and to one without (Options.LeanPathOff) must be answered
// alike; callers that leave, stop, caps and panics on the lean path.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/batonhq/baton/testenv"
)

// startLean runs a sidecar (the lean path on) whose stop does not wait
// long for the leases its test leaves held.
func startLean(t *testing.T, opts ...func(*sidecar.Options)) *sc {
	t.Helper()
	cfg := testConfig(t, testRoot(t), "n1")
	cfg.ShutdownGrace = time.Second
	return start(t, cfg, opts...)
}

// leanOutcome sends req on a fresh connection to s and returns what came
// back: each answer's status ("close" appended when it closes the
// connection), then "EOF" when the sidecar closed the connection or
// "open" when it still waited for more within wait.
func leanOutcome(t *testing.T, s *sc, req string, wait time.Duration) string {
	t.Helper()
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []string
	for {
		_ = c.SetReadDeadline(time.Now().Add(wait))
		if _, err := br.Peek(1); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				out = append(out, "open")
			} else {
				out = append(out, "EOF")
			}
			return strings.Join(out, " ")
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			out = append(out, "bad answer: "+err.Error())
			return strings.Join(out, " ")
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		o := fmt.Sprint(resp.StatusCode)
		if resp.Close {
			o += "/close"
		}
		out = append(out, o)
	}
}

// leanPair is a sidecar with the lean path and one without, on lock roots
// of their own.
func leanPair(t *testing.T) (lean, off *sc) {
	t.Helper()
	cfg := testConfig(t, testRoot(t)+"/lean", "n1")
	cfg.ShutdownGrace = time.Second
	lean = start(t, cfg)
	cfg = testConfig(t, testRoot(t)+"/off", "n1")
	cfg.ShutdownGrace = time.Second
	off = start(t, cfg, func(o *sidecar.Options) { o.LeanPathOff = true })
	return lean, off
}

// leanDiff sends each request to both sidecars and reports the requests
// answered differently. Each request names the object {o}, replaced by a
// name of its own.
func leanDiff(t *testing.T, cases map[string]string) {
	t.Helper()
	lean, off := leanPair(t)
	i := 0
	for name, req := range cases {
		i++
		obj := fmt.Sprintf("d%d", i)
		req = strings.ReplaceAll(req, "{o}", obj)
		got := leanOutcome(t, lean, req, 2*time.Second)
		want := leanOutcome(t, off, req, 2*time.Second)
		if got != want {
			t.Errorf("%s: lean path answers %q, net/http %q\n%q", name, got, want, req)
		} else {
			t.Logf("%s: %s", name, got)
		}
	}
}

const (
	leanAcq  = "POST /v1/locks/{o}/acquire HTTP/1.1\r\n"
	leanHost = "Host: baton\r\n"
	leanNext = "GET /healthz HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n"
)

// goroutinesWith counts the goroutines whose stack has all of frames.
func goroutinesWith(frames ...string) int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
next:
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, f := range frames {
			if !strings.Contains(g, f) {
				continue next
			}
		}
		n++
	}
	return n
}

// TestReviewLeanStopUnblocksWrite: a caller that pipelines requests and
// never reads the answers leaves the lean path's goroutine blocked writing
// to it. The sidecar's stop must end that connection, as http.Server.Close
// (which closes every connection) ends net/http's: Run returns, and no
// lean connection's goroutine (nor its descriptor, nor its place in the
// connection caps) is left behind.
func TestReviewLeanStopUnblocksWrite(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reqs := strings.Repeat("DELETE /v1/leases/nope HTTP/1.1\r\nHost: baton\r\n\r\n", 3000)
	go func() { _, _ = io.WriteString(c, reqs) }() // the caller never reads
	waitFor(t, 20*time.Second, "the lean path blocked writing", func() bool {
		return goroutinesWith("sidecar.(*leanConn).answer", "sidecar.(*peerConn).Write", "waitWrite") == 1
	})
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return")
	}
	waitFor(t, 5*time.Second, "the lean connection's goroutine ends", func() bool {
		return goroutinesWith("sidecar.(*leanConn).serve") == 0
	})
}

// leanWant sends each request to s on a connection of its own and checks
// what comes back (leanOutcome) against what net/http answers (checked
// with LeanPathOff by TestReviewLeanDiffHeads).
func leanWant(t *testing.T, s *sc, want string, cases map[string]string) {
	t.Helper()
	i := 0
	for name, req := range cases {
		i++
		req = strings.ReplaceAll(req, "{o}", fmt.Sprintf("%s-%d", strings.ReplaceAll(name, " ", "-"), i))
		if got := leanOutcome(t, s, req, 2*time.Second); got != want {
			t.Errorf("%s: %q, want %q (net/http's)\n%q", name, got, want, req)
		}
	}
}

// TestReviewLeanLengthMinusZero: "Content-Length: -0" is not a length
// (net/http: 400, and the connection closes); the lean path read it as 0
// and served the request, then read what follows as the next request.
func TestReviewLeanLengthMinusZero(t *testing.T) {
	s := startLean(t)
	leanWant(t, s, "400/close EOF", map[string]string{
		"minus zero":      leanAcq + leanHost + "Content-Length: -0\r\n\r\n" + leanNext,
		"minus zero zero": leanAcq + leanHost + "Content-Length: -00\r\n\r\n" + leanNext,
	})
}

// TestReviewLeanHostValidated: a Host net/http finds malformed is a 400
// (httpguts.ValidHostHeader); the lean path served the request.
func TestReviewLeanHostValidated(t *testing.T) {
	s := startLean(t)
	leanWant(t, s, "400/close EOF", map[string]string{
		"space":     leanAcq + "Host: bat on\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"quote":     leanAcq + "Host: \"baton\"\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"slash":     leanAcq + "Host: baton/x\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"non-ASCII": leanAcq + "Host: bät\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"tab":       leanAcq + "Host: ba\tton\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
	})
}

// TestReviewLeanEmptyLineAfterPost: net/http ignores up to 4 CR or LF
// bytes before the request that follows a POST (RFC 9112 §2.2: old
// clients send CRLF after a POST's body). On the lean path they made the
// next request go to net/http as the connection's first, where they are
// not ignored: a 400, and the connection closes.
func TestReviewLeanEmptyLineAfterPost(t *testing.T) {
	s := startLean(t)
	leanWant(t, s, "200 200/close EOF", map[string]string{
		"CRLF":      leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}\r\n" + leanNext,
		"LF":        leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}\n" + leanNext,
		"two CRLFs": leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}\r\n\r\n" + leanNext,
		"no body":   leanAcq + leanHost + "\r\n\r\n" + leanNext,
	})
	// sent after the answer: the POST's answer came first
	r := dialRaw(t, s)
	r.send(strings.ReplaceAll(leanAcq, "{o}", "later") + leanHost + "Content-Length: 2\r\n\r\n{}")
	resp, b := r.read("POST")
	leaseOf(t, resp, b)
	r.send("\r\n" + leanNext)
	if resp, b := r.read("GET"); resp.StatusCode != 200 {
		t.Errorf("CRLF sent after the POST's answer, then a request: %d %s", resp.StatusCode, b)
	}
}

// TestReviewLeanHeadTimeout: net/http gives a request's head
// readHeaderTimeout (10 s) once it starts, and a new connection's first
// head the same from its accept; a caller that sends part of a head, or
// nothing, is then cut off. The lean path waited for the head as long as
// for an idle connection's next request (2 to 4 minutes), so a caller
// could hold connections (and their place in the per-uid connection cap)
// 12 to 24 times as long with partial heads.
func TestReviewLeanHeadTimeout(t *testing.T) {
	s := startLean(t)
	silent := dialRaw(t, s)
	partialFirst := dialRaw(t, s)
	partialFirst.send(strings.ReplaceAll(leanAcq, "{o}", "ht1") + leanHost)
	partialNext := dialRaw(t, s)
	partialNext.send(strings.ReplaceAll(leanAcq, "{o}", "ht2") + leanHost + "Content-Length: 2\r\n\r\n{}")
	resp, b := partialNext.read("POST")
	leaseOf(t, resp, b)
	partialNext.send(strings.ReplaceAll(leanAcq, "{o}", "ht3"))
	t0 := time.Now()
	done := make(chan string, 3)
	for name, r := range map[string]*rawHTTP{"silent": silent, "partial first head": partialFirst, "partial next head": partialNext} {
		go func() {
			_ = r.c.SetReadDeadline(time.Now().Add(25 * time.Second))
			_, err := r.br.ReadByte()
			done <- fmt.Sprintf("%s: %v after %v", name, err, time.Since(t0).Round(time.Second))
		}()
	}
	for range 3 {
		if got := <-done; !strings.Contains(got, "EOF") {
			t.Errorf("%s; want EOF (net/http closes it after %v)", got, 10*time.Second)
		}
	}
}

// TestReviewLeanDiffHeads: request heads on the lean path's routes that
// net/http rejects, or reads otherwise than a plain reading would, are
// answered by the lean path as net/http answers them (each followed by a
// request that closes the connection, so that a request smuggled in the
// first one's body shows).
func TestReviewLeanDiffHeads(t *testing.T) {
	leanDiff(t, map[string]string{
		"plain":              leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"no length":          leanAcq + leanHost + "\r\n" + leanNext,
		"length +2":          leanAcq + leanHost + "Content-Length: +2\r\n\r\n{}" + leanNext,
		"length -0":          leanAcq + leanHost + "Content-Length: -0\r\n\r\n" + leanNext,
		"length 0x2":         leanAcq + leanHost + "Content-Length: 0x2\r\n\r\n{}" + leanNext,
		"length 02":          leanAcq + leanHost + "Content-Length: 02\r\n\r\n{}" + leanNext,
		"length empty":       leanAcq + leanHost + "Content-Length: \r\n\r\n" + leanNext,
		"length list":        leanAcq + leanHost + "Content-Length: 2, 2\r\n\r\n{}" + leanNext,
		"length twice same":  leanAcq + leanHost + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"length spaces":      leanAcq + leanHost + "Content-Length:   2  \r\n\r\n{}" + leanNext,
		"length tab":         leanAcq + leanHost + "Content-Length:\t2\r\n\r\n{}" + leanNext,
		"length lowercase":   leanAcq + leanHost + "content-length: 2\r\n\r\n{}" + leanNext,
		"length 1 smuggles":  leanAcq + leanHost + "Content-Length: 1\r\n\r\n{}" + leanNext,
		"length short":       leanAcq + leanHost + "Content-Length: 5\r\n\r\n{}" + leanNext,
		"CL and TE":          leanAcq + leanHost + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + leanNext,
		"TE identity":        leanAcq + leanHost + "Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"two hosts":          leanAcq + leanHost + "host: other\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"host space":         leanAcq + "Host: bat on\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"host quote":         leanAcq + "Host: \"baton\"\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"host slash":         leanAcq + "Host: baton/x\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"host non-ASCII":     leanAcq + "Host: bät\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"host empty":         leanAcq + "Host:\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"host port":          leanAcq + "Host: baton:80\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"name space":         leanAcq + leanHost + "X-A b: c\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"name space colon":   leanAcq + leanHost + "Content-Length : 2\r\n\r\n{}" + leanNext,
		"name empty":         leanAcq + leanHost + ": c\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"name non-ASCII":     leanAcq + leanHost + "X-ä: c\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"value NUL":          leanAcq + leanHost + "X-A: b\x00c\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"value CR":           leanAcq + leanHost + "X-A: b\rc\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"value DEL":          leanAcq + leanHost + "X-A: b\x7fc\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"value obs-text":     leanAcq + leanHost + "X-A: b\xffc\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"obs-fold":           leanAcq + leanHost + "X-A: b\r\n c\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"line without colon": leanAcq + leanHost + "X-A\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"first header space": leanAcq + " Host: baton\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"bare LF in value":   leanAcq + leanHost + "X-A: b\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"bare CR end":        leanAcq + leanHost + "Content-Length: 2\r\r\n\r\n{}" + leanNext,
		"lowercase method":   "post /v1/locks/{o}/acquire HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"absolute form":      "POST http://baton/v1/locks/{o}/acquire HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"two spaces":         "POST  /v1/locks/{o}/acquire HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"target space":       "POST /v1/locks/{o} x/acquire HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"target CTL":         "POST /v1/locks/{o}\x01/acquire HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"target fragment":    "POST /v1/locks/{o}/acquire#f HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"target bad escape":  "POST /v1/locks/{o}%zz/acquire HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"target query":       "POST /v1/locks/{o}/acquire?x=1 HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"HTTP/1.10":          "POST /v1/locks/{o}/acquire HTTP/1.10\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"HTTP/2.0":           "POST /v1/locks/{o}/acquire HTTP/2.0\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"HTTP/1.0":           "POST /v1/locks/{o}/acquire HTTP/1.0\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"lowercase proto":    "POST /v1/locks/{o}/acquire http/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"trailing space":     "POST /v1/locks/{o}/acquire HTTP/1.1 \r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"leading CRLF":       "\r\n" + leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"conn close":         leanAcq + leanHost + "Connection: close\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"conn CLOSE":         leanAcq + leanHost + "Connection: CLOSE\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"conn keep, close":   leanAcq + leanHost + "Connection: keep-alive\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"conn list":          leanAcq + leanHost + "Connection: keep-alive, close\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"conn upgrade":       leanAcq + leanHost + "Connection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"expect":             leanAcq + leanHost + "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"expect other":       leanAcq + leanHost + "Expect: something\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"delete":             "DELETE /v1/leases/nope HTTP/1.1\r\n" + leanHost + "\r\n" + leanNext,
		"delete with body":   "DELETE /v1/leases/nope HTTP/1.1\r\n" + leanHost + "Content-Length: 3\r\n\r\nabc" + leanNext,
		"renew bad id":       "POST /v1/leases/nope/renew HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"CRLF after POST":    leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}\r\n" + leanNext,
		"LF after POST":      leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}\n" + leanNext,
		"5 CRLF after POST":  leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}\r\n\r\n\r\n" + leanNext,
		"CRLF after DELETE":  "DELETE /v1/leases/nope HTTP/1.1\r\n" + leanHost + "\r\n\r\n" + leanNext,
		"length -00":         leanAcq + leanHost + "Content-Length: -00\r\n\r\n" + leanNext,
		"host tab":           leanAcq + "Host: ba\tton\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"host IPv6":          leanAcq + "Host: [::1]:80\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"long body":          leanAcq + leanHost + "Content-Length: 3000\r\n\r\n{\"info\":\"" + strings.Repeat("i", 2989) + "\"}" + leanNext,
		"head at buffer":     leanAcq + leanHost + "X-Pad: " + strings.Repeat("p", 1990) + "\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"bad JSON":           leanAcq + leanHost + "Content-Length: 2\r\n\r\n{x" + leanNext,
		"forbidden query":    "POST /v1/locks/{o}/acquire?nope=1 HTTP/1.1\r\n" + leanHost + "Content-Length: 2\r\n\r\n{}" + leanNext,
		"then chunked":       leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}" + "POST /v1/locks/{o}-2/acquire HTTP/1.1\r\n" + leanHost + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" + leanNext,
		"then HTTP/1.0":      leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}" + "POST /v1/locks/{o}-2/acquire HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}" + leanNext,
		"then bad":           leanAcq + leanHost + "Content-Length: 2\r\n\r\n{}" + "POST /v1/locks/{o}-2/acquire HTTP/1.1\r\n" + leanHost + "Content-Length: -0\r\n\r\n" + leanNext,
	})
}

// TestReviewLeanHandOver: requests handed to net/http mid-connection are
// answered in order with those the lean path answered before them, and
// every later request on the connection is net/http's: pipelined in one
// write, a head that comes in parts (one that turns out not to be the
// lean path's once its rest arrives), and a request sent while a lean
// acquire waits (kept for after its answer: the connection stays open).
func TestReviewLeanHandOver(t *testing.T) {
	s := startLean(t)
	served0, handed0 := sidecar.LeanCounts(s.srv)

	r := dialRaw(t, s)
	r.send(post("/v1/locks/ho-a/acquire", `{}`) + "GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n" + post("/v1/locks/ho-b/acquire", `{}`))
	resp, b := r.read("POST")
	la := leaseOf(t, resp, b)
	if resp, b := r.read("GET"); resp.StatusCode != 200 || !strings.Contains(string(b), "zookeeper") {
		t.Fatalf("healthz after a lean acquire: %d %s", resp.StatusCode, b)
	}
	resp, b = r.read("POST")
	lb := leaseOf(t, resp, b)
	r.send("DELETE /v1/leases/" + la.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\nDELETE /v1/leases/" + lb.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\n")
	for range 2 {
		if resp, b := r.read("DELETE"); resp.StatusCode != 200 {
			t.Fatalf("release after the hand-over: %d %s", resp.StatusCode, b)
		}
	}
	if served, handed := sidecar.LeanCounts(s.srv); served-served0 != 1 || handed-handed0 != 1 {
		t.Errorf("lean path answered %d and handed %d; want 1 and 1", served-served0, handed-handed0)
	}

	// a head in parts, handed over
	r = dialRaw(t, s)
	r.send("GET /hea")
	time.Sleep(50 * time.Millisecond)
	r.send("lthz HTTP/1.1\r\nHo")
	time.Sleep(50 * time.Millisecond)
	r.send("st: baton\r\n\r\n")
	if resp, b := r.read("GET"); resp.StatusCode != 200 {
		t.Fatalf("healthz in parts: %d %s", resp.StatusCode, b)
	}
	// an acquire's head in parts that turns out chunked
	r = dialRaw(t, s)
	r.send("POST /v1/locks/ho-c/acquire HTTP/1.1\r\nHost: baton\r\n")
	time.Sleep(50 * time.Millisecond)
	r.send("Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	resp, b = r.read("POST")
	lc := leaseOf(t, resp, b)
	s.release(lc.LeaseID)
	if _, handed := sidecar.LeanCounts(s.srv); handed-handed0 != 3 {
		t.Errorf("%d connections handed over, want 3", handed-handed0)
	}

	// a request sent while a lean acquire waits: answered after it
	h := s.acquire("ho-w", `{"lease_ms":60000}`)
	r = dialRaw(t, s)
	served0, handed0 = sidecar.LeanCounts(s.srv)
	r.send(post("/v1/locks/ho-w/acquire", `{"wait_ms":30000}`))
	waitFor(t, 10*time.Second, "the acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
	r.send("GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	s.release(h.LeaseID)
	resp, b = r.read("POST")
	lw := leaseOf(t, resp, b)
	if resp.Close {
		t.Errorf("the waiting acquire's answer closes the connection")
	}
	if resp, b := r.read("GET"); resp.StatusCode != 200 {
		t.Fatalf("request sent while the acquire waited: %d %s", resp.StatusCode, b)
	}
	s.release(lw.LeaseID)
	if served, handed := sidecar.LeanCounts(s.srv); served-served0 != 1 || handed-handed0 != 1 {
		t.Errorf("lean path answered %d and handed %d; want 1 and 1", served-served0, handed-handed0)
	}
}

// TestReviewLeanCallerHalfCloses: a caller that closes its sending side
// while its acquire waits on the lean path ends the wait, as net/http's
// background read does: it is answered (not granted), no lease is left,
// its node goes, and the object goes at once to the next caller when the
// holder releases.
func TestReviewLeanCallerHalfCloses(t *testing.T) {
	s := startLean(t)
	h := s.acquire("hc", `{"lease_ms":60000}`)
	kids := childCount(t, s, "hc")
	r := dialRaw(t, s)
	r.send(post("/v1/locks/hc/acquire", `{"wait_ms":60000,"lease_ms":60000}`))
	waitFor(t, 10*time.Second, "the acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
	waitFor(t, 10*time.Second, "its node", func() bool { return childCount(t, s, "hc") == kids+1 })
	if err := r.c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, b := r.read("POST")
	if resp.StatusCode == 200 {
		t.Fatalf("granted after the caller half-closed: %s", b)
	}
	waitFor(t, 10*time.Second, "the wait ends", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 0 })
	waitFor(t, 10*time.Second, "its node goes", func() bool { return childCount(t, s, "hc") == kids })
	if n := s.leaseCount(); n != 1 {
		t.Errorf("%d leases, want the holder's alone", n)
	}
	s.release(h.LeaseID)
	l := s.acquire("hc", `{"wait_ms":0}`)
	s.release(l.LeaseID)
}

// TestReviewLeanHangupBeforeRead: a caller that sends its request and
// closes at once (its hanging up may be seen before the request is read)
// leaves nothing: an acquire that would wait leaves no waiter nor node, an
// acquire of a free object no lease (cancelled, or released when its
// answer cannot be written); a release sent that way is done (its
// ZooKeeper write does not depend on the caller staying).
func TestReviewLeanHangupBeforeRead(t *testing.T) {
	s := startLean(t)
	h := s.acquire("hb", `{"lease_ms":60000}`)
	kids := childCount(t, s, "hb")
	for i := range 5 {
		c := rawAcquire(t, s, "hb", `{"wait_ms":60000,"lease_ms":60000}`)
		c.Close()
		f := rawAcquire(t, s, fmt.Sprintf("hb-free-%d", i), `{"lease_ms":60000}`)
		f.Close()
	}
	waitFor(t, 10*time.Second, "no acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 0 })
	waitFor(t, 10*time.Second, "no waiter's node", func() bool { return childCount(t, s, "hb") == kids })
	waitFor(t, 10*time.Second, "no lease but the holder's", func() bool { return s.leaseCount() == 1 })
	for i := range 5 {
		l := s.acquire(fmt.Sprintf("hb-free-%d", i), `{"wait_ms":0}`)
		s.release(l.LeaseID)
	}

	// a release sent, then the caller gone at once
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "DELETE /v1/leases/"+h.LeaseID+" HTTP/1.1\r\nHost: baton\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitFor(t, 10*time.Second, "the released lease gone", func() bool { return s.leaseCount() == 0 })
	l := s.acquire("hb", `{"wait_ms":5000}`) // its node gone too
	s.release(l.LeaseID)
}

// TestReviewLeanDrain: during the stop's drain the lean path answers as
// net/http did: a waiting acquire and a new one get 503 ShuttingDown, the
// holder renews (state draining) and releases on its kept-alive
// connection, which then closes; a connection handed to net/http is
// closed too; Run returns and no lean connection's goroutine is left.
func TestReviewLeanDrain(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "n1")
	cfg.ShutdownGrace = 30 * time.Second
	s := start(t, cfg)
	holder := dialRaw(t, s)
	holder.send(post("/v1/locks/dr/acquire", `{"lease_ms":60000}`))
	resp, b := holder.read("POST")
	l := leaseOf(t, resp, b)
	waiter := dialRaw(t, s)
	waiter.send(post("/v1/locks/dr/acquire", `{"wait_ms":60000}`))
	handed := dialRaw(t, s)
	handed.send("GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n")
	if resp, _ := handed.read("GET"); resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	waitFor(t, 10*time.Second, "the acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })

	s.srv.Drain()
	resp, b = waiter.read("POST")
	if resp.StatusCode != 503 || !strings.Contains(string(b), api.ShuttingDown) {
		t.Errorf("waiting acquire at the drain: %d %s, want 503 %s", resp.StatusCode, b, api.ShuttingDown)
	}
	holder.send(post("/v1/locks/dr-new/acquire", `{}`))
	resp, b = holder.read("POST")
	if resp.StatusCode != 503 || !strings.Contains(string(b), api.ShuttingDown) {
		t.Errorf("new acquire during the drain: %d %s, want 503 %s", resp.StatusCode, b, api.ShuttingDown)
	}
	holder.send(post("/v1/leases/"+l.LeaseID+"/renew", `{}`))
	resp, b = holder.read("POST")
	if rl := leaseOf(t, resp, b); rl.State != api.StateDraining {
		t.Errorf("renewal during the drain: state %q, want %q", rl.State, api.StateDraining)
	}
	holder.send("DELETE /v1/leases/" + l.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\n")
	if resp, b := holder.read("DELETE"); resp.StatusCode != 200 {
		t.Errorf("release during the drain: %d %s", resp.StatusCode, b)
	}
	select { // the last lease released: the drain ends, Run returns
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return once the last lease was released")
	}
	for name, r := range map[string]*rawHTTP{"holder": holder, "waiter": waiter, "handed": handed} {
		_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := r.br.ReadByte(); err != io.EOF {
			t.Errorf("%s's connection after Run returned: %v, want EOF", name, err)
		}
	}
	waitFor(t, 5*time.Second, "no lean connection's goroutine", func() bool { return goroutinesWith("sidecar.(*leanConn).serve") == 0 })
}

// TestReviewLeanManyWaiters: waiting acquires on the lean path cost one
// goroutine each (the connection's; net/http's two, detached ones one,
// TestDetachedManyWaiters); when the callers leave every wait ends, every
// node goes, and the goroutines and descriptors come back. (Below the
// 256 acquires in flight from which new ones go to net/http: crowded.)
func TestReviewLeanManyWaiters(t *testing.T) {
	const n = 200
	cfg := testConfig(t, testRoot(t), "n1")
	cfg.ZKSessionTimeout = 15 * time.Second
	s := start(t, cfg)
	h := s.acquire("m", `{"lease_ms":60000}`)
	kids := childCount(t, s, "m")
	g0, f0 := runtime.NumGoroutine(), openFDs(t)
	served0, _ := sidecar.LeanCounts(s.srv)
	var cs []net.Conn
	for range n {
		cs = append(cs, rawAcquire(t, s, "m", `{"wait_ms":120000}`))
	}
	waitFor(t, 60*time.Second, "the waiters' nodes", func() bool { return childCount(t, s, "m") == kids+n })
	if served, _ := sidecar.LeanCounts(s.srv); served-served0 < n {
		t.Errorf("%d requests on the lean path, want %d", served-served0, n)
	}
	waitFor(t, 30*time.Second, "at most 1.5 goroutines per waiter", func() bool {
		return float64(runtime.NumGoroutine()-g0)/n <= 1.5
	})
	t.Logf("%d waiters: goroutines %d -> %d, fds %d -> %d", n, g0, runtime.NumGoroutine(), f0, openFDs(t))
	for _, c := range cs {
		c.Close()
	}
	waitFor(t, 60*time.Second, "every waiter's node gone", func() bool { return childCount(t, s, "m") == kids })
	waitFor(t, 20*time.Second, "no acquire waiting", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 0 })
	back := func() bool { return runtime.NumGoroutine() <= g0+10 && openFDs(t) <= f0+5 }
	for end := time.Now().Add(20 * time.Second); !back() && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	if !back() {
		t.Errorf("goroutines %d (were %d), fds %d (were %d)", runtime.NumGoroutine(), g0, openFDs(t), f0)
	}
	s.release(h.LeaseID)
	l := s.acquire("m", `{"wait_ms":0}`)
	s.release(l.LeaseID)
}

// TestReviewLeanPanic: a handler that panics on the lean path closes the
// connection unanswered, as net/http does (http.ErrAbortHandler too); the
// sidecar goes on serving, and the connection's place in the caps is
// given back (callers under another uid: root, an admin, is not counted;
// with root and curl only). Both with the lean path and without.
func TestReviewLeanPanic(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("LeanPathOff=%v", off), func(t *testing.T) {
			cfg := testConfig(t, testRoot(t), "n1")
			cfg.MaxConnectionsPerUID = 1
			cfg.ShutdownGrace = time.Second
			asApp := os.Getuid() == 0
			if _, err := exec.LookPath("curl"); err != nil {
				asApp = false
			}
			if asApp {
				openSocket(t, &cfg)
			}
			srv, err := sidecar.New(cfg, sidecar.Options{Logger: testLogger(t), LeanPathOff: off})
			if err != nil {
				t.Fatal(err)
			}
			sidecar.WrapHandler(srv, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					switch r.URL.Path {
					case "/v1/locks/panic/acquire":
						panic("review: a handler's panic")
					case "/v1/locks/abort/acquire":
						panic(http.ErrAbortHandler)
					}
					h.ServeHTTP(w, r)
				})
			})
			ctx, cancel := context.WithCancel(context.Background())
			s := &sc{t: t, srv: srv, cfg: cfg, cancel: cancel, done: make(chan error, 1), hc: testenv.UnixHTTP(cfg.SocketPath)}
			go func() { s.done <- srv.Run(ctx) }()
			t.Cleanup(s.stop)
			waitFor(t, 20*time.Second, "sidecar ready", func() bool { st, _ := s.call("GET", "/readyz", ""); return st == 200 })
			for _, obj := range []string{"panic", "abort"} {
				if got := leanOutcome(t, s, post("/v1/locks/"+obj+"/acquire", `{}`), 10*time.Second); got != "EOF" {
					t.Fatalf("%s: %q, want the connection closed unanswered", obj, got)
				}
			}
			l := s.acquire("after", `{}`)
			s.release(l.LeaseID)
			if !asApp {
				return
			}
			// uid 1001 may have one connection: each panic gives it back
			for i := range 4 {
				obj := []string{"panic", "abort"}[i%2]
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				cmd, out := uid(1001).curlCmd(t, ctx, cfg.SocketPath, "POST", "/v1/locks/"+obj+"/acquire", `{}`)
				err := cmd.Run()
				cancel()
				if err == nil || !strings.Contains(out.String(), "Empty reply") {
					t.Fatalf("%s as uid 1001: %v %s, want curl's empty reply", obj, err, out)
				}
			}
			st, body := uid(1001).call(t, cfg.SocketPath, "POST", "/v1/locks/after-app/acquire", `{}`)
			if st != 200 {
				t.Fatalf("acquire as uid 1001 after its panicked requests: %d %s", st, body)
			}
		})
	}
}

// TestReviewLeanCapsGivenBack: a caller under another uid whose acquire
// waits on the lean path holds its connection and its waiter in the
// per-uid caps; when it leaves (killed while waiting) its hanging up ends
// the wait and gives both back: the uid connects and waits again, where
// it was refused 429 before. (Root and curl only.)
func TestReviewLeanCapsGivenBack(t *testing.T) {
	needRoot(t)
	cfg := testConfig(t, testRoot(t), "n1")
	cfg.ShutdownGrace = time.Second
	cfg.MaxConnectionsPerUID, cfg.MaxWaitersPerUID = 1, 1
	openSocket(t, &cfg)
	s := start(t, cfg)
	sock := cfg.SocketPath
	s.acquire("cg", `{"lease_ms":60000}`)
	app := uid(1001)
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		cmd, _ := app.curlCmd(t, ctx, sock, "POST", "/v1/locks/cg/acquire", `{"wait_ms":60000}`)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "uid 1001 waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
		st, body := app.call(t, sock, "GET", "/v1/locks/cg", "")
		wantRefused(t, fmt.Sprintf("round %d: a second connection of uid 1001", round), st, body, 429, api.TooManyRequests, "sidecar.max.connections.per.uid")
		cancel() // kills curl: its connection closes
		_ = cmd.Wait()
		waitFor(t, 10*time.Second, "the wait ends", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 0 })
		// its connection's place is given back once the lean path closed it
		var st2 int
		var body2 []byte
		waitFor(t, 10*time.Second, "uid 1001 connects again", func() bool {
			st2, body2 = app.call(t, sock, "POST", "/v1/locks/cg/acquire", `{"wait_ms":50}`)
			return st2 != 429
		})
		if st2 != 423 || !strings.Contains(string(body2), api.InstanceLockException) {
			t.Errorf("round %d: uid 1001's short wait after it left: %d %s, want it to time out", round, st2, body2)
		}
	}
}

// TestReviewLeanStopUnderLoad: a stop while callers cycle acquire, renew
// and release on kept-alive lean connections (some pipelining, some
// leaving mid-request): Run returns, every connection ends, no lean
// connection's goroutine is left (and the race detector sees nothing).
func TestReviewLeanStopUnderLoad(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "n1")
	cfg.ShutdownGrace = 2 * time.Second
	s := start(t, cfg)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("unix", cfg.SocketPath)
				if err != nil {
					return // the socket is gone: stopped
				}
				br := bufio.NewReader(c)
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				for k := range 20 {
					obj := fmt.Sprintf("ld-%d", i)
					if _, err := io.WriteString(c, post("/v1/locks/"+obj+"/acquire", `{"wait_ms":1000}`)); err != nil {
						break
					}
					if i%4 == 3 && k == 10 {
						break // leaves mid-request
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						break
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						if resp.Close {
							break
						}
						continue
					}
					id := leaseIDOf(b)
					req := post("/v1/leases/"+id+"/renew", `{}`) + "DELETE /v1/leases/" + id + " HTTP/1.1\r\nHost: baton\r\n\r\n"
					if i%2 == 0 { // pipelined
						if _, err := io.WriteString(c, req); err != nil {
							break
						}
					}
					ok := true
					for n, m := range []string{"POST", "DELETE"} {
						if i%2 == 1 {
							part := post("/v1/leases/"+id+"/renew", `{}`)
							if n == 1 {
								part = "DELETE /v1/leases/" + id + " HTTP/1.1\r\nHost: baton\r\n\r\n"
							}
							if _, err := io.WriteString(c, part); err != nil {
								ok = false
								break
							}
						}
						resp, err := http.ReadResponse(br, &http.Request{Method: m})
						if err != nil {
							ok = false
							break
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					if !ok {
						break
					}
				}
				c.Close()
			}
		}()
	}
	served0, _ := sidecar.LeanCounts(s.srv)
	waitFor(t, 20*time.Second, "requests on the lean path", func() bool {
		served, _ := sidecar.LeanCounts(s.srv)
		return served-served0 >= 200
	})
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return")
	}
	served, handed := sidecar.LeanCounts(s.srv)
	t.Logf("lean path: %d requests answered, %d connections handed over", served, handed)
	close(stop)
	wg.Wait()
	waitFor(t, 5*time.Second, "no lean connection's goroutine", func() bool { return goroutinesWith("sidecar.(*leanConn).serve") == 0 })
}

// leaseIDOf is the lease id in an acquire's answer ("" if none).
func leaseIDOf(b []byte) string {
	var l api.Lease
	_ = json.Unmarshal(b, &l)
	return l.LeaseID
}
