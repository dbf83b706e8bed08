package sidecar_test

import (
	"path"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/testenv"
)

// Review (wreview) of commits 992be5c (an acquire of an object whose
// no-wait release is in flight on this sidecar waits for that release,
// within its wait_ms) and 1820663 (the lease table's background goroutines
// start only while it is open).

// TestReviewWAcquireBoundedByWait: the release's write cannot reach
// ZooKeeper (the proxy holds the sidecar's requests), so the release in
// flight does not end within the acquire's wait. An acquire of the same
// object on that sidecar with wait_ms 1000 must still answer within its
// wait (+2 s of slack), with a 423 InstanceLockException whose waited_ms
// covers the wait — not go on for the engine's default wait
// (zookeeper.foreground.task.timeout, set to 20 s here) after its own
// wait ran out. No grant before the write lands; after the heal the
// object is granted with a greater token. On both protocols.
func TestReviewWAcquireBoundedByWait(t *testing.T) {
	for _, proto := range []string{"plugin", "native"} {
		t.Run(proto, func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			p := testenv.ProxyT(t, zkServer.Addr(1))
			cfg := testConfig(t, root, "wb-a")
			cfg.ZKServers = []string{p.Addr()}
			cfg.LockProtocol = proto
			cfg.ForegroundTimeout = 20 * time.Second
			a := start(t, cfg)
			objPath := path.Join(root, "wb")

			l := a.acquire("wb", `{"lease_ms":60000}`)
			p.HoldUpstream()
			t.Cleanup(p.Heal)
			nowaitRelease(t, a, l)
			const waitMS = 1000
			ch := acquireAsync(a, "wb", `{"wait_ms":1000}`)
			var g acquired
			select {
			case g = <-ch:
			case <-time.After(waitMS*time.Millisecond + 2*time.Second):
				p.Heal()
				g = <-ch
				t.Fatalf("the acquire with wait_ms %d was not answered within its wait + 2 s (answered %d %s after the heal)", waitMS, g.status, g.body)
			}
			if g.status != 423 {
				t.Fatalf("the acquire while the release could not land: %d %s, want 423", g.status, g.body)
			}
			e := decodeError(t, g.body)
			if e.Kind != api.InstanceLockException || e.WaitedMS == nil || *e.WaitedMS < waitMS {
				t.Errorf("423 = %+v, want InstanceLockException with waited_ms >= %d", e, waitMS)
			}
			p.Heal()
			waitFor(t, 10*time.Second, "the released holder's node gone", func() bool {
				return !slices.Contains(kidsOf(t, conn, objPath), l.Node)
			})
			gl := a.acquire("wb", `{"wait_ms":4000}`)
			if gl.Token <= l.Token {
				t.Errorf("granted token %d after the release, not above %d", gl.Token, l.Token)
			}
			a.release(gl.LeaseID)
		})
	}
}
