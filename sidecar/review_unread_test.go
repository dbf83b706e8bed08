//go:build linux

package sidecar_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
)

// Review of e6be742 (a grant whose answer the caller closed its connection
// without reading is released): attacks on its safety (a grant whose answer
// WAS read must never be released by it) and its liveness.

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

// unreadControl closes a connection with a grant's answer unread and waits
// for that lease's release: the sidecar has acted on the closes before it
// (they were closed earlier), so a lease still held after it was kept.
func unreadControl(t *testing.T, s *sc, obj string) {
	t.Helper()
	c := dialRaw(t, s)
	c.send(post("/v1/locks/"+obj+"/acquire", `{"lease_ms":60000}`))
	waitAnswers(t, c.c, "POST")
	time.Sleep(50 * time.Millisecond)
	c.c.Close()
	waitFor(t, 10*time.Second, "the control's unread grant released", func() bool { return s.leasesOn(obj) == 0 })
	time.Sleep(100 * time.Millisecond)
}

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
	unreadControl(t, s, "rv-opt-control")
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
	for i, tc := range []struct {
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
			unreadControl(t, s, fmt.Sprintf("rk-control-%d", i))
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
// leaves a later answer unread; the lease is kept. The same acquire with
// the grant unread is released.
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

	u := dialRaw(t, s)
	u.send(head("rx-unread"))
	waitFor(t, 10*time.Second, "100 Continue", func() bool { return len(peek(t, u.c)) >= len(cont) })
	u.send(body)
	waitFor(t, 10*time.Second, "the grant", func() bool { return s.leasesOn("rx-unread") == 1 })
	waitFor(t, 10*time.Second, "its answer", func() bool { return bytes.Contains(peek(t, u.c), []byte("lease_id")) })
	u.c.Close()
	waitFor(t, 10*time.Second, "the unread grant released", func() bool { return s.leasesOn("rx-unread") == 0 })
	time.Sleep(100 * time.Millisecond)
	if !s.leaseHeld(l.LeaseID) {
		t.Fatalf("lease %s released: its grant's answer was read whole", l.LeaseID)
	}
	s.release(l.LeaseID)
}

// TestReviewUnreadReentry: a re-entry whose answer the caller closed its
// connection without reading added a hold nobody knows of (reentry.go: one
// more hold, freed at zero), and the change does not note it (noteGrant is
// only in acquisition.lease): the holder of the first hold releases, is
// told released false (holds 1), and the object stays held for the
// lease's length. Noting the re-entry's lease would count that one hold
// down (leases.release counts holds), as the rest of the change does for a
// new lease (a liveness gap).
func TestReviewUnreadReentry(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	l := s.acquire("rr", `{"lease_ms":60000}`)
	r := dialRaw(t, s)
	r.send(post("/v1/locks/rr/acquire", `{"lease_id":"`+l.LeaseID+`"}`))
	waitAnswers(t, r.c, "POST")
	r.c.Close() // the re-entry's answer unread
	unreadControl(t, s, "rr-control")
	s.release(l.LeaseID) // the first (read) hold
	if s.leaseHeld(l.LeaseID) {
		s.release(l.LeaseID) // not left for the shutdown grace
		t.Fatalf("lease %s still held after its one known hold was released: the unread re-entry's hold is left", l.LeaseID)
	}
}

// closeAsGranted: a caller that closes just as its waited acquire (req,
// on the object rg) is granted, for rounds rounds (BATON_REVIEW_ROUNDS
// overrides), the instant of its close homing in on the answer's arrival
// (before it: the cancel or the failed write; after it: the unread
// release): no lease may be left holding the object (one of the three
// releases it; none panics; -race clean).
func closeAsGranted(t *testing.T, req string, rounds int) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	if n, err := strconv.Atoi(os.Getenv("BATON_REVIEW_ROUNDS")); err == nil {
		rounds = n
	}
	delay := time.Millisecond // from the holder's release to the caller's close
	for i := range rounds {
		h := s.acquire("rg", `{"lease_ms":60000}`)
		r := dialRaw(t, s)
		r.send(req)
		waitFor(t, 10*time.Second, "the acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
		done := make(chan struct{})
		go func() { defer close(done); s.release(h.LeaseID) }()
		time.Sleep(delay + time.Duration(rand.IntN(200))*time.Microsecond)
		// the close's instant homes in on the answer's arrival: later
		// when it had not come, earlier when it had
		if len(peek(t, r.c)) > 0 {
			delay = max(0, delay-150*time.Microsecond)
		} else {
			delay += 150 * time.Microsecond
		}
		r.c.Close()
		<-done
		var left []api.Lease
		noneLeft := func() bool {
			left = s.leasesOf("rg")
			return len(left) == 0
		}
		deadline := time.Now().Add(5 * time.Second)
		for !noneLeft() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if len(left) > 0 {
			for _, l := range left {
				s.release(l.LeaseID) // not left for the shutdown grace
			}
			t.Fatalf("round %d: lease %s left holding rg after its caller closed as it was granted (%d rounds)", i, left[0].LeaseID, rounds)
		}
	}
}

// leasesOf is the sidecar's leases on obj.
func (s *sc) leasesOf(obj string) []api.Lease {
	s.t.Helper()
	var list struct {
		Leases []api.Lease `json:"leases"`
	}
	if err := json.Unmarshal(s.mustCall(200, "GET", "/v1/leases", ""), &list); err != nil {
		s.t.Fatal(err)
	}
	var out []api.Lease
	for _, l := range list.Leases {
		if l.Object == obj {
			out = append(out, l)
		}
	}
	return out
}

// TestReviewUnreadCloseAsGrantedLean: closeAsGranted on the lean path (the
// write failure's release and the unread release side by side).
func TestReviewUnreadCloseAsGrantedLean(t *testing.T) {
	closeAsGranted(t, post("/v1/locks/rg/acquire", `{"wait_ms":60000,"lease_ms":60000}`), 40)
}

// TestReviewUnreadCloseAsGrantedNetHTTP: closeAsGranted on net/http's path
// (a chunked body). README (e6be742) says a caller that closes with its
// grant unread has it released "on either path"; but a caller whose close
// comes after the handler's check of its context (acquisition.lease) and
// before net/http writes the answer leaves nothing unread (the sidecar
// reads EOF, not ECONNRESET: the answer was not there yet), and net/http
// drops the failed write (EPIPE), so the lease holds the object for its
// whole length; the lean path releases it on the failed write (answer).
// Probabilistic: it failed in 7 runs of 8 here (60 or 100 rounds); releasing
// the noted grant on a failed write of the connection (peerConn.Write, as
// peerConn.Read does on ECONNRESET) made it pass 5 of 5.
func TestReviewUnreadCloseAsGrantedNetHTTP(t *testing.T) {
	closeAsGranted(t, "POST /v1/locks/rg/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n22\r\n{\"wait_ms\":60000,\"lease_ms\":60000}\r\n0\r\n\r\n", 100)
}
