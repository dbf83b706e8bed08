package sidecar_test

// Review of the lean path (lean.go): the same bytes sent to a sidecar with
// the lean path and to one without (Options.LeanPathOff) must be answered
// alike; callers that leave, stop, caps and panics on the lean path.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/sidecar"
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
