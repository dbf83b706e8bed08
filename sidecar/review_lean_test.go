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
