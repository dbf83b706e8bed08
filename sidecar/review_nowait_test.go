package sidecar_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
)

// Review of the answer-first release (DELETE /v1/leases/{id}?wait=false,
// commit 7dbc9b0): what it claims beyond TestReleaseNoWait, where its write
// meets the sidecar's shutdown, a loss of the grant, a re-entry, a
// preemption or a revocation, and many releases and re-acquires at once.

// kidsOf lists the children of p ("" on a missing node).
// grantedAfter waits up to wait for the acquire answered on ch (who names
// it in failures) and wants it granted after the ended lease l: a 200 with
// a greater token, and l's node gone from objPath by then.
func grantedAfter(t *testing.T, ch <-chan acquired, wait time.Duration, who string, l api.Lease, conn *zk.Conn, objPath string) api.Lease {
	t.Helper()
	var g acquired
	select {
	case g = <-ch:
	case <-time.After(wait):
		t.Fatalf("%s: not granted within %v", who, wait)
	}
	if g.status != 200 {
		t.Fatalf("%s: %d %s", who, g.status, g.body)
	}
	gl := decodeLease(t, g.body)
	if gl.Token <= l.Token {
		t.Errorf("%s: granted token %d, not above the released %d", who, gl.Token, l.Token)
	}
	if kids := kidsOf(t, conn, objPath); slices.Contains(kids, l.Node) {
		t.Errorf("%s: granted while the released holder's node %s is still there: %v", who, l.Node, kids)
	}
	return gl
}

func kidsOf(t *testing.T, conn *zk.Conn, p string) []string {
	t.Helper()
	kids, _, err := conn.Children(p)
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("children of %s: %v", p, err)
	}
	return kids
}

// TestReviewNowaitShutdownInFlight: the sidecar is shut down (Run's
// context cancelled: the SIGTERM drain) with a no-wait release whose write
// cannot reach ZooKeeper (the proxy holds it): cancelled right after the
// release ("release-then-stop"), or the holder releases during the drain
// ("stop-then-release"). The drain has no lease left to wait for; Run must
// still return nil (the background release neither hangs it nor leaks:
// goleak runs in TestMain), and the lock is freed when the write lands or
// the session ends: another sidecar's waiter is granted then, never while
// the released holder's node is there, with a greater token. On both
// protocols.
func TestReviewNowaitShutdownInFlight(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		for _, order := range []string{"release-then-stop", "stop-then-release"} {
			t.Run(proto+"/"+order, func(t *testing.T) {
				root := testRoot(t)
				conn := rawConn(t)
				cfg, p := proxiedConfig(t, root, "sd-a")
				cfg.LockProtocol = proto
				a := start(t, cfg)
				bcfg := testConfig(t, root, "sd-b")
				bcfg.LockProtocol = proto
				b := start(t, bcfg)
				objPath := path.Join(root, "sd")

				l := a.acquire("sd", `{"lease_ms":60000}`)
				before := len(kidsOf(t, conn, objPath))
				other := acquireAsync(b, "sd", `{"wait_ms":30000}`)
				waitFor(t, 10*time.Second, "sd-b queued", func() bool { return len(kidsOf(t, conn, objPath)) > before })

				if order == "stop-then-release" {
					a.cancel() // the drain: it waits for the holder
					waitFor(t, 10*time.Second, "the lease draining", func() bool {
						st, raw := a.call("GET", "/v1/leases/"+l.LeaseID, "")
						return st == 200 && decodeLease(t, raw).State == api.StateDraining
					})
				}
				p.HoldUpstream()
				nowaitRelease(t, a, l)
				a.cancel()
				select {
				case err := <-a.done:
					a.done <- err // for the cleanup's stop
					if err != nil {
						t.Fatalf("Run returned %v after a shutdown with a release in flight, want nil", err)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("Run did not return within 30 s of the cancel with a no-wait release in flight")
				}
				select {
				case g := <-other:
					t.Fatalf("sd-b answered before the held release could land or the session end: %d %s", g.status, g.body)
				default:
				}
				p.Heal()
				gl := grantedAfter(t, other, 30*time.Second, "sd-b after the shutdown (the lock of the shut-down sidecar freed)", l, conn, objPath)
				b.release(gl.LeaseID)
			})
		}
	}
}

