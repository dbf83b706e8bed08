package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// zkLogger sends go-zookeeper's log lines to the test log.
type zkLogger struct{ t testing.TB }

func (l zkLogger) Printf(format string, args ...any) { l.t.Logf("zk: "+format, args...) }

// connect opens a go-zookeeper client; cb (if not nil) gets every session event.
func connect(t *testing.T, servers []string, timeout time.Duration, cb func(zk.Event)) *zk.Conn {
	t.Helper()
	if cb == nil {
		cb = func(zk.Event) {}
	}
	c, _, err := zk.Connect(servers, timeout, zk.WithLogger(zkLogger{t}), zk.WithEventCallback(cb))
	if err != nil {
		t.Fatalf("zk.Connect(%v): %v", servers, err)
	}
	t.Cleanup(c.Close)
	return c
}

// eventually polls f every 50ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procGone reports whether pid has exited (gone, or a zombie nobody reaped yet).
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func TestStandalone(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	z := ZooKeeperT(t, ZKOptions{})
	t.Logf("standalone started in %v", time.Since(t0))

	if got, err := z.FourLetter(1, "ruok"); err != nil || got != "imok" {
		t.Fatalf("FourLetter(1, ruok) = %q, %v; want imok", got, err)
	}
	if got, err := z.Mode(1); err != nil || got != "standalone" {
		t.Errorf("Mode(1) = %q, %v; want standalone", got, err)
	}
	if got, err := z.Leader(); err != nil || got != 1 {
		t.Errorf("Leader() = %d, %v; want 1", got, err)
	}
	m, err := z.Mntr(1)
	if err != nil || m["zk_server_state"] != "standalone" || m["zk_packets_received"] == "" {
		t.Errorf("Mntr(1) = %v, %v; want zk_server_state=standalone and zk_packets_received", m, err)
	}
	// Received counts one session's packets, and no other connection's.
	c1, c2 := Client(t, z.Servers()), Client(t, z.Servers())
	r1, err1 := z.Received(1, c1.SessionID())
	r2, err2 := z.Received(1, c2.SessionID())
	t1 := time.Now()
	for range 3 {
		if _, _, err := c1.Exists("/"); err != nil {
			t.Fatal(err)
		}
	}
	r1b, err3 := z.Received(1, c1.SessionID())
	r2b, err4 := z.Received(1, c2.SessionID())
	// a ping every third of the 10 s session timeout
	pings := int64(1 + time.Since(t1)/(10*time.Second/3))
	if err := errors.Join(err1, err2, err3, err4); err != nil || r1 < 1 || r1b-r1 < 3 || r1b-r1 > 3+pings || r2b-r2 > pings {
		t.Errorf("Received: session 1 %d -> %d after 3 requests, session 2 %d -> %d (%v); want +3 (up to %d pings more), +0", r1, r1b, r2, r2b, err, pings)
	}
	if n, err := z.Received(1); n != 0 || err != nil {
		t.Errorf("Received(1) of no session = %d, %v; want 0", n, err)
	}
	if got, want := z.ConnString(), z.Addr(1); got != want || !strings.HasPrefix(got, "127.0.0.1:") {
		t.Errorf("ConnString() = %q, want %q on 127.0.0.1", got, want)
	}
	if z.Nodes() != 1 || z.TickTime() != 500*time.Millisecond {
		t.Errorf("Nodes(), TickTime() = %d, %v; want 1, 500ms", z.Nodes(), z.TickTime())
	}
	if got, _ := z.FourLetter(1, "wchs"); !strings.Contains(got, "not in the whitelist") {
		t.Errorf("FourLetter(1, wchs) = %q, want a whitelist refusal", got)
	}
	if _, err := z.FourLetter(2, "ruok"); !errors.Is(err, ErrNoSuchNode) {
		t.Errorf("FourLetter(2, ruok) error = %v, want ErrNoSuchNode", err)
	}

	// The container reaper runs with the JVM properties: a container that
	// never had a child is deleted after MaxNeverUsedInterval (1s).
	c := connect(t, z.Servers(), 4*time.Second, nil)
	if _, err := c.CreateContainer("/never-used", nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	eventually(t, 15*time.Second, "never-used container reaped", func() error {
		if ok, _, err := c.Exists("/never-used"); err != nil || ok {
			return fmt.Errorf("exists=%v err=%v", ok, err)
		}
		return nil
	})
}

func TestStopKillsAndCleansUp(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer // testenv serializes its writes to Log
	z, err := StartZooKeeper(ZKOptions{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir, port := z.PID(1), z.Dir(), z.nodes[0].clientPort
	if err := z.Pause(1); err != nil { // Stop must handle a frozen JVM too
		t.Fatal(err)
	}
	if err := z.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	if err := z.Stop(); err != nil {
		t.Fatalf("second Stop() = %v, want nil (idempotent)", err)
	}
	if !procGone(pid) {
		t.Errorf("java pid %d still running after Stop", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) after Stop = %v, want not exist", dir, err)
	}
	if l, err := tryReservePort(port); err != nil || l == nil {
		t.Errorf("port %d not free after Stop: %v", port, err)
	} else {
		l.Release()
	}
	for _, want := range []string{"testenv: zookeeper node 1 started: pid", "testenv: zookeeper standalone serving on " + z.ConnString(), "stopped"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("Log output lacks %q:\n%s", want, log.String())
		}
	}
	if err := z.Kill(1); !errors.Is(err, ErrStopped) {
		t.Errorf("Kill after Stop = %v, want ErrStopped", err)
	}
}

func TestEnsemble(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	z := ZooKeeperT(t, ZKOptions{Nodes: 3})
	t.Logf("ensemble started in %v", time.Since(t0))
	if got := len(strings.Split(z.ConnString(), ",")); got != 3 || len(z.Servers()) != 3 {
		t.Fatalf("ConnString() = %q, want 3 servers", z.ConnString())
	}

	modes := func() map[string]int {
		m := map[string]int{}
		for id := 1; id <= z.Nodes(); id++ {
			mode, err := z.Mode(id)
			if err != nil {
				mode = "error"
			}
			m[mode]++
		}
		return m
	}
	if got := modes(); got["leader"] != 1 || got["follower"] != 2 {
		t.Fatalf("modes = %v, want 1 leader and 2 followers", got)
	}
	leader, err := z.Leader()
	if err != nil {
		t.Fatal(err)
	}

	// Killing the leader elects another.
	t1 := time.Now()
	if err := z.Kill(leader); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := z.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady after killing leader %d: %v", leader, err)
	}
	next, err := z.Leader()
	if err != nil || next == leader {
		t.Fatalf("Leader() after killing %d = %d, %v; want another node", leader, next, err)
	}
	t.Logf("new leader %d elected %v after killing %d", next, time.Since(t1), leader)
	if _, err := z.Mode(leader); err == nil {
		t.Errorf("killed node %d still answers srvr", leader)
	}

	// The killed node rejoins as a follower.
	if err := z.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := z.Restart(leader); !errors.Is(err, ErrRunning) {
		t.Errorf("second Restart(%d) = %v, want ErrRunning", leader, err)
	}
	if got, err := z.Mode(leader); err != nil || got != "follower" {
		t.Errorf("Mode(%d) after Restart = %q, %v; want follower", leader, got, err)
	}
	eventually(t, 20*time.Second, "leader sees 2 synced followers", func() error {
		m, err := z.Mntr(next)
		if err != nil || m["zk_synced_followers"] != "2" {
			return fmt.Errorf("zk_synced_followers=%q err=%v", m["zk_synced_followers"], err)
		}
		return nil
	})

	// A client reaches the ensemble through every node.
	c := connect(t, z.Servers(), 4*time.Second, nil)
	if _, err := c.Create("/e", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create on ensemble: %v", err)
	}
}

// TestSessionExpiresWhilePaused freezes a standalone server for longer than a
// client's session timeout: after SIGCONT the server expires the session, the
// client sees StateExpired and gets a new session, and the old ephemeral is gone.
//
// The client reaches the server through a Proxy that is black-holed for the
// pause and healed only once the server has expired the session (seen from a
// second client). Without it the test is racy, because ZooKeeper is: a
// reconnect request the client sends during the pause waits in the server's
// socket buffer, and if the server reads it after SIGCONT before its expiry
// thread runs, it revalidates the session and no expiry happens at all
// (observed in about 1 run in 8).
func TestSessionExpiresWhilePaused(t *testing.T) {
	t.Parallel()
	z := ZooKeeperT(t, ZKOptions{})
	p := ProxyT(t, z.Addr(1))

	var mu sync.Mutex
	var events []zk.Event
	changed := make(chan struct{}, 1)
	cb := func(e zk.Event) {
		if e.Type != zk.EventSession {
			return
		}
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	waitEvent := func(what string, pred func(zk.Event) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			for _, e := range events {
				if pred(e) {
					mu.Unlock()
					return
				}
			}
			mu.Unlock()
			select {
			case <-changed:
			case <-deadline:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("no %s event; events: %v", what, events)
			}
		}
	}

	c := connect(t, []string{p.Addr()}, 2*time.Second, cb)
	waitEvent("HasSession", func(e zk.Event) bool { return e.State == zk.StateHasSession })
	old := c.SessionID()
	if _, err := c.Create("/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	p.BlackHole()
	if err := z.Pause(1); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	waitEvent("Disconnected", func(e zk.Event) bool { return e.State == zk.StateDisconnected })
	// Stay frozen well past the 2s session timeout (the fault's duration, not ordering).
	time.Sleep(time.Until(paused.Add(5 * time.Second)))
	if err := z.Resume(1); err != nil {
		t.Fatal(err)
	}
	other := connect(t, z.Servers(), 4*time.Second, nil)
	eventually(t, 20*time.Second, "server expires the frozen session", func() error {
		if ok, _, err := other.Exists("/eph"); err != nil || ok {
			return fmt.Errorf("exists=%v err=%v", ok, err)
		}
		return nil
	})
	p.Heal()
	// The client's reconnect attempt made during the black hole waits for a
	// connect reply that was dropped (go-zookeeper allows 10 x 2/3 of the
	// session timeout): cut it short.
	p.ResetConnections()
	waitEvent("Expired", func(e zk.Event) bool { return e.State == zk.StateExpired })
	eventually(t, 20*time.Second, "new session", func() error {
		if id := c.SessionID(); id == old || id == 0 || c.State() != zk.StateHasSession {
			return fmt.Errorf("session %#x state %v, old %#x", id, c.State(), old)
		}
		return nil
	})
	if ok, _, err := c.Exists("/eph"); err != nil || ok {
		t.Errorf("Exists(/eph) after expiry = %v, %v; want false", ok, err)
	}
}

func TestMissingInstall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts ZKOptions
		want string
	}{
		{"no java", ZKOptions{Java: "/nonexistent/java"}, "/nonexistent/java"},
		{"no jars", ZKOptions{JarDir: t.TempDir()}, "zookeeper.jar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z, err := StartZooKeeper(tc.opts)
			if err == nil {
				z.Stop()
				t.Fatal("StartZooKeeper succeeded, want an error")
			}
			if !errors.Is(err, ErrNotInstalled) {
				t.Errorf("error = %v, want ErrNotInstalled", err)
			}
			for _, s := range []string{InstallCommand, "apt-get install -y openjdk-17-jre-headless zookeeper", tc.want} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []ZKOptions{{Nodes: -1}, {TickTime: -time.Second}, {StopTimeout: -1}} {
		if z, err := StartZooKeeper(opts); err == nil {
			z.Stop()
			t.Errorf("StartZooKeeper(%+v) succeeded, want an error", opts)
		}
	}
}

// TestOrphanKilledWithOwner starts ZooKeeper in a subprocess (from a thread
// that then exits), SIGKILLs the subprocess, and expects java to die with it;
// then ReapStale removes the orphan's directory.
func TestOrphanKilledWithOwner(t *testing.T) {
	t.Parallel()
	cmd, out := startHelper(t, "zk")
	line, err := readLine(out, 60*time.Second)
	if err != nil || !strings.HasPrefix(line, "READY ") {
		t.Fatalf("helper said %q, %v", line, err)
	}
	var pid, port int
	var dir string
	if _, err := fmt.Sscanf(line, "READY %d %s %d", &pid, &dir, &port); err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	if procGone(pid) {
		t.Fatalf("java pid %d is not running before the owner dies", pid)
	}
	if got, err := fourLetter(port, "ruok"); err != nil || got != "imok" {
		t.Fatalf("ruok to the helper's server = %q, %v", got, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	eventually(t, 10*time.Second, "java dies with its owner", func() error {
		if !procGone(pid) {
			return fmt.Errorf("pid %d still running", pid)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); err != nil {
		t.Fatalf("orphan dir %s: %v", dir, err)
	}
	if _, err := ReapStale(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("orphan dir %s after ReapStale: %v, want removed", dir, err)
	}
}

// TestReapStale runs stand-in "servers" carrying the owner marker and checks
// that exactly those whose owner is gone get killed.
func TestReapStale(t *testing.T) {
	t.Parallel()
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	dead := exec0(t) // a pid that existed and exited
	for _, tc := range []struct {
		name  string
		owner string
		kill  bool
	}{
		{"dead owner", fmt.Sprintf("%d:12345", dead), true},
		{"pid reused", fmt.Sprintf("%d:1", os.Getpid()), true},
		{"live owner", me, false},
		{"unparsable owner", "garbage", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd, _ := startHelper(t, "sleep", ownerFlag+tc.owner)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			eventually(t, 10*time.Second, "helper shows its owner flag", func() error {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
				if o, ok := cmdlineOwner(b); !ok || o != tc.owner {
					return fmt.Errorf("cmdline %q", b)
				}
				return nil
			})
			if _, err := ReapStale(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if !tc.kill {
					t.Errorf("helper with owner %q was killed (%v), want alive", tc.owner, err)
				}
			case <-time.After(2 * time.Second):
				if tc.kill {
					t.Errorf("helper with owner %q still alive, want killed", tc.owner)
				}
				cmd.Process.Kill()
				<-exited
			}
		})
	}
}
