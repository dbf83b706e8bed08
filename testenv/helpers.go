package testenv

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-zookeeper/zk"
)

// Client returns a plain go-zookeeper client with an established session,
// closed when the test ends: for a test's own reads and faults.
func Client(t TB, servers []string) *zk.Conn {
	t.Helper()
	return ClientWith(t, servers, 10*time.Second, nil)
}

// ClientWith is Client with a session timeout and a dialer (nil: a plain
// TCP dial, go-zookeeper's own).
func ClientWith(t TB, servers []string, sessionTimeout time.Duration, dial zk.Dialer) *zk.Conn {
	t.Helper()
	if dial == nil {
		dial = net.DialTimeout
	}
	c, ev, err := zk.Connect(servers, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatalf("testenv: zk connect: %v", err)
	}
	deadline := time.After(20 * time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-ev:
		case <-deadline:
			c.Close()
			t.Fatalf("testenv: zk connect to %v: no session after 20s", servers)
		}
	}
	// go-zookeeper says it has a session before it starts the connection's
	// send and receive goroutines: one round trip means they run, so a
	// test's goroutine snapshot taken after this (goleak.IgnoreCurrent)
	// has them (TestReviewReopenCloseRacesFail found them "leaked" once
	// they started later, under load).
	if _, _, err := c.Exists("/"); err != nil {
		c.Close()
		t.Fatalf("testenv: zk connect to %v: %v", servers, err)
	}
	t.Cleanup(c.Close)
	return c
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// Main is the body of a package's TestMain that shares one standalone
// ZooKeeper between its tests: it starts the server into *z, runs the tests
// (run is m.Run), stops the server, then runs after (e.g. a goroutine leak
// check) if the tests passed, and returns the exit code.
func Main(pkg string, z **ZooKeeper, run func() int, after func() error) int {
	s, err := StartZooKeeper(ZKOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: %v\n", pkg, err)
		return 1
	}
	*z = s
	code := run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: stop zookeeper: %v\n", pkg, err)
	}
	if code == 0 && after != nil {
		if err := after(); err != nil {
			fmt.Fprintf(os.Stderr, "%s tests: %v\n", pkg, err)
			code = 1
		}
	}
	return code
}

// WaitFor polls cond every 10 ms until it holds, or fails the test after
// within, naming what it waited for.
func WaitFor(t TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