// TestReviewNowaitIsARelease: the answer-first release is the holder's
// release, not a vanish: a waiter on another sidecar with a lock-delay of
// ten minutes (it waits that long after a holder that vanished without
// releasing) is granted within its 8 s wait once the write lands, with a
// greater token. On both protocols.
func TestReviewNowaitIsARelease(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		t.Run(proto, func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			acfg, bcfg := testConfig(t, root, "ir-a"), testConfig(t, root, "ir-b")
			acfg.LockProtocol, bcfg.LockProtocol = proto, proto
			a, b := start(t, acfg), start(t, bcfg)
			objPath := path.Join(root, "ir")

			l := a.acquire("ir", `{"lease_ms":60000}`)
			before := len(kidsOf(t, conn, objPath))
			other := acquireAsync(b, "ir", `{"wait_ms":8000,"lock_delay_ms":600000}`)
			waitFor(t, 10*time.Second, "ir-b queued", func() bool { return len(kidsOf(t, conn, objPath)) > before })
			nowaitRelease(t, a, l)
			g := <-other
			if g.status != 200 {
				t.Fatalf("the waiter with a lock-delay after the no-wait release: %d %s, want 200 (a release, not a vanish)", g.status, g.body)
			}
			gl := decodeLease(t, g.body)
			if gl.Token <= l.Token {
				t.Errorf("granted token %d, not above the released %d", gl.Token, l.Token)
			}
			b.release(gl.LeaseID)
		})
	}
}

// TestReviewNowaitLostInFlight: the grant is lost (an operator deletes its
// privateLock) while a no-wait release's write is held back. When the
// write lands and finds the lock gone, the lease id has already been
// answered "ended" (202): it must go on answering as a released lease
// (404 NoNode on GET, renew and DELETE, as the README says), not turn into
// a lost one afterwards; and the holder's node is cleaned up (nothing
// left in ZooKeeper).
func TestReviewNowaitLostInFlight(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	cfg, p := proxiedConfig(t, root, "lost-a")
	var lb logBuf
	a := start(t, cfg, withLog(&lb))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	objPath := path.Join(root, "lf")

	l := a.acquire("lf", `{"lease_ms":60000}`)
	time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
	p.HoldUpstream()
	nowaitRelease(t, a, l)
	if err := conn.Delete(objPath+"/privateLock", -1); err != nil { // the operator
		t.Fatalf("delete privateLock: %v", err)
	}
	p.Heal()
	// The background release has found the lock lost (its own log line):
	// whatever it does to the lease id is done.
	waitFor(t, 10*time.Second, "the background release done", func() bool {
		return len(lb.lines("a release answered before its write found the lock already lost")) > 0
	})
	for _, c := range []struct{ method, suffix, body string }{
		{"GET", "", ""}, {"POST", "/renew", "{}"}, {"DELETE", "", ""}, {"DELETE", "?wait=false", ""},
	} {
		st, raw := a.call(c.method, "/v1/leases/"+l.LeaseID+c.suffix, c.body)
		if st != 404 || decodeError(t, raw).Kind != api.NoNode {
			t.Errorf("%s of the lease answered 202 (released), after its write found the lock lost: %d %s, want 404 NoNode",
				c.method+" "+c.suffix, st, raw)
		}
	}
	waitFor(t, 10*time.Second, "the holder's node cleaned up", func() bool { return !slices.Contains(kidsOf(t, conn, objPath), l.Node) })
	if n := a.metric("baton_leases_total", "result=released"); n != 1 {
		t.Errorf("baton_leases_total{result=released} = %v, want 1", n)
	}
}

