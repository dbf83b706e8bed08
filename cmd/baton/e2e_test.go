package main

import (
	"bytes"
	"context"
	"fmt"
	"go/build"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/notify"
	"github.com/batonhq/baton/testenv"
)

// The process-level tests: one ZooKeeper, `baton` built once with -race,
// sidecar processes started from it, and the client commands run
// in-process (run) or as processes against them.

// e2eRoot is the lock root of every sidecar of these tests: they contend.
const e2eRoot = "/e2e"

// env is what the process-level tests share.
type env struct {
	bin string // baton built with -race
	zk  *testenv.ZooKeeper
	dir string // short directory for sockets (paths < 108 bytes)
}

// newEnv builds baton, starts ZooKeeper and makes the socket directory.
func newEnv(t *testing.T) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "bl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{dir: dir, bin: filepath.Join(dir, "baton")}
	var wg sync.WaitGroup
	var buildErr error
	wg.Go(func() { buildErr = buildBaton(e.bin) })
	e.zk = testenv.ZooKeeperT(t, testenv.ZKOptions{})
	wg.Wait()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return e
}

func buildBaton(out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	t0 := time.Now()
	cmd := exec.Command(gobin, "build", "-race", "-o", out, ".")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -race: %v\n%s", err, b)
	}
	fmt.Fprintf(os.Stderr, "e2e: built baton -race in %v\n", time.Since(t0).Round(time.Millisecond))
	return nil
}

// cleanProcEnv is the environment of spawned processes: ours without
// BATON_ variables, and without the race detector's default 1s sleep at
// exit (it would blur the measured exit times).
func cleanProcEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") && !strings.HasPrefix(kv, "GORACE=") {
			out = append(out, kv)
		}
	}
	return append(out, "GORACE=atexit_sleep_ms=50 "+os.Getenv("GORACE"))
}

// logBuf collects a process's output; waiters are woken on every write.
type logBuf struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed notify.Broadcast
}

func newLogBuf() *logBuf { return &logBuf{} }

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	l.changed.Notify()
	return len(p), nil
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Len is a mark for waitFor: output written after it.
func (l *logBuf) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// waitFor waits until the output after mark contains s and returns that
// output, or fails the test after timeout.
func (l *logBuf) waitFor(t *testing.T, mark int, s string, timeout time.Duration) string {
	t.Helper()
	if got, ok := l.await(mark, s, timeout); ok {
		return got
	}
	t.Fatalf("no %q in the output within %v; output after mark:\n%s", s, timeout, l.String()[mark:])
	return ""
}

func (l *logBuf) await(mark int, s string, timeout time.Duration) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		got := l.b.String()[mark:]
		ch := l.changed.Wait()
		l.mu.Unlock()
		if strings.Contains(got, s) {
			return got, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return got, false
		}
	}
}

// proc is a spawned baton process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *logBuf // stdout and stderr
	exited chan struct{}
	state  *os.ProcessState // set when exited is closed
	killed bool             // the test killed it with SIGKILL: no exit-status check
}

// start runs bin with args, output into a logBuf. The test's cleanup
// SIGTERMs it if still running and checks that no data race or panic was
// reported (and, unless it was killed, that it exited 0).
func start(t *testing.T, name string, stdin io.Reader, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: newLogBuf(), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = cleanProcEnv()
	p.cmd.Stdin = stdin
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: start: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !p.done() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(60 * time.Second):
				t.Errorf("%s: still running 60s after SIGTERM; killing it", name)
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		out := p.out.String()
		if strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic:") {
			t.Errorf("%s: data race or panic in its output:\n%s", name, out)
		} else if t.Failed() {
			t.Logf("%s output:\n%s", name, out)
		}
	})
	return p
}

func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns its exit status (-1 if a
// signal ended it).
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s: still running after %v; output:\n%s", p.name, timeout, p.out.String())
		return 0
	}
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, s, err)
	}
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	p.killed = true
	p.signal(t, syscall.SIGKILL)
	<-p.exited
}

