//go:build linux

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
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
)

// peek returns what c has received and not yet read, leaving it there
// (MSG_PEEK): the test sees the sidecar's answers without taking them.
func peek(t *testing.T, c net.Conn) []byte {
	t.Helper()
	rc, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n := 0
	if err := rc.Control(func(fd uintptr) {
		var rerr error
		n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if rerr != nil {
			n = 0
		}
	}); err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// answers parses the complete HTTP answers in b (to requests with methods)
// and returns the length in bytes of each.
func answers(b []byte, methods ...string) []int {
	var lens []int
	br := bufio.NewReader(bytes.NewReader(b))
	read := 0
	for _, m := range methods {
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			return lens
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			return lens
		}
		end := len(b) - br.Buffered()
		lens = append(lens, end-read)
		read = end
	}
	return lens
}

// waitAnswers waits until c has received complete answers to methods,
// unread, and returns their lengths.
func waitAnswers(t *testing.T, c net.Conn, methods ...string) []int {
	t.Helper()
	var lens []int
	waitFor(t, 20*time.Second, fmt.Sprintf("%d answers received", len(methods)), func() bool {
		lens = answers(peek(t, c), methods...)
		return len(lens) == len(methods)
	})
	return lens
}

// leasesOn is how many of the sidecar's leases are on obj (GET /v1/leases).
func (s *sc) leasesOn(obj string) int {
	s.t.Helper()
	var list struct {
		Leases []api.Lease `json:"leases"`
	}
	if err := json.Unmarshal(s.mustCall(200, "GET", "/v1/leases", ""), &list); err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, l := range list.Leases {
		if l.Object == obj {
			n++
		}
	}
	return n
}

// TestWrittenGrantKept: a grant whose answer was written to the caller's
// socket stays granted when the caller closes without reading it, on the
// lean path and on net/http's (a chunked body is net/http's): the sidecar
// cannot tell an answer never read from one its caller decoded and then
// closed with a byte of it left (TestReviewUnread2DecoderClient), and
// giving back a lease its caller holds is two holders (unwritten.go).
func TestWrittenGrantKept(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	for _, tc := range []struct {
		name, req string
		handed    bool
	}{
		{"lean", post("/v1/locks/unread-lean/acquire", `{"lease_ms":60000}`), false},
		{"net/http", "POST /v1/locks/unread-nethttp/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n12\r\n{\"lease_ms\":60000}\r\n0\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := "unread-" + strings.ReplaceAll(tc.name, "/", "")
			_, handed0 := sidecar.LeanCounts(s.srv)
			r := dialRaw(t, s)
			r.send(tc.req)
			waitAnswers(t, r.c, "POST")
			if _, handed := sidecar.LeanCounts(s.srv); (handed > handed0) != tc.handed {
				t.Fatalf("handed to net/http: %v, want %v", handed > handed0, tc.handed)
			}
			r.c.Close() // the answer unread
			settle()
			if n := s.leasesOn(obj); n != 1 {
				t.Fatalf("%d leases on %s after its caller closed with the grant's answer written, unread; want 1", n, obj)
			}
			var list api.LeaseList
			if err := json.Unmarshal(s.mustCall(200, "GET", "/v1/leases", ""), &list); err != nil {
				t.Fatal(err)
			}
			for _, l := range list.Leases {
				if l.Object == obj {
					s.release(l.LeaseID)
				}
			}
		})
	}
}

// TestReadGrantKept: a grant whose answer the caller read is the caller's,
// whatever it does next: closing the connection (EOF), or closing it with a
// later answer unread (a pipelined request after the acquire) keeps it.
func TestReadGrantKept(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))

	// read, then closed
	read := dialRaw(t, s)
	read.send(post("/v1/locks/kept-read/acquire", `{"lease_ms":60000}`))
	resp, b := read.read("POST")
	kept := []string{leaseOf(t, resp, b).LeaseID}

	// an acquire and a /healthz sent together; the acquire's answer read,
	// the /healthz's not
	piped := dialRaw(t, s)
	piped.send(post("/v1/locks/kept-piped/acquire", `{"lease_ms":60000}`) + "GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n")
	lens := waitAnswers(t, piped.c, "POST", "GET")
	first := make([]byte, lens[0])
	if _, err := io.ReadFull(piped.c, first); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(first)), &http.Request{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	kept = append(kept, leaseOf(t, resp, b).LeaseID)

	read.c.Close()
	piped.c.Close()
	settle()
	for _, obj := range []string{"kept-read", "kept-piped"} {
		if n := s.leasesOn(obj); n != 1 {
			t.Errorf("%d leases on %s after its caller read the grant and closed, want 1", n, obj)
		}
	}
	for _, id := range kept {
		s.release(id)
	}
}