// TestReviewNowaitSessionExpiredInFlight: the release's write is held back
// until the sidecar's session has expired on the server (no request of it
// arrives, pings included). Another sidecar's waiter is granted once the
// session ends (its nodes gone), with a greater token; after the heal the
// lease id still answers 404 (released), and the same sidecar, on a new
// session, acquires the object again with a greater token; nothing is left
// in ZooKeeper.
func TestReviewNowaitSessionExpiredInFlight(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	cfg, p := proxiedConfig(t, root, "se-a")
	a := start(t, cfg)
	b := start(t, testConfig(t, root, "se-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	objPath := path.Join(root, "se")

	l := a.acquire("se", `{"lease_ms":60000}`)
	before := len(kidsOf(t, conn, objPath))
	other := acquireAsync(b, "se", `{"wait_ms":30000}`)
	waitFor(t, 10*time.Second, "se-b queued", func() bool { return len(kidsOf(t, conn, objPath)) > before })
	p.HoldUpstream()
	nowaitRelease(t, a, l)
	gl := grantedAfter(t, other, 30*time.Second, "se-b (the held holder's session ended)", l, conn, objPath)
	p.Heal()
	b.release(gl.LeaseID)
	waitFor(t, 20*time.Second, "se-a ready again (a new session)", func() bool {
		st, _ := a.call("GET", "/readyz", "")
		return st == 200
	})
	if st, body := a.call("GET", "/v1/leases/"+l.LeaseID, ""); st != 404 || decodeError(t, body).Kind != api.NoNode {
		t.Errorf("the ?wait=false-released lease after its session expired: %d %s, want 404 NoNode (released)", st, body)
	}
	again := a.acquire("se", `{"wait_ms":20000}`)
	if again.Token <= gl.Token {
		t.Errorf("se-a's acquire on its new session: token %d, not above %d", again.Token, gl.Token)
	}
	nowaitRelease(t, a, again)
}

// TestReviewNowaitReentryRace: a no-wait release of a lease's only hold
// races a re-entry of the same lease, many times. Either the re-entry came
// first (200, holds 2; the release then counts one down: 200, holds 1,
// not releasing, and the lease stays held) or the release did (202; the
// re-entry is refused and the lease is gone). Never both: a re-entered
// holder must not be told it holds a lease whose lock is being freed. The
// next grant of the object always has a greater token.
func TestReviewNowaitReentryRace(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "re-a"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	var last int64
	reentered, released := 0, 0
	for i := range 30 {
		l := a.acquire("rr", `{"lease_ms":60000,"wait_ms":10000}`)
		if l.Token <= last {
			t.Fatalf("round %d: token %d, not above %d", i, l.Token, last)
		}
		last = l.Token
		var wg sync.WaitGroup
		var rst, dst int
		var rraw, draw []byte
		wg.Go(func() { rst, rraw = a.call("POST", "/v1/locks/rr/acquire", `{"lease_id":"`+l.LeaseID+`"}`) })
		wg.Go(func() { dst, draw = a.call("DELETE", "/v1/leases/"+l.LeaseID+"?wait=false", "") })
		wg.Wait()
		switch {
		case rst == 200:
			reentered++
			// holds 2, or 1 if the release counted one down before the
			// re-entry's answer was rendered
			if rl := decodeLease(t, rraw); rl.Holds < 1 || rl.Holds > 2 || rl.Token != l.Token || rl.State != api.StateHeld {
				t.Fatalf("round %d: re-entry = %+v, want held, holds 2 (or 1), token %d", i, rl, l.Token)
			}
			if dst != 200 {
				t.Fatalf("round %d: re-entered (200), and the release answered %d %s: want 200 holds 1", i, dst, draw)
			}
			if r := decodeRelease(t, draw); r.Released || r.Releasing || r.Holds != 1 {
				t.Fatalf("round %d: release after the re-entry = %+v, want one hold counted down (holds 1, not releasing)", i, r)
			}
			if g := decodeLease(t, a.mustCall(200, "GET", "/v1/leases/"+l.LeaseID, "")); g.State != api.StateHeld || g.Holds != 1 {
				t.Fatalf("round %d: the re-entered lease = %+v, want held, holds 1", i, g)
			}
			nowaitRelease(t, a, l)
		case dst == 202:
			released++
			if rst == 200 || rst/100 != 4 {
				t.Fatalf("round %d: released (202), and the re-entry answered %d %s: want a 4xx refusal", i, rst, rraw)
			}
			if e := decodeError(t, rraw); e.Kind != api.NoNode && e.Field != "lease_id" {
				t.Fatalf("round %d: re-entry of the released lease: %+v, want NoNode or a 400 naming lease_id", i, e)
			}
			if st, raw := a.call("GET", "/v1/leases/"+l.LeaseID, ""); st != 404 {
				t.Fatalf("round %d: the released lease: %d %s, want 404", i, st, raw)
			}
		default:
			t.Fatalf("round %d: re-entry %d %s, release %d %s", i, rst, rraw, dst, draw)
		}
	}
	t.Logf("re-entry first: %d, release first: %d", reentered, released)
}

// TestReviewNowaitReentryBetweenSteps: TestReviewNowaitReentryRace's
// narrow interleaving made deterministic (SplitReleaseNoWait): the
// DELETE ?wait=false's releaseHold sees one hold and drops l.mu; a
// re-entry then gets 200, holds 2 and a valid_until; the rest of the
// DELETE must count one hold down (200, holds 1, not releasing) and free
// nothing: another sidecar's try-once acquire is refused, and the lease
// is still held.
func TestReviewNowaitReentryBetweenSteps(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "rs-a"))
	b := start(t, testConfig(t, root, "rs-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	l := a.acquire("rs", `{"lease_ms":60000}`)
	rest := sidecar.SplitReleaseNoWait(a.srv, l.LeaseID)
	re := a.acquire("rs", `{"lease_id":"`+l.LeaseID+`"}`)
	if re.Holds != 2 {
		t.Fatalf("re-entry between the release's steps = %+v, want holds 2", re)
	}
	r, err := rest()
	if err != nil || r.Released || r.Releasing || r.Holds != 1 {
		t.Fatalf("the rest of the ?wait=false release after a re-entry = %+v, %v: want one hold counted down (holds 1, not releasing)", r, err)
	}
	if st, body := b.call("POST", "/v1/locks/rs/acquire", `{"wait_ms":0}`); st != 423 {
		t.Errorf("another sidecar's try-once acquire while the re-entered hold lives: %d %s, want 423", st, body)
		if st == 200 {
			b.release(decodeLease(t, body).LeaseID)
		}
	}
	if g := decodeLease(t, a.mustCall(200, "GET", "/v1/leases/"+l.LeaseID, "")); g.State != api.StateHeld || g.Holds != 1 {
		t.Errorf("the re-entered lease = %+v, want held, holds 1", g)
	}
	nowaitRelease(t, a, l)
}

// boundNowaitCaller is a process P that, on one connection to the socket
// (argv[1]), acquires "pb" bound to itself, re-enters it and releases one
// hold with ?wait=false; acquires "pc" bound to itself and releases it
// with ?wait=false; prints the answers as one JSON object and exits at
// once.
const boundNowaitCaller = `
import http.client, json, os, socket, sys
class C(http.client.HTTPConnection):
    def __init__(self, p):
        super().__init__("sidecar")
        self.p = p
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.p)
c = C(sys.argv[1])
def call(m, u, b=None):
    c.request(m, u, body=b)
    r = c.getresponse()
    return [r.status, json.loads(r.read() or b"null")]
out = {}
out["l1"] = call("POST", "/v1/locks/pb/acquire", '{"lease_ms":60000,"bind":"process"}')
i1 = out["l1"][1]["lease_id"]
out["re"] = call("POST", "/v1/locks/pb/acquire", '{"lease_id":"%s"}' % i1)
out["d1"] = call("DELETE", "/v1/leases/%s?wait=false" % i1)
out["l2"] = call("POST", "/v1/locks/pc/acquire", '{"lease_ms":60000,"bind":"process"}')
out["d2"] = call("DELETE", "/v1/leases/%s?wait=false" % out["l2"][1]["lease_id"])
sys.stdout.write(json.dumps(out))
sys.stdout.flush()
os._exit(0)
`

// TestReviewNowaitBoundCallerExits: a process-bound caller releases with
// ?wait=false and exits at once. The lease released last (202) stays
// released: 404, not 410 "process exited", whatever the exit watch does
// while its write is on its way; the lease with a hold left after a
// ?wait=false of one hold (200, holds 1) ends with the process (410
// "process exited"). Both locks are then granted to another sidecar
// with greater tokens, and nothing is left in ZooKeeper.
func TestReviewNowaitBoundCallerExits(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "pb-a"))
	b := start(t, testConfig(t, root, "pb-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	raw, err := exec.Command(py, "-c", boundNowaitCaller, a.cfg.SocketPath).Output()
	if err != nil {
		t.Fatalf("python: %v %s", err, raw)
	}
	var out map[string][2]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("caller's answers: %s (%v)", raw, err)
	}
	status := func(k string) string { return string(out[k][0]) }
	for k, want := range map[string]string{"l1": "200", "re": "200", "d1": "200", "l2": "200", "d2": "202"} {
		if status(k) != want {
			t.Fatalf("caller's %s: %s %s, want %s", k, status(k), out[k][1], want)
		}
	}
	l1, l2 := decodeLease(t, out["l1"][1]), decodeLease(t, out["l2"][1])
	if r := decodeRelease(t, out["d1"][1]); r.Released || r.Releasing || r.Holds != 1 {
		t.Errorf("?wait=false of one of two holds = %+v, want holds 1, not releasing", r)
	}
	if r := decodeRelease(t, out["d2"][1]); !r.Releasing || r.Token != l2.Token {
		t.Errorf("?wait=false of the last hold = %+v, want releasing, token %d", r, l2.Token)
	}
	waitFor(t, 10*time.Second, "the re-entered lease ended with its process", func() bool {
		st, _ := a.call("GET", "/v1/leases/"+l1.LeaseID, "")
		return st != 200
	})
	if st, body := a.call("GET", "/v1/leases/"+l1.LeaseID, ""); st != 410 || decodeError(t, body).Reason != api.ReasonProcessExited {
		t.Errorf("the lease with a hold left after its process exited: %d %s, want 410 %q", st, body, api.ReasonProcessExited)
	}
	if st, body := a.call("GET", "/v1/leases/"+l2.LeaseID, ""); st != 404 || decodeError(t, body).Kind != api.NoNode {
		t.Errorf("the lease released with ?wait=false, its process gone: %d %s, want 404 NoNode (released)", st, body)
	}
	for _, l := range []api.Lease{l1, l2} {
		g := b.acquire(l.Object, `{"wait_ms":10000}`)
		if g.Token <= l.Token {
			t.Errorf("%s granted token %d after the bound caller's %d", l.Object, g.Token, l.Token)
		}
		b.release(g.LeaseID)
	}
	if v := a.metric("baton_leases_total", "result=process_exited"); v != 1 {
		t.Errorf("baton_leases_total{result=process_exited} = %v, want 1", v)
	}
	if v := a.metric("baton_leases_total", "result=released"); v != 1 {
		t.Errorf("baton_leases_total{result=released} = %v, want 1", v)
	}
}

// overlapChecker fails a grant of an object that someone holds (no two
// holders at once) or whose token is not above every earlier grant's.
type overlapChecker struct {
	mu   sync.Mutex
	in   map[string]int
	last map[string]int64
	node map[string]string // the node of the last grant of each object (released or not)
	errs []string
}

func newOverlapChecker() *overlapChecker {
	return &overlapChecker{in: map[string]int{}, last: map[string]int64{}, node: map[string]string{}}
}

// enter records a grant. stat reads a child of the object once the grant
// was answered: the previous holder's node must be gone (nobody is granted
// before the previous release's write landed). A child of that name
// created after the previous grant's token is another node (the object
// node was deleted and created again, and its sequence numbers with it).
func (c *overlapChecker) enter(obj string, token int64, node string, stat func(name string) (czxid int64, ok bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in[obj]++
	if c.in[obj] > 1 {
		c.errs = append(c.errs, fmt.Sprintf("%q granted (token %d) to %d holders at once", obj, token, c.in[obj]))
	}
	prevToken := c.last[obj]
	if token <= prevToken {
		c.errs = append(c.errs, fmt.Sprintf("%q granted token %d after token %d", obj, token, prevToken))
	}
	if prev := c.node[obj]; prev != "" && prev != node {
		if czxid, ok := stat(prev); ok && czxid <= prevToken {
			c.errs = append(c.errs, fmt.Sprintf("%q granted (token %d) while the previous holder's node %s (created at %d, granted %d) was still there",
				obj, token, prev, czxid, prevToken))
		}
	}
	c.last[obj], c.node[obj] = token, node
}

func (c *overlapChecker) leave(obj string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in[obj]--
}

// TestReviewNowaitChurn: goroutines on two sidecars acquire three objects
// (one at a time, or a set of two in one lease) over and over and release
// each grant with ?wait=false at once, under the
// overlap checker: no two holders at once, every token above the last one
// granted for the object, and no grant while the previous holder's node is
// still in ZooKeeper. Every acquire is granted (nothing lost or stuck
// behind an answered release). On both protocols.
func TestReviewNowaitChurn(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		t.Run(proto, func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			var scs []*sc
			for _, n := range []string{"ch-a", "ch-b"} {
				cfg := testConfig(t, root, n)
				cfg.LockProtocol = proto
				scs = append(scs, start(t, cfg))
			}
			objs := []string{"c0", "c1", "c2"}
			t.Cleanup(func() {
				// nothing left but the native protocol's persistent privateLock
				waitFor(t, 10*time.Second, "no node left", func() bool {
					for _, o := range objs {
						kids := kidsOf(t, conn, path.Join(root, o))
						if proto == "plugin" || len(kids) != 1 {
							if len(kids) > 0 {
								return false
							}
							continue
						}
						ok, st, err := conn.Exists(path.Join(root, o, "privateLock"))
						if err != nil || !ok || st.EphemeralOwner != 0 {
							return false
						}
					}
					return true
				})
			})
			c := newOverlapChecker()
			const workers, rounds = 3, 12
			var wg sync.WaitGroup
			var mu sync.Mutex
			grants := 0
			for _, s := range scs {
				for w := range workers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(w), uint64(len(s.cfg.NodeID))))
						for range rounds {
							i := rng.IntN(len(objs))
							url, body := "/v1/locks/"+objs[i]+"/acquire", `{"lease_ms":60000,"wait_ms":30000}`
							if rng.IntN(4) == 0 { // a set of two objects: one lease, one release
								url, body = "/v1/locks/acquire", `{"objects":["`+objs[i]+`","`+objs[(i+1)%len(objs)]+`"],"lease_ms":60000,"wait_ms":30000}`
							}
							st, raw := s.call("POST", url, body)
							if st != 200 {
								t.Errorf("%s %s %s: %d %s", s.cfg.NodeID, url, body, st, raw)
								return
							}
							l := decodeLease(t, raw)
							held := l.Objects
							if len(held) == 0 {
								held = []api.LeaseObject{{Object: l.Object, Token: l.Token, Node: l.Node}}
							}
							for _, o := range held {
								c.enter(o.Object, o.Token, o.Node, func(name string) (int64, bool) {
									ok, st, err := conn.Exists(path.Join(root, o.Object, name))
									if err != nil || !ok {
										return 0, false
									}
									return st.Czxid, true
								})
							}
							for _, o := range held {
								c.leave(o.Object) // before the release: the next holder may be granted once it lands
							}
							if st, raw := s.call("DELETE", "/v1/leases/"+l.LeaseID+"?wait=false", ""); st != 202 {
								t.Errorf("%s release ?wait=false: %d %s", s.cfg.NodeID, st, raw)
								return
							}
							mu.Lock()
							grants++
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			c.mu.Lock()
			for _, e := range c.errs {
				t.Error(e)
			}
			c.mu.Unlock()
			if want := len(scs) * workers * rounds; grants != want {
				t.Errorf("%d grants released, want %d", grants, want)
			}
		})
	}
}