// sidecarProc is a `baton serve` process.
type sidecarProc struct {
	*proc
	socket string
	config string            // its properties file
	props  map[string]string // what the file holds
}

// sidecarProps are the properties of a test sidecar named name; extra wins.
func (e *env) sidecarProps(name string, extra map[string]string) map[string]string {
	p := map[string]string{
		"zookeeper.servers":         e.zk.ConnString(),
		"zookeeper.lock.root":       e2eRoot,
		"zookeeper.session.timeout": "3000",
		"zookeeper.tick.time":       strconv.Itoa(int(testenv.DefaultTickTime.Milliseconds())),
		"sidecar.socket.path":       filepath.Join(e.dir, name+".sock"),
		"sidecar.node.id":           name,
		"queue.dir":                 filepath.Join(e.dir, name+"-queue"),
	}
	maps.Copy(p, extra)
	return p
}

// writeProps writes a properties file, keys sorted.
func writeProps(t *testing.T, path string, p map[string]string) {
	t.Helper()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startSidecar starts `baton serve` with the sidecar properties (plus
// extra) in a file and waits until it is ready.
func (e *env) startSidecar(t *testing.T, name string, extra map[string]string) *sidecarProc {
	t.Helper()
	s := e.spawnSidecar(t, name, extra)
	s.waitReady(t)
	return s
}

// spawnSidecar starts `baton serve` without waiting for it.
func (e *env) spawnSidecar(t *testing.T, name string, extra map[string]string) *sidecarProc {
	t.Helper()
	p := e.sidecarProps(name, extra)
	cfg := filepath.Join(e.dir, name+".properties")
	writeProps(t, cfg, p)
	s := &sidecarProc{socket: p["sidecar.socket.path"], config: cfg, props: p}
	s.proc = start(t, name, nil, e.bin, "serve", "--config", cfg)
	return s
}

func (s *sidecarProc) waitReady(t *testing.T) {
	t.Helper()
	c := client.New(s.socket)
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ready(ctx)
		cancel()
		if err == nil {
			return
		}
		if s.done() {
			t.Fatalf("%s exited (%v) before it was ready:\n%s", s.name, s.state, s.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60s: %v\n%s", s.name, err, s.out.String())
		}
		select {
		case <-s.exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and checks the sidecar exits 0.
func (s *sidecarProc) stop(t *testing.T) {
	t.Helper()
	s.signal(t, syscall.SIGTERM)
	if code := s.wait(t, 60*time.Second); code != 0 {
		t.Errorf("%s: exit status %d after SIGTERM, want 0; output:\n%s", s.name, code, s.out.String())
	}
}

// zkConn connects a raw go-zookeeper client (for deleting nodes under a holder).
func (e *env) zkConn(t *testing.T) *zk.Conn {
	t.Helper()
	c, ev, err := zk.Connect(e.zk.Servers(), 10*time.Second, zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == zk.StateHasSession {
				go func() { // drain the channel until Close closes it
					for range ev {
					}
				}()
				return c
			}
		case <-deadline:
			t.Fatal("zookeeper: no session after 30s")
		}
	}
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// runIn runs baton in-process with the given stdin and writers, returning
// the exit status.
func runIn(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	return run(args, stdin, stdout, stderr)
}

// waitCond polls cond every 10ms until it is true or timeout passes.
func waitCond(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, within, what, cond)
}

// TestE2E runs every test that needs ZooKeeper and the baton binary, which
// it sets up once.
func TestE2E(t *testing.T) {
	e := newEnv(t)
	shared := e.startSidecar(t, "shared", map[string]string{"sidecar.socket.mode": "0600"})

	// Sequential: these use t.Setenv or measure timings.
	t.Run("lock/env", func(t *testing.T) { testLockEnv(t, e, shared) })
	t.Run("lock/exit-statuses", func(t *testing.T) { testLockExitStatuses(t, e, shared) })
	t.Run("lock/conflict", func(t *testing.T) { testLockConflict(t, e, shared) })
	t.Run("lock/lost-kill-grace", func(t *testing.T) { testLockLostKillGrace(t, e, shared) })
	t.Run("lock/released-by-cmd", func(t *testing.T) { testLockReleasedByCmd(t, e, shared) })
	t.Run("lock/reentry", func(t *testing.T) { testLockReentry(t, e, shared) })
	t.Run("lock/revoked", func(t *testing.T) { testLockRevoked(t, e, shared) })
	t.Run("lock/preempted", func(t *testing.T) { testLockPreempted(t, e, shared) })
	t.Run("lock/preempt-withdrawn", func(t *testing.T) { testLockPreemptWithdrawn(t, e, shared) })
	t.Run("lock/signals", func(t *testing.T) { testLockSignals(t, e, shared) })
	t.Run("lock/leftovers-killed", func(t *testing.T) { testLockLeftovers(t, e, shared) })
	t.Run("lock/parent-killed", func(t *testing.T) { testLockParentKilled(t, e, shared) })
	t.Run("serve/ready-socket-mode", func(t *testing.T) { testServeReadySocketMode(t, e, shared) })
	t.Run("status", func(t *testing.T) { testStatus(t, e, shared) })
	t.Run("locks", func(t *testing.T) { testLocks(t, e, shared) })
	t.Run("reload-command", func(t *testing.T) { testReloadCommand(t, e, shared) })
	t.Run("leases-release", func(t *testing.T) { testLeasesRelease(t, shared) })
	t.Run("check", func(t *testing.T) { testCheck(t, shared) })
	t.Run("watch", func(t *testing.T) { testWatch(t, e, shared) })
	t.Run("lock/hold-without-command", func(t *testing.T) { testLockHold(t, e, shared) })
	t.Run("lock/recipes", func(t *testing.T) { testLockRecipes(t, e, shared) })
	t.Run("lock/shared", func(t *testing.T) { testLockShared(t, e, shared) })
	t.Run("lock/shared-native", func(t *testing.T) { testLockSharedNative(t, e) })
	t.Run("auth/other-uid", func(t *testing.T) { testOtherUID(t, e) })
	// Each with its own sidecar(s); mostly waiting, so in parallel.
	t.Run("parallel", func(t *testing.T) {
		t.Run("lock/renews", func(t *testing.T) { t.Parallel(); testLockRenews(t, e, shared) })
		t.Run("serve/kill9-takeover-unreachable", func(t *testing.T) { t.Parallel(); testKill9Takeover(t, e, shared) })
		t.Run("lock/sidecar-frozen", func(t *testing.T) { t.Parallel(); testLockSidecarFrozen(t, e, shared) })
		t.Run("lock/long-wait", func(t *testing.T) { t.Parallel(); testLockLongWait(t, e) })
		t.Run("lock/zookeeper-stall", func(t *testing.T) { t.Parallel(); testLockZooKeeperStall(t, e) })
		t.Run("serve/sigterm-drain", func(t *testing.T) { t.Parallel(); testServeDrain(t, e, shared) })
		t.Run("serve/drain-command", func(t *testing.T) { t.Parallel(); testDrainCommand(t, e, shared) })
		t.Run("serve/refuses-to-start", func(t *testing.T) { t.Parallel(); testServeRefuses(t, e) })
		t.Run("serve/sighup-reload", func(t *testing.T) { t.Parallel(); testServeReload(t, e) })
		t.Run("serve/kill9-1000-ops", func(t *testing.T) { t.Parallel(); testKill9Ops(t, e) })
		t.Run("ops/handler-reenters", func(t *testing.T) { t.Parallel(); testOpHandlerReenters(t, e) })
		t.Run("lock/delay-kill9", func(t *testing.T) { t.Parallel(); testLockDelayKill9(t, e) })
		t.Run("lock/native-kill9-mid-handoff", func(t *testing.T) { t.Parallel(); testNativeKill9MidHandoff(t, e) })
	})
	shared.stop(t)
}
