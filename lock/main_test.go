package lock_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// zkServer is the package's shared standalone ZooKeeper; fault tests start
// their own.
//
// The long tests that mostly wait (cuts, reconnects, session expiry,
// lock-delay) call t.Parallel: they run together after the others, which
// halves the package's time (make test passes -parallel 8). Such a test
// uses its own root and engines, sets no package-level hook (SetLearnListHook,
// SetHandoffHook, SetSeqLimits, SetLearnPause) and reads no server-wide
// counter of zkServer (mntr; Received counts given sessions only).
var zkServer *testenv.ZooKeeper

func TestMain(m *testing.M) {
	os.Exit(testenv.Main("lock", &zkServer, m.Run, func() error { return goleak.Find(goleak.IgnoreCurrent()) }))
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

// testRoot returns a lock root unique to the test and registers the znode
// leak check: when the test ends, no object under the root may have children.
func testRoot(t testing.TB, z *testenv.ZooKeeper) string {
	t.Helper()
	root := "/t/" + nonWord.ReplaceAllString(t.Name(), "_")
	conn := rawConn(t, z.Servers())
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
	return root
}

// assertNoLeftovers waits (bounded) for every object under root to have no
// children: deletions after cancelled waits complete in the background.
func assertNoLeftovers(t testing.TB, conn *zk.Conn, root string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		objs, _, err := conn.Children(root)
		if err != nil && err != zk.ErrNoNode {
			// the test's own faults (a partition just healed) may have cut
			// this connection: look again until the deadline
			if time.Now().After(deadline) {
				t.Errorf("leak check: list %s: %v", root, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, o := range objs {
			kids, _, err := conn.Children(root + "/" + o)
			if err == nil && len(kids) == 1 && kids[0] == "privateLock" {
				// a native object's sentinel (persistent) is no leftover
				if ok, st, err := conn.Exists(root + "/" + o + "/privateLock"); err == nil && ok && st.EphemeralOwner == 0 {
					continue
				}
			}
			if err == nil && len(kids) > 0 {
				left = append(left, fmt.Sprintf("%s: %v", o, kids))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("leak check: nodes left under %s: %s", root, strings.Join(left, "; "))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawConn is a plain go-zookeeper client for the test's own reads and faults.
// rawConn is a plain go-zookeeper client for the test's own reads and faults.
func rawConn(t testing.TB, servers []string) *zk.Conn { return testenv.Client(t, servers) }

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newEngine starts an engine on servers with root and the given tweaks, and
// waits until it is connected.
func newEngine(t testing.TB, servers []string, root string, tweak ...func(*lock.Options)) *lock.Engine {
	t.Helper()
	o := lock.Options{Servers: servers, Root: root, SessionTimeout: 4 * time.Second, TickTime: testenv.DefaultTickTime, Logger: testLogger(t), NodeID: "test-" + t.Name()}
	// Most tests of the native protocol follow local waiters through
	// their own children: parking (park_test.go) is opted into (parking),
	// or forced on for the whole suite with BATON_TEST_PARKING=1.
	o.DisableParking = os.Getenv("BATON_TEST_PARKING") != "1"
	for _, f := range tweak {
		f(&o)
	}
	e, err := lock.New(o)
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	waitFor(t, 20*time.Second, "engine connected", func() bool { return e.Health().Connected })
	return e
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, within, what, cond)
}

func acquire(t testing.TB, e *lock.Engine, obj string, typ lock.Type, o lock.AcquireOptions) *lock.Grant {
	t.Helper()
	if o.Wait == 0 {
		o.Wait = 30 * time.Second
	}
	g, err := e.Acquire(context.Background(), obj, typ, o)
	if err != nil {
		t.Fatalf("Acquire(%q, %v): %v", obj, typ, err)
	}
	return g
}

func release(t testing.TB, g *lock.Grant) {
	t.Helper()
	if err := g.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", g.Object(), err)
	}
}

// children lists an object's children (escaped name) through conn.
func children(t testing.TB, conn *zk.Conn, root, obj string) []string {
	t.Helper()
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := conn.Children(path.Join(root, name))
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("children of %s: %v", obj, err)
	}
	return c
}

// overlapChecker counts holders of one object: more than one at a time is a
// mutual-exclusion violation; tokens must strictly increase.
type overlapChecker struct {
	mu       sync.Mutex
	inside   int
	overlaps int
	last     int64
	badToken int
	grants   int
}

func (c *overlapChecker) enter(token int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inside++
	if c.inside != 1 {
		c.overlaps++
	}
	if token <= c.last {
		c.badToken++
	}
	c.last = token
	c.grants++
}

func (c *overlapChecker) leave() {
	c.mu.Lock()
	c.inside--
	c.mu.Unlock()
}

// verify fails t unless the checker saw no overlap and only rising
// tokens and, when grants >= 0, exactly that many grants.
func (c *overlapChecker) verify(t testing.TB, grants int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case grants < 0 && (c.overlaps != 0 || c.badToken != 0):
		t.Errorf("overlaps=%d non-increasing tokens=%d", c.overlaps, c.badToken)
	case grants >= 0 && (c.overlaps != 0 || c.badToken != 0 || c.grants != grants):
		t.Errorf("overlaps=%d non-increasing tokens=%d grants=%d", c.overlaps, c.badToken, c.grants)
	}
}

// turn records a grant that holds and does nothing: in, out.
func (c *overlapChecker) turn(g *lock.Grant) {
	c.enter(g.Token())
	c.leave()
}
