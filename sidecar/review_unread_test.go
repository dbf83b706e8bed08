//go:build linux

package sidecar_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// Review of e6be742 (a grant whose answer the caller closed its connection
// without reading is released): attacks on its safety (a grant whose answer
// WAS read must never be released by it) and its liveness.
//
// (Its second review found that an answer unread cannot be told from one
// decoded with its last byte left, TestReviewUnread2DecoderClient: the
// release on a reset read was withdrawn, and a grant is given back only
// when its answer cannot be written (unwritten.go). The tests that a grant
// read whole is kept stay, as guards.)

// readWhole reads exactly the next complete answer (to method) off r.c, no
// byte more (no read-ahead buffer): the caller has then read that answer
// whole and nothing else.
func readWhole(t *testing.T, r *rawHTTP, method string) (*http.Response, []byte) {
	t.Helper()
	lens := waitAnswers(t, r.c, method)
	b := make([]byte, lens[0])
	if _, err := io.ReadFull(r.c, b); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// leaseHeld reports whether the lease id is still live (GET answers 200).
func (s *sc) leaseHeld(id string) bool {
	st, _ := s.call("GET", "/v1/leases/"+id, "")
	return st == 200
}

// settle gives the sidecar time to see a caller's close (nothing it does
// there may give a grant back: unwritten.go).
func settle() { time.Sleep(300 * time.Millisecond) }

// TestReviewUnreadOptionsStar: a caller reads the answer that granted its
// lease whole, then sends "OPTIONS * HTTP/1.1" on the same connection and
// closes it without reading that answer. net/http answers OPTIONS * itself
// (its globalOptionsHandler, unless DisableGeneralOptionsHandler) without
// calling the router, so newRequest never clears the note, and the reset
// read of the next request releases a lease whose grant was read: the
// holder goes on believing it holds the lock (a safety bug).
func TestReviewUnreadOptionsStar(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	r := dialRaw(t, s)
	r.send(post("/v1/locks/rv-opt/acquire", `{"lease_ms":60000}`))
	resp, b := readWhole(t, r, "POST")
	l := leaseOf(t, resp, b)
	r.send("OPTIONS * HTTP/1.1\r\nHost: baton\r\n\r\n")
	waitAnswers(t, r.c, "OPTIONS") // answered, not read
	r.c.Close()
	settle()
	if !s.leaseHeld(l.LeaseID) {
		t.Fatalf("lease %s released: its grant's answer was read whole; only a later OPTIONS * answer was left unread", l.LeaseID)
	}
	s.release(l.LeaseID)
}

// TestReviewUnreadReadGrantKept: a grant whose answer the caller read whole
// is kept whatever the caller does next on that connection, on either
// path: a request handed from the lean path to net/http (its answer
// unread), a renewal (unread), a malformed request (net/http's 400
// unread), a half-close, a set and a semaphore acquire followed by a
// request left unread, an Expect: 100-continue acquire (net/http: the
// interim answer and the grant read), a re-entry on another connection.
func TestReviewUnreadReadGrantKept(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	type step func(t *testing.T, r *rawHTTP, l api.Lease)
	unreadAfter := func(req, method string) step {
		return func(t *testing.T, r *rawHTTP, l api.Lease) {
			r.send(fmt.Sprintf(req, l.LeaseID))
			waitAnswers(t, r.c, method)
		}
	}
	for _, tc := range []struct {
		name, req string
		then      step
	}{
		{"lean then handed GET unread", post("/v1/locks/rk-0/acquire", `{"lease_ms":60000}`),
			unreadAfter("GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n%.0s", "GET")},
		{"lean then renew unread", post("/v1/locks/rk-1/acquire", `{"lease_ms":60000}`),
			unreadAfter("POST /v1/leases/%s/renew HTTP/1.1\r\nHost: baton\r\nContent-Length: 0\r\n\r\n", "POST")},
		{"lean then HTTP/1.0 GET unread", post("/v1/locks/rk-2/acquire", `{"lease_ms":60000}`),
			unreadAfter("GET /v1/leases/%s HTTP/1.0\r\nHost: baton\r\n\r\n", "GET")},
		{"lean then malformed (400 unread)", post("/v1/locks/rk-3/acquire", `{"lease_ms":60000}`),
			func(t *testing.T, r *rawHTTP, l api.Lease) {
				r.send("GARBAGE\r\n\r\n")
				waitFor(t, 10*time.Second, "the 400", func() bool { return bytes.Contains(peek(t, r.c), []byte("400")) })
			}},
		{"lean then half-close", post("/v1/locks/rk-4/acquire", `{"lease_ms":60000}`),
			func(t *testing.T, r *rawHTTP, l api.Lease) {
				if err := r.c.(*net.UnixConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if n, err := r.c.Read(make([]byte, 1)); err != io.EOF {
					t.Fatalf("after the half-close: %d, %v; want EOF", n, err)
				}
			}},
		{"net/http (chunked) then GET unread", "POST /v1/locks/rk-5/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n12\r\n{\"lease_ms\":60000}\r\n0\r\n\r\n",
			unreadAfter("GET /v1/leases/%s HTTP/1.1\r\nHost: baton\r\n\r\n", "GET")},
		{"set then GET unread", post("/v1/locks/acquire", `{"objects":["rk-6a","rk-6b"],"lease_ms":60000}`),
			unreadAfter("GET /v1/leases/%s HTTP/1.1\r\nHost: baton\r\n\r\n", "GET")},
		{"semaphore then GET unread", post("/v1/semaphores/rk-7/acquire", `{"permits":2,"lease_ms":60000}`),
			unreadAfter("GET /v1/leases/%s HTTP/1.1\r\nHost: baton\r\n\r\n", "GET")},
		{"re-entered elsewhere, then GET unread", post("/v1/locks/rk-8/acquire", `{"lease_ms":60000}`),
			func(t *testing.T, r *rawHTTP, l api.Lease) {
				o := dialRaw(t, s)
				o.send(post("/v1/locks/rk-8/acquire", `{"lease_id":"`+l.LeaseID+`"}`))
				resp, b := readWhole(t, o, "POST")
				leaseOf(t, resp, b)
				o.c.Close()
				r.send("GET /v1/leases/" + l.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\n")
				waitAnswers(t, r.c, "GET")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, s)
			r.send(tc.req)
			resp, b := readWhole(t, r, "POST")
			l := leaseOf(t, resp, b)
			tc.then(t, r, l)
			r.c.Close()
			settle()
			if !s.leaseHeld(l.LeaseID) {
				t.Fatalf("lease %s released: its grant's answer was read whole", l.LeaseID)
			}
			for s.leaseHeld(l.LeaseID) { // a re-entered one has two holds
				s.release(l.LeaseID)
			}
		})
	}
}

// TestReviewUnreadExpectContinue: an acquire with "Expect: 100-continue"
// (net/http's): the caller reads the interim 100 and the grant whole, then
// leaves a later answer unread; the lease is kept.
func TestReviewUnreadExpectContinue(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	body := `{"lease_ms":60000}`
	head := func(obj string) string {
		return fmt.Sprintf("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n"+
			"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", obj, len(body))
	}
	cont := "HTTP/1.1 100 Continue\r\n\r\n"
	r := dialRaw(t, s)
	r.send(head("rx-read"))
	waitFor(t, 10*time.Second, "100 Continue", func() bool { return len(peek(t, r.c)) >= len(cont) })
	got := make([]byte, len(cont))
	if _, err := io.ReadFull(r.c, got); err != nil || string(got) != cont {
		t.Fatalf("interim answer %q, %v", got, err)
	}
	r.send(body)
	resp, b := readWhole(t, r, "POST")
	l := leaseOf(t, resp, b)
	r.send("GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n")
	waitAnswers(t, r.c, "GET")
	r.c.Close()

	settle()
	if !s.leaseHeld(l.LeaseID) {
		t.Fatalf("lease %s released: its grant's answer was read whole", l.LeaseID)
	}
	s.release(l.LeaseID)
}
