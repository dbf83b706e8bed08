//go:build linux

package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
)

// Review of bcb9b3b (a grant's answer noted on its connection until
// anything else is written; its write failing, or a reset read while it is
// the last thing written, gives the grant back). The reset read's release was withdrawn
// after TestReviewUnread2DecoderClient (unwritten.go); the tests that a grant
// read whole is kept stay, as guards.

// chunked is an acquire of obj with body in a chunked request: net/http
// serves it (the lean path takes no Transfer-Encoding).
func chunked(obj, body string) string {
	return fmt.Sprintf("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", obj, len(body), body)
}

// bigBody is an acquire body whose answer is over 4 KiB: net/http writes
// it in two writes (its 4 KiB connection buffer flushed, then the rest).
func bigBody() string {
	return `{"lease_ms":60000,"info":"` + strings.Repeat("i", 4000) + `"}`
}

// TestReviewUnread2BigAnswerRead: the same big answers read whole are kept,
// the caller closing at once (EOF) or after leaving a later answer unread.
func TestReviewUnread2BigAnswerRead(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	for _, tc := range []struct {
		name, obj, req string
		later          bool
	}{
		{"lean, closed", "bigr-0", post("/v1/locks/bigr-0/acquire", bigBody()), false},
		{"net/http, closed", "bigr-1", chunked("bigr-1", bigBody()), false},
		{"lean, later unread", "bigr-2", post("/v1/locks/bigr-2/acquire", bigBody()), true},
		{"net/http, later unread", "bigr-3", chunked("bigr-3", bigBody()), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, s)
			r.send(tc.req)
			resp, b := readWhole(t, r, "POST")
			l := leaseOf(t, resp, b)
			if tc.later {
				r.send("GET /v1/leases/" + l.LeaseID + " HTTP/1.1\r\nHost: baton\r\n\r\n")
				waitAnswers(t, r.c, "GET")
			}
			r.c.Close()
			settle()
			if !s.leaseHeld(l.LeaseID) {
				t.Fatalf("lease %s released: its grant's answer was read whole", l.LeaseID)
			}
			s.release(l.LeaseID)
		})
	}
}

// TestReviewUnread2DecoderClient: a Go caller decoding the grant with
// json.NewDecoder(resp.Body).Decode and closing the body — the common
// idiom — has the whole lease, but the decoder stops at the closing brace
// (it invents the byte after it rather than block for it), so the answer's
// trailing newline (httpapi.WriteJSON) is left unread; Go's transport,
// which did not see the body's EOF, closes the connection. When that
// newline is not yet in the transport's 4 KiB read buffer (the brace is
// the stream's 4096th byte) it is unread in the socket: the sidecar's read
// fails with ECONNRESET and gives back a lease its caller decoded and
// holds — a safety bug. The info's length is varied around the one that
// puts the brace there (the answer's other fields vary by a few bytes).
func TestReviewUnread2DecoderClient(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"))
	// the answer's length with an info of 1000 bytes, measured
	r := dialRaw(t, s)
	r.send(post("/v1/locks/dec-cal/acquire", `{"lease_ms":60000,"info":"`+strings.Repeat("i", 1000)+`"}`))
	lens := waitAnswers(t, r.c, "POST")
	resp, b := readWhole(t, r, "POST")
	s.release(leaseOf(t, resp, b).LeaseID)
	r.c.Close()
	target := 1000 + 4097 - lens[0] // the info length whose answer's brace is byte 4096 (its newline the 4097th)

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", s.cfg.SocketPath)
	}}}
	defer hc.CloseIdleConnections()
	// passes over the window: one info length in it puts the brace at
	// byte 4096, unless the other fields' lengths jump over it
	for pass := range 5 {
		type got struct {
			l    api.Lease
			info int
		}
		var held []got
		for d := -8; d <= 8; d++ {
			obj := fmt.Sprintf("dec-%d-%d", pass, d+8)
			body := `{"lease_ms":60000,"info":"` + strings.Repeat("i", target+d) + `"}`
			resp, err := hc.Post("http://baton/v1/locks/"+obj+"/acquire", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var l api.Lease
			err = json.NewDecoder(resp.Body).Decode(&l)
			resp.Body.Close()
			if err != nil || l.LeaseID == "" {
				t.Fatalf("info %d: not a lease (%v)", target+d, err)
			}
			held = append(held, got{l, target + d})
		}
		settle()
		for _, g := range held {
			if !s.leaseHeld(g.l.LeaseID) {
				t.Errorf("pass %d: lease %s (info of %d bytes) released: its caller decoded the whole lease, only the answer's trailing newline was unread",
					pass, g.l.LeaseID, g.info)
				continue
			}
			s.release(g.l.LeaseID)
		}
		if t.Failed() {
			return
		}
	}
}