// TestReviewNowaitPreemptedAndRevoked: a preempted lease released with
// ?wait=false answers 202, and the preempting requester on another
// sidecar is granted after it with a greater token (never while the
// holder's node is there); a revoked lease's ?wait=false answers 410
// (revoked) and frees nothing early: the lock stays held until the
// valid_until told to the holder has passed.
func TestReviewNowaitPreemptedAndRevoked(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	a := start(t, testConfig(t, root, "pr-a"))
	b := start(t, testConfig(t, root, "pr-b"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	t.Run("preempted", func(t *testing.T) {
		h := a.acquire("pre", `{"preemptible":true,"cleanup_ms":5000,"lease_ms":60000}`)
		time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
		got := acquireAsync(b, "pre", `{"preempt":true,"wait_ms":20000}`)
		waitFor(t, 10*time.Second, "the holder preempted", func() bool {
			st, raw := a.call("GET", "/v1/leases/"+h.LeaseID, "")
			return st == 200 && decodeLease(t, raw).State == api.StatePreempted
		})
		nowaitRelease(t, a, h)
		gl := grantedAfter(t, got, 20*time.Second, "the preempting requester", h, conn, path.Join(root, "pre"))
		b.release(gl.LeaseID)
	})

	t.Run("revoked", func(t *testing.T) {
		h := a.acquire("rev", `{"lease_ms":60000}`)
		told := h.ValidUntil.Time
		a.mustCall(202, "POST", "/v1/locks/rev/revoke", `{"reason":"review"}`)
		st, raw := a.call("DELETE", "/v1/leases/"+h.LeaseID+"?wait=false", "")
		if e := decodeError(t, raw); st != 410 || e.Kind != api.LockLost {
			t.Fatalf("?wait=false of a revoked lease: %d %s, want 410 LockLost", st, raw)
		}
		ok, _, err := conn.Exists(path.Join(root, "rev", "privateLock"))
		if checked := time.Now(); err == nil && !ok && checked.Before(told) {
			t.Errorf("the revoked lock was freed %v before the valid_until told to its holder (the no-wait release freed it)", told.Sub(checked))
		}
		g := acquireAsync(b, "rev", `{"wait_ms":20000}`)
		r := <-g
		if r.status != 200 {
			t.Fatalf("acquire after the revocation: %d %s", r.status, r.body)
		}
		gl := decodeLease(t, r.body)
		if granted := time.Now(); granted.Before(told) {
			t.Errorf("granted %v before the valid_until told to the revoked holder", told.Sub(granted))
		}
		b.release(gl.LeaseID)
	})
}
