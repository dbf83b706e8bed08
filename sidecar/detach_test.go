package sidecar_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// startDetaching runs a sidecar whose waiting acquires leave net/http from
// the first one, after 10 ms (detach.go; the default waits for many).
func startDetaching(t *testing.T) *sc {
	t.Helper()
	return startDetachAt(t, testConfig(t, testRoot(t), "n1"), 1, true)
}

// startDetachAt runs a sidecar with cfg whose waiting acquires detach from
// the waiters-th in flight, after 10 ms (waiters 0: never); leanOff: every
// connection on net/http (detaching is net/http's: the lean path's
// acquires wait on their connection's goroutine, lean.go).
func startDetachAt(t *testing.T, cfg props.Config, waiters int64, leanOff bool) *sc {
	t.Helper()
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: testLogger(t), LeanPathOff: leanOff})
	if err != nil {
		t.Fatal(err)
	}
	sidecar.SetDetach(srv, waiters, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	s := &sc{t: t, srv: srv, cfg: cfg, cancel: cancel, done: make(chan error, 1), hc: testenv.UnixHTTP(cfg.SocketPath)}
	go func() { s.done <- srv.Run(ctx) }()
	t.Cleanup(s.stop)
	waitFor(t, 20*time.Second, "sidecar ready", func() bool {
		st, _ := s.call("GET", "/readyz", "")
		return st == 200
	})
	return s
}

type answer struct {
	status int
	header http.Header
	close  bool
	body   []byte
	err    error
}

// acquireAsync sends an acquire with Go's stock client on a connection of
// its own and delivers its answer.
func detachedAcquire(s *sc, obj, body string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		hc := testenv.UnixHTTP(s.cfg.SocketPath)
		defer hc.CloseIdleConnections()
		resp, err := hc.Post("http://baton/v1/locks/"+obj+"/acquire", "application/json", strings.NewReader(body))
		if err != nil {
			ch <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- answer{status: resp.StatusCode, header: resp.Header, close: resp.Close, body: b, err: err}
	}()
	return ch
}

// TestDetachedAcquire: an acquire that waits after it left net/http is
// answered like any other — the grant (and a refusal) with its status,
// headers and body, then "Connection: close" — to Go's stock client and to
// curl; the lease it got works.
func TestDetachedAcquire(t *testing.T) {
	s := startDetaching(t)
	h := s.acquire("d", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv) // the holder's, if its grant took more than 10 ms
	w := detachedAcquire(s, "d", `{"wait_ms":30000,"lease_ms":60000}`)
	waitFor(t, 10*time.Second, "the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
	s.release(h.LeaseID)
	a := <-w
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("detached acquire: %d %s %v", a.status, a.body, a.err)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || !a.close {
		t.Errorf("detached answer: Content-Type %q, Connection: close %v; want application/json, true", ct, a.close)
	}
	l := decodeLease(t, a.body)
	if l.LeaseID == "" || l.Object != "d" {
		t.Fatalf("detached grant: %+v", l)
	}
	// a refusal: the wait ends while detached
	r := detachedAcquire(s, "d", `{"wait_ms":300}`)
	a = <-r
	if a.err != nil || a.status != http.StatusLocked {
		t.Fatalf("detached wait that times out: %d %s %v; want 423", a.status, a.body, a.err)
	}
	if e := decodeError(t, a.body); e.Kind != api.InstanceLockException || e.Object != "d" {
		t.Errorf("detached refusal: %+v", e)
	}
	if n := sidecar.Detached(s.srv) - n0; n != 2 {
		t.Errorf("%d acquires detached, want 2", n)
	}
	// curl, the waiter: detached, then granted
	if _, err := exec.LookPath("curl"); err == nil {
		out := make(chan []byte, 1)
		go func() {
			b, err := exec.Command("curl", "-sS", "-i", "--unix-socket", s.cfg.SocketPath, "-H", "Content-Type: application/json",
				"-d", `{"wait_ms":30000}`, "http://baton/v1/locks/d/acquire").CombinedOutput()
			if err != nil {
				b = append(b, []byte(err.Error())...)
			}
			out <- b
		}()
		waitFor(t, 10*time.Second, "curl detached", func() bool { return sidecar.Detached(s.srv) == n0+3 })
		s.release(l.LeaseID)
		b := <-out
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b))), nil)
		if err != nil {
			t.Fatalf("curl: %v: %s", err, b)
		}
		body, _ := io.ReadAll(resp.Body)
		var cl api.Lease
		if resp.StatusCode != 200 || json.Unmarshal(body, &cl) != nil || cl.LeaseID == "" {
			t.Fatalf("curl: %s", b)
		}
		s.release(cl.LeaseID)
	} else {
		s.release(l.LeaseID)
	}
}

// TestDetachedCallerLeaves: a caller that closes its connection while its
// acquire waits detached ends the wait: its node goes, the sidecar counts
// no waiter, and the next acquire is granted at once when the holder
// releases.
func TestDetachedCallerLeaves(t *testing.T) {
	s := startDetaching(t)
	conn := rawConn(t)
	h := s.acquire("c", `{"lease_ms":60000}`)
	n0 := sidecar.Detached(s.srv)
	c, err := net.Dial("unix", s.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"wait_ms":60000}`
	fmt.Fprintf(c, "POST /v1/locks/c/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	waitFor(t, 10*time.Second, "the waiter detached", func() bool { return sidecar.Detached(s.srv) == n0+1 })
	kids := func() int {
		k, _, err := conn.Children(s.cfg.LockRoot + "/c")
		if err != nil {
			t.Fatal(err)
		}
		return len(k)
	}
	waitFor(t, 10*time.Second, "the waiter's node", func() bool { return kids() == 3 }) // privateLock, the holder's node, the waiter's
	c.Close()
	waitFor(t, 10*time.Second, "the waiter's node gone", func() bool { return kids() == 2 })
	waitFor(t, 10*time.Second, "no acquire waiting", func() bool {
		var hz api.Health
		_, b := s.call("GET", "/healthz", "")
		return json.Unmarshal(b, &hz) == nil && hz.ZooKeeper.Waiting == 0
	})
	s.release(h.LeaseID)
	st, b := s.call("POST", "/v1/locks/c/acquire", `{"wait_ms":0}`)
	if st != 200 {
		t.Fatalf("acquire after the detached caller left: %d %s", st, b)
	}
	s.release(decodeLease(t, b).LeaseID)
}