// shutRead shuts c's reading side: the sidecar's next write to it fails
// (EPIPE), while the sidecar sees no hang-up (c can still send).
func shutRead(t *testing.T, c net.Conn) {
	t.Helper()
	rc, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Shutdown(int(fd), syscall.SHUT_RD) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}

// TestReviewUnread2WriteFails: a waiting acquire whose caller stops reading
// (shutdown(SHUT_RD): the sidecar sees no hang-up and the wait goes on) is
// granted; the grant's answer cannot be written (EPIPE) and the grant is
// given back, on the lean path, on net/http's (lean path off) and on the
// detached path (its hijacked connection must be the *peerConn, and the
// detached context must carry it) — each a deterministic write failure,
// now that the lean and detached paths' own releases are gone.
func TestReviewUnread2WriteFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		detach  bool
		leanOff bool
		reentry bool
	}{
		{name: "lean"},
		{name: "nethttp", leanOff: true},
		{name: "detached", detach: true, leanOff: true},
		{name: "lean re-entry", reentry: true},
		{name: "nethttp re-entry", leanOff: true, reentry: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, testRoot(t), "n1")
			var s *sc
			if tc.detach {
				s = startDetachAt(t, cfg, 1, tc.leanOff)
			} else {
				s = start(t, cfg, func(o *sidecar.Options) { o.LeanPathOff = tc.leanOff })
			}
			if tc.reentry {
				l := s.acquire("wf", `{"lease_ms":60000}`)
				r := dialRaw(t, s)
				shutRead(t, r.c)
				r.send(post("/v1/locks/wf/acquire", `{"lease_id":"`+l.LeaseID+`"}`))
				// the re-entry's answer failed: the hold it added is given
				// back, so the one release known ends the lease
				time.Sleep(300 * time.Millisecond)
				s.release(l.LeaseID)
				if s.leaseHeld(l.LeaseID) {
					s.release(l.LeaseID)
					t.Fatalf("lease %s still held after its one known hold was released: the re-entry whose answer could not be written kept its hold", l.LeaseID)
				}
				return
			}
			h := s.acquire("wf", `{"lease_ms":60000}`)
			n0 := sidecar.Detached(s.srv) // the holder's, if its grant took over 10 ms
			r := dialRaw(t, s)
			r.send(post("/v1/locks/wf/acquire", `{"wait_ms":60000,"lease_ms":60000}`))
			waitFor(t, 10*time.Second, "the acquire waits", func() bool { return s.metric("baton_acquires_waiting", "type=foreground") == 1 })
			if tc.detach {
				waitFor(t, 10*time.Second, "the acquire detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
			}
			shutRead(t, r.c)
			time.Sleep(50 * time.Millisecond)
			if s.metric("baton_acquires_waiting", "type=foreground") != 1 {
				t.Fatal("the acquire stopped waiting at the caller's SHUT_RD")
			}
			s.release(h.LeaseID)
			waitFor(t, 10*time.Second, "the grant whose answer could not be written given back", func() bool {
				return s.metric("baton_acquires_waiting", "type=foreground") == 0 && s.leasesOn("wf") == 0
			})
		})
	}
}

// TestReviewUnread2LaterAnswerRace: on net/http's path its background read
// is pending while a later answer's last write goes out (finishRequest
// flushes before abortPendingRead). A caller that read its grant whole and
// closes the instant a later answer lands makes that read fail with
// ECONNRESET; if it fails between the later write's return and
// peerConn.wrote's ending the note, readFailed gives back the grant whose
// answer was read. The window is the few instructions after c.io.Write
// (wider on a loaded node: the writer preempted there), so this passes on
// bcb9b3b; a mutant that sleeps there (5 ms) fails it in round 0, and
// ending a written note before writing (in peerConn.Write, before
// c.io.Write) makes the same mutant pass.
func TestReviewUnread2LaterAnswerRace(t *testing.T) {
	s := start(t, testConfig(t, testRoot(t), "n1"), func(o *sidecar.Options) { o.LeanPathOff = true })
	for i := range 20 {
		r := dialRaw(t, s)
		r.send(post("/v1/locks/lr/acquire", `{"lease_ms":60000}`))
		resp, b := readWhole(t, r, "POST")
		l := leaseOf(t, resp, b)
		r.send("GET /healthz HTTP/1.1\r\nHost: baton\r\n\r\n")
		deadline := time.Now().Add(10 * time.Second)
		for len(peek(t, r.c)) == 0 && time.Now().Before(deadline) {
		}
		r.c.Close() // the later answer unread, the instant it lands
		time.Sleep(20 * time.Millisecond)
		settle()
		if !s.leaseHeld(l.LeaseID) {
			t.Fatalf("round %d: lease %s released: its grant's answer was read whole, only a later answer was unread", i, l.LeaseID)
		}
		s.release(l.LeaseID)
	}
}
