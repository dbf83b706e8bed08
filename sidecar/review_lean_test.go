package sidecar_test

// Review of the lean path (lean.go): the same bytes sent to a sidecar with
// the lean path and to one without (Options.LeanPathOff) must be answered
// alike; callers that leave, stop, caps and panics on the lean path.

import (
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
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
