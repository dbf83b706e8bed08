package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// socketPath is the test sidecar's socket; lockRoot its lock root.
// sessionTimeout is the test sidecar's ZooKeeper session timeout: the
// longest the test servers allow (20 ticks of 500 ms), so that renewals keep
// up on a loaded machine (at 4 s, a load of 25 lost leases whose validity
// windows were 1.3 s; issue 24).
const sessionTimeout = 10 * time.Second

var (
	socketPath string
	lockRoot   = "/t/client"
	zkServers  []string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	z, err := testenv.StartZooKeeper(testenv.ZKOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		return 1
	}
	defer z.Stop()
	zkServers = z.Servers()
	dir, err := os.MkdirTemp("", "bt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	socketPath = filepath.Join(dir, "s.sock")
	cfg := props.Defaults()
	cfg.ZKServers, cfg.LockRoot, cfg.SocketPath, cfg.NodeID = zkServers, lockRoot, socketPath, "sc-client"
	cfg.ZKSessionTimeout = sessionTimeout
	// A free object is granted in milliseconds, but in seconds on a loaded
	// machine: the default waits are long so that no test fails for that.
	cfg.ForegroundTimeout, cfg.BackgroundTimeout = 30*time.Second, 30*time.Second
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c := client.New(socketPath)
	deadline := time.Now().Add(30 * time.Second)
	for c.Ready(context.Background()) != nil {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "client tests: sidecar not ready")
			cancel()
			return 1
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Close()
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "client tests: sidecar Run:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "client tests: goroutine leak:", err)
			code = 1
		}
	}
	return code
}

func newClient(t testing.TB) *client.Client { return newClientAt(t, socketPath) }

// newClientAt is a client of the sidecar at socket, closed when the test ends.
func newClientAt(t testing.TB, socket string) *client.Client {
	c := client.New(socket)
	t.Cleanup(func() { c.Close() })
	return c
}

// ownSidecar starts a sidecar of the test's own (one the test will drain),
// named name, with that session timeout and shutdown grace, and returns it
// ready with a client, and done, which receives what Run returned (a test
// that reads it puts a value back for the cleanup); all are closed when the
// test ends.
func ownSidecar(t testing.TB, name string, session, grace time.Duration) (*sidecar.Server, *client.Client, chan error) {
	t.Helper()
	cfg := props.Defaults()
	cfg.ZKServers, cfg.LockRoot, cfg.NodeID = zkServers, lockRoot+"-"+name, "sc-"+name
	cfg.SocketPath = filepath.Join(t.TempDir(), "d.sock")
	cfg.ZKSessionTimeout, cfg.ShutdownGrace = session, grace
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	c := newClientAt(t, cfg.SocketPath)
	testenv.WaitFor(t, 30*time.Second, "sidecar ready", func() bool { return c.Ready(context.Background()) == nil })
	return srv, c, done
}

// rawConn is a plain go-zookeeper client for the test's faults.
func rawConn(t testing.TB) *zk.Conn { return testenv.Client(t, zkServers) }

// deletePrivateLock makes the object's holder lose the lock.
func deletePrivateLock(t testing.TB, obj string) {
	t.Helper()
	if err := rawConn(t).Delete(lockRoot+"/"+obj+"/privateLock", -1); err != nil {
		t.Fatalf("delete privateLock of %s: %v", obj, err)
	}
}
