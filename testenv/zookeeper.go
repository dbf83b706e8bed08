package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTickTime is the servers' tickTime unless ZKOptions.TickTime says
// otherwise; lock engines under test declare it (lock.Options.TickTime).
const DefaultTickTime = 500 * time.Millisecond

// ZKOptions configures StartZooKeeper. A zero field means its documented default.
type ZKOptions struct {
	Nodes int // 1 = standalone, 3 = a 3-node ensemble (any n >= 1 works); default 1

	// TickTime is ZooKeeper's tickTime; session timeouts are clamped to
	// [2, 20] x TickTime, so 500ms allows 1s..10s; default 500ms.
	TickTime time.Duration

	// ContainerCheckInterval is how often empty container (and TTL) nodes are
	// reaped (JVM property znode.container.checkIntervalMs; in zoo.cfg it
	// would be ignored); default 100ms.
	ContainerCheckInterval time.Duration

	// MaxNeverUsedInterval lets the reaper also delete containers that never
	// had a child, once they are this old (znode.container.maxNeverUsedIntervalMs);
	// default 1s.
	MaxNeverUsedInterval time.Duration

	// Dir holds node1..nodeN (zoo.cfg, data, zookeeper.log, stdout.log, pid).
	// Default: a fresh os.TempDir()/baton-zk-* removed by Stop unless KeepDir.
	// A Dir given here is never removed.
	Dir     string
	KeepDir bool // keep the default temp dir after Stop (its path is Dir())

	ExtraConfig []string // extra zoo.cfg lines, appended verbatim (no trailing comments: it is a .properties file)

	// Log receives progress lines and the servers' WARN+ log lines (prefixed
	// "zkN| "); nil = files only. It may be written from several goroutines
	// (testenv serializes its own writes).
	Log io.Writer

	Java         string        // java executable; default "java" from PATH
	JarDir       string        // where Debian's zookeeper jars live; default /usr/share/java
	Heap         string        // JVM -Xmx; default "128m"
	JVMFlags     []string      // extra JVM arguments, e.g. "-Dzookeeper.extendedTypesEnabled=true"
	ExtraJars    []string      // more jars from JarDir on the classpath, e.g. NettyJars for a secureClientPort
	StartTimeout time.Duration // bound on start and Restart until the node(s) serve; default 60s
	StopTimeout  time.Duration // grace between SIGTERM and SIGKILL in Stop; default 3s
}

func (o *ZKOptions) setDefaults() error {
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Nodes < 0 {
		return fmt.Errorf("testenv: ZKOptions.Nodes = %d, want >= 1", o.Nodes)
	}
	if o.TickTime == 0 {
		o.TickTime = DefaultTickTime
	}
	if o.TickTime < time.Millisecond {
		return fmt.Errorf("testenv: ZKOptions.TickTime = %v, want >= 1ms", o.TickTime)
	}
	if o.ContainerCheckInterval == 0 {
		o.ContainerCheckInterval = 100 * time.Millisecond
	}
	if o.ContainerCheckInterval < time.Millisecond {
		return fmt.Errorf("testenv: ZKOptions.ContainerCheckInterval = %v, want >= 1ms", o.ContainerCheckInterval)
	}
	if o.MaxNeverUsedInterval == 0 {
		o.MaxNeverUsedInterval = time.Second
	}
	if o.MaxNeverUsedInterval < time.Millisecond {
		return fmt.Errorf("testenv: ZKOptions.MaxNeverUsedInterval = %v, want >= 1ms", o.MaxNeverUsedInterval)
	}
	if o.Java == "" {
		o.Java = "java"
	}
	if o.JarDir == "" {
		o.JarDir = "/usr/share/java"
	}
	if o.Heap == "" {
		o.Heap = "128m"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StartTimeout < 0 {
		return fmt.Errorf("testenv: ZKOptions.StartTimeout = %v, want > 0", o.StartTimeout)
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 3 * time.Second
	}
	if o.StopTimeout < 0 {
		return fmt.Errorf("testenv: ZKOptions.StopTimeout = %v, want > 0", o.StopTimeout)
	}
	o.Log = syncLog(o.Log)
	return nil
}

// zkJars is the minimal classpath (see shared/tools/zk.sh): zookeeper.jar's
// manifest would drag in jetty, jackson and netty, unused with the admin
// server off; slf4j-log4j12 + log4j-1.2 is the logging binding Debian builds for.
var zkJars = []string{
	"zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-log4j12.jar", "log4j-1.2.jar", "metrics-core.jar", "snappy-java.jar",
}

// NettyJars are what ZooKeeper's Netty connection factory (TLS client
// ports) needs from Debian's libnetty-java, a dependency of libzookeeper-java.
var NettyJars = []string{"netty-buffer.jar", "netty-codec.jar", "netty-common.jar", "netty-handler.jar",
	"netty-resolver.jar", "netty-transport.jar", "netty-transport-native-epoll.jar", "netty-transport-native-unix-common.jar"}

// ZooKeeper is a running standalone server or ensemble of real ZooKeeper
// processes (Debian's package run with plain java) on loopback ports.
// Methods are safe for concurrent use.
type ZooKeeper struct {
	opts   ZKOptions
	dir    string
	ownDir bool
	java   string
	cp     string
	owner  string
	nodes  []*zkNode // nodes[i].id == i+1
	leases []*PortLease

	mu       sync.Mutex
	stopped  bool
	stopOnce sync.Once
	stopErr  error
}

type zkNode struct {
	id                                   int
	dir                                  string
	clientPort, quorumPort, electionPort int
	proc                                 *process // nil when never started or killed; guarded by ZooKeeper.mu
	paused                               bool     // guarded by ZooKeeper.mu
}

// checkInstall returns the java path and classpath, or an error wrapping ErrNotInstalled.
func checkInstall(java, jarDir string) (string, string, error) {
	path, err := exec.LookPath(java)
	if err != nil {
		return "", "", fmt.Errorf("%w: java %q: %v", ErrNotInstalled, java, err)
	}
	cp := make([]string, len(zkJars))
	for i, j := range zkJars {
		cp[i] = filepath.Join(jarDir, j)
		if _, err := os.Stat(cp[i]); err != nil {
			return "", "", fmt.Errorf("%w: %v", ErrNotInstalled, err)
		}
	}
	return path, strings.Join(cp, ":"), nil
}

// StartZooKeeper starts opts.Nodes ZooKeeper processes and waits until they
// serve (standalone, or one leader and the rest followers). It first reaps
// servers left behind by dead testenv owners (see [ReapStale]). On error
// nothing is left running. Call Stop when done.
func StartZooKeeper(opts ZKOptions) (*ZooKeeper, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	java, cp, err := checkInstall(opts.Java, opts.JarDir)
	if err != nil {
		return nil, err
	}
	for _, j := range opts.ExtraJars {
		p := filepath.Join(opts.JarDir, j)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotInstalled, err)
		}
		cp += ":" + p
	}
	owner, err := self()
	if err != nil {
		return nil, fmt.Errorf("testenv: owner id: %w", err)
	}
	if reaped, err := ReapStale(); err == nil && len(reaped) > 0 {
		logf(opts.Log, "reaped stale: %s", strings.Join(reaped, ", "))
	}
	z := &ZooKeeper{opts: opts, java: java, cp: cp, owner: owner, dir: opts.Dir}
	if z.dir == "" {
		z.dir, err = os.MkdirTemp("", tempPrefix+"*")
		if err != nil {
			return nil, fmt.Errorf("testenv: zookeeper dir: %w", err)
		}
		z.ownDir = !opts.KeepDir
		if err := os.WriteFile(filepath.Join(z.dir, ownerFile), []byte(owner), 0o644); err != nil {
			os.RemoveAll(z.dir)
			return nil, fmt.Errorf("testenv: zookeeper dir: %w", err)
		}
	} else if z.dir, err = filepath.Abs(z.dir); err != nil {
		return nil, fmt.Errorf("testenv: zookeeper dir: %w", err)
	}
	t0 := time.Now()
	if err := z.start(); err != nil {
		z.Stop()
		return nil, err
	}
	mode := "standalone"
	if opts.Nodes > 1 {
		mode = fmt.Sprintf("%d-node ensemble", opts.Nodes)
	}
	logf(opts.Log, "zookeeper %s serving on %s after %v (dir %s)", mode, z.ConnString(), time.Since(t0).Round(time.Millisecond), z.dir)
	return z, nil
}

// ZooKeeperT starts ZooKeeper for a test or benchmark: t.Fatalf on error,
// Stop in t.Cleanup. When the test has failed, the tail of each node's log is
// written with t.Logf before the directory is removed.
func ZooKeeperT(t TB, opts ZKOptions) *ZooKeeper {
	t.Helper()
	z, err := StartZooKeeper(opts)
	if err != nil {
		t.Fatalf("testenv: start zookeeper: %v", err)
	}
	t.Cleanup(func() {
		if failed(t) {
			for _, n := range z.nodes {
				t.Logf("testenv: zookeeper node %d log tail (%s):\n%s", n.id, n.dir, tail(filepath.Join(n.dir, "zookeeper.log"), 4096))
			}
		}
		if err := z.Stop(); err != nil {
			t.Fatalf("testenv: stop zookeeper: %v", err)
		}
	})
	return z
}

func (z *ZooKeeper) start() error {
	n := z.opts.Nodes
	perNode := 1
	if n > 1 {
		perNode = 3
	}
	leases, err := ReservePorts(n * perNode)
	if err != nil {
		return err
	}
	z.leases = leases
	for i := range n {
		nd := &zkNode{id: i + 1, dir: filepath.Join(z.dir, "node"+strconv.Itoa(i+1)), clientPort: leases[i*perNode].Port()}
		if n > 1 {
			nd.quorumPort, nd.electionPort = leases[i*perNode+1].Port(), leases[i*perNode+2].Port()
		}
		z.nodes = append(z.nodes, nd)
	}
	for _, nd := range z.nodes {
		if err := z.writeConfig(nd); err != nil {
			return err
		}
	}
	z.mu.Lock()
	for _, nd := range z.nodes {
		if err = z.launch(nd); err != nil {
			break
		}
	}
	z.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), z.opts.StartTimeout)
	defer cancel()
	if err := z.WaitReady(ctx); err != nil {
		return fmt.Errorf("testenv: zookeeper did not start: %w%s", err, z.logTails())
	}
	return nil
}

func (z *ZooKeeper) writeConfig(nd *zkNode) error {
	if err := os.MkdirAll(filepath.Join(nd.dir, "data"), 0o755); err != nil {
		return fmt.Errorf("testenv: zookeeper node %d: %w", nd.id, err)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "tickTime=%d\ninitLimit=10\nsyncLimit=5\n", z.opts.TickTime.Milliseconds())
	fmt.Fprintf(&cfg, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n", filepath.Join(nd.dir, "data"), nd.clientPort)
	cfg.WriteString("4lw.commands.whitelist=ruok,srvr,mntr,stat,conf,cons,isro\nadmin.enableServer=false\n")
	if len(z.nodes) > 1 {
		cfg.WriteString("quorumListenOnAllIPs=false\nelectionPortBindRetry=10\n")
		for _, o := range z.nodes {
			fmt.Fprintf(&cfg, "server.%d=127.0.0.1:%d:%d\n", o.id, o.quorumPort, o.electionPort)
		}
		if err := os.WriteFile(filepath.Join(nd.dir, "data", "myid"), []byte(strconv.Itoa(nd.id)+"\n"), 0o644); err != nil {
			return fmt.Errorf("testenv: zookeeper node %d: %w", nd.id, err)
		}
	}
	for _, l := range z.opts.ExtraConfig {
		cfg.WriteString(l + "\n")
	}
	if err := os.WriteFile(filepath.Join(nd.dir, "zoo.cfg"), []byte(cfg.String()), 0o644); err != nil {
		return fmt.Errorf("testenv: zookeeper node %d: %w", nd.id, err)
	}
	log4j := "log4j.rootLogger=INFO, FILE\n"
	if z.opts.Log != nil {
		log4j = "log4j.rootLogger=INFO, FILE, CONSOLE\n" +
			"log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n" +
			"log4j.appender.CONSOLE.Threshold=WARN\n" +
			"log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n" +
			"log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n"
	}
	log4j += "log4j.appender.FILE=org.apache.log4j.FileAppender\n" +
		"log4j.appender.FILE.File=" + filepath.Join(nd.dir, "zookeeper.log") + "\n" +
		"log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n" +
		"log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n"
	if err := os.WriteFile(filepath.Join(nd.dir, "log4j.properties"), []byte(log4j), 0o644); err != nil {
		return fmt.Errorf("testenv: zookeeper node %d: %w", nd.id, err)
	}
	return nil
}

// launch starts nd's java process. z.mu must be held.
func (z *ZooKeeper) launch(nd *zkNode) error {
	args := []string{
		"-Xmx" + z.opts.Heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		ownerFlag + z.owner,
		"-Dbaton.testenv.dir=" + nd.dir,
		"-Dlog4j.configuration=file:" + filepath.Join(nd.dir, "log4j.properties"),
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dznode.container.checkIntervalMs=" + strconv.FormatInt(z.opts.ContainerCheckInterval.Milliseconds(), 10),
		"-Dznode.container.maxNeverUsedIntervalMs=" + strconv.FormatInt(z.opts.MaxNeverUsedInterval.Milliseconds(), 10),
	}
	args = append(args, z.opts.JVMFlags...)
	args = append(args, "-cp", z.cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(nd.dir, "zoo.cfg"))
	out, err := os.OpenFile(filepath.Join(nd.dir, "stdout.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testenv: zookeeper node %d: %w", nd.id, err)
	}
	cmd := exec.Command(z.java, args...)
	cmd.Dir = nd.dir
	cmd.Stdout, cmd.Stderr = out, out
	if z.opts.Log != nil {
		w := io.MultiWriter(out, newLineWriter(z.opts.Log, fmt.Sprintf("zk%d| ", nd.id)))
		cmd.Stdout, cmd.Stderr = w, w
	}
	p, err := spawn(cmd, func() { out.Close() }) // after Wait: the copy to Log (if any) has finished
	if err != nil {
		return fmt.Errorf("testenv: start zookeeper node %d: %w", nd.id, err)
	}
	nd.proc, nd.paused = p, false
	pidLine := fmt.Sprintf("%d %s\n", p.pid, z.owner)
	if err := os.WriteFile(filepath.Join(nd.dir, "pid"), []byte(pidLine), 0o644); err != nil {
		return fmt.Errorf("testenv: zookeeper node %d: %w", nd.id, err)
	}
	logf(z.opts.Log, "zookeeper node %d started: pid %d, client port %d", nd.id, p.pid, nd.clientPort)
	return nil
}

func (z *ZooKeeper) logTails() string {
	var b strings.Builder
	for _, nd := range z.nodes {
		fmt.Fprintf(&b, "\n--- node %d %s/zookeeper.log (tail) ---\n%s", nd.id, nd.dir, tail(filepath.Join(nd.dir, "zookeeper.log"), 2048))
		if s := tail(filepath.Join(nd.dir, "stdout.log"), 1024); s != "" {
			fmt.Fprintf(&b, "--- node %d stdout.log (tail) ---\n%s", nd.id, s)
		}
	}
	return b.String()
}

func (z *ZooKeeper) node(id int) (*zkNode, error) {
	if id < 1 || id > len(z.nodes) {
		return nil, fmt.Errorf("%w: %d (have 1..%d)", ErrNoSuchNode, id, len(z.nodes))
	}
	return z.nodes[id-1], nil
}

// Dir returns the directory holding node1..nodeN.
func (z *ZooKeeper) Dir() string { return z.dir }

// ConnString returns "127.0.0.1:p1,127.0.0.1:p2,...", every node's client address.
func (z *ZooKeeper) ConnString() string { return strings.Join(z.Servers(), ",") }

// Servers returns every node's client address, node 1 first.
func (z *ZooKeeper) Servers() []string {
	s := make([]string, len(z.nodes))
	for i, nd := range z.nodes {
		s[i] = loopback(nd.clientPort)
	}
	return s
}

// Addr returns node's client address "127.0.0.1:port" (node ids are 1..Nodes),
// or "" for an unknown node.
func (z *ZooKeeper) Addr(node int) string {
	nd, err := z.node(node)
	if err != nil {
		return ""
	}
	return loopback(nd.clientPort)
}

// Nodes returns the number of nodes.
func (z *ZooKeeper) Nodes() int { return len(z.nodes) }

// PeerPorts returns node's quorum and election ports (0, 0 for a standalone
// server or an unknown node).
func (z *ZooKeeper) PeerPorts(node int) (quorum, election int) {
	nd, err := z.node(node)
	if err != nil || len(z.nodes) < 2 {
		return 0, 0
	}
	return nd.quorumPort, nd.electionPort
}

// TickTime returns the servers' tickTime.
func (z *ZooKeeper) TickTime() time.Duration { return z.opts.TickTime }

// PID returns node's java pid, or 0 when it is not running.
func (z *ZooKeeper) PID(node int) int {
	nd, err := z.node(node)
	if err != nil {
		return 0
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if nd.proc == nil || nd.proc.exited() {
		return 0
	}
	return nd.proc.pid
}

// Stop stops every node (SIGTERM, then SIGKILL after StopTimeout), waits
// for the processes to exit, releases the ports and removes the default temp
// dir (unless KeepDir). It is idempotent; later calls return the first result.
func (z *ZooKeeper) Stop() error {
	z.stopOnce.Do(func() {
		z.mu.Lock()
		z.stopped = true
		var procs []*process
		for _, nd := range z.nodes {
			if nd.proc != nil {
				procs = append(procs, nd.proc)
			}
		}
		z.mu.Unlock()
		var errs []error
		for _, p := range procs {
			errs = append(errs, p.signal(syscall.SIGTERM), p.signal(syscall.SIGCONT)) // a paused JVM handles SIGTERM only once continued
		}
		deadline := time.Now().Add(z.opts.StopTimeout)
		for _, p := range procs {
			if !p.wait(time.Until(deadline)) {
				errs = append(errs, p.signal(syscall.SIGKILL))
				if !p.wait(30 * time.Second) {
					errs = append(errs, fmt.Errorf("testenv: zookeeper pid %d did not exit after SIGKILL", p.pid))
				}
			}
		}
		releaseAll(z.leases)
		if z.ownDir {
			if err := os.RemoveAll(z.dir); err != nil {
				errs = append(errs, fmt.Errorf("testenv: remove %s: %w", z.dir, err))
			}
		}
		z.stopErr = errors.Join(errs...)
		logf(z.opts.Log, "zookeeper %s stopped", z.ConnString())
	})
	return z.stopErr
}

// running returns nd's process if it is running. z.mu must be held.
func (z *ZooKeeper) running(nd *zkNode) (*process, error) {
	if z.stopped {
		return nil, ErrStopped
	}
	if nd.proc == nil || nd.proc.exited() {
		return nil, fmt.Errorf("%w: %d", ErrNotRunning, nd.id)
	}
	return nd.proc, nil
}

// Kill sends SIGKILL to node (a crash, paused or not) and waits for it to exit.
func (z *ZooKeeper) Kill(node int) error {
	nd, err := z.node(node)
	if err != nil {
		return err
	}
	z.mu.Lock()
	p, err := z.running(nd)
	if err == nil {
		err = p.signal(syscall.SIGKILL)
	}
	z.mu.Unlock()
	if err != nil {
		return fmt.Errorf("testenv: kill zookeeper node %d: %w", node, err)
	}
	if !p.wait(30 * time.Second) {
		return fmt.Errorf("testenv: kill zookeeper node %d: pid %d did not exit", node, p.pid)
	}
	z.mu.Lock()
	if nd.proc == p {
		nd.paused = false
	}
	z.mu.Unlock()
	logf(z.opts.Log, "zookeeper node %d killed (pid %d)", node, p.pid)
	return nil
}

// Pause freezes node with SIGSTOP: its sockets stay open but it answers nothing.
func (z *ZooKeeper) Pause(node int) error {
	return z.stopCont(node, syscall.SIGSTOP, true)
}

// Resume continues a paused node with SIGCONT.
func (z *ZooKeeper) Resume(node int) error {
	return z.stopCont(node, syscall.SIGCONT, false)
}

func (z *ZooKeeper) stopCont(node int, sig syscall.Signal, paused bool) error {
	nd, err := z.node(node)
	if err != nil {
		return err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	p, err := z.running(nd)
	if err == nil {
		err = p.signal(sig)
	}
	if err != nil {
		return fmt.Errorf("testenv: %v zookeeper node %d: %w", sig, node, err)
	}
	nd.paused = paused
	logf(z.opts.Log, "zookeeper node %d: %v (pid %d)", node, sig, p.pid)
	return nil
}

// Restart starts a killed (or crashed) node again with the same dir and
// ports, and waits until it serves (answers srvr with a mode). It fails with
// ErrRunning if the node is still running.
func (z *ZooKeeper) Restart(node int) error {
	nd, err := z.node(node)
	if err != nil {
		return err
	}
	z.mu.Lock()
	switch {
	case z.stopped:
		err = ErrStopped
	case nd.proc != nil && !nd.proc.exited():
		err = ErrRunning
	default:
		err = z.launch(nd)
	}
	z.mu.Unlock()
	if err != nil {
		return fmt.Errorf("testenv: restart zookeeper node %d: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), z.opts.StartTimeout)
	defer cancel()
	t0 := time.Now()
	for {
		mode, err := z.mode(nd)
		if err == nil && servingModes[mode] {
			logf(z.opts.Log, "zookeeper node %d serving as %s after %v", node, mode, time.Since(t0).Round(time.Millisecond))
			return nil
		}
		if err := z.pollWait(ctx, nd); err != nil {
			return fmt.Errorf("testenv: restart zookeeper node %d: %w (last: %v)%s", node, err, errOrMode(mode, err), z.logTails())
		}
	}
}

func errOrMode(mode string, err error) any {
	if err != nil {
		return err
	}
	return "mode " + mode
}

// pollWait sleeps one poll interval; it fails when ctx ends or nd (if not nil) exited.
func (z *ZooKeeper) pollWait(ctx context.Context, nd *zkNode) error {
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if nd == nil {
		return nil
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.stopped {
		return ErrStopped
	}
	if nd.proc == nil || nd.proc.exited() {
		return fmt.Errorf("zookeeper node %d exited", nd.id)
	}
	return nil
}

var servingModes = map[string]bool{"standalone": true, "leader": true, "follower": true}

// mode returns the "Mode:" line of node's srvr answer.
func (z *ZooKeeper) mode(nd *zkNode) (string, error) {
	out, err := fourLetter(nd.clientPort, "srvr")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(l, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("no mode in srvr answer %q", strings.TrimSpace(out))
}

// live returns the nodes whose process runs and is not paused.
func (z *ZooKeeper) live() ([]*zkNode, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.stopped {
		return nil, ErrStopped
	}
	var l []*zkNode
	for _, nd := range z.nodes {
		if nd.proc != nil && !nd.proc.exited() && !nd.paused {
			l = append(l, nd)
		}
	}
	return l, nil
}

// Leader returns the id of the node whose srvr says "leader" (or
// "standalone"), asking only running, unpaused nodes. It fails with
// ErrNoLeader when none or more than one does.
func (z *ZooKeeper) Leader() (int, error) {
	live, err := z.live()
	if err != nil {
		return 0, err
	}
	var leaders []int
	for _, nd := range live {
		if m, err := z.mode(nd); err == nil && (m == "leader" || m == "standalone") {
			leaders = append(leaders, nd.id)
		}
	}
	if len(leaders) != 1 {
		return 0, fmt.Errorf("%w: leaders among live nodes: %v", ErrNoLeader, leaders)
	}
	return leaders[0], nil
}

// Mode returns node's mode as srvr reports it: "standalone", "leader" or
// "follower" (an error when it does not serve).
func (z *ZooKeeper) Mode(node int) (string, error) {
	nd, err := z.node(node)
	if err != nil {
		return "", err
	}
	return z.mode(nd)
}

// WaitReady waits until every live (running, unpaused) node answers srvr
// with a serving mode and, for an ensemble, exactly one of them is leader.
// It fails at once when no node is live.
func (z *ZooKeeper) WaitReady(ctx context.Context) error {
	var last string
	for {
		live, err := z.live()
		if err != nil {
			return err
		}
		if len(live) == 0 {
			return fmt.Errorf("testenv: zookeeper: no live node")
		}
		leaders, ok := 0, true
		var st []string
		for _, nd := range live {
			m, err := z.mode(nd)
			if err != nil {
				ok = false
				st = append(st, fmt.Sprintf("node %d: %v", nd.id, err))
				continue
			}
			st = append(st, fmt.Sprintf("node %d: %s", nd.id, m))
			ok = ok && servingModes[m]
			if m == "leader" || m == "standalone" {
				leaders++
			}
		}
		if ok && leaders == 1 {
			return nil
		}
		last = strings.Join(st, "; ")
		if err := z.pollWait(ctx, nil); err != nil {
			return fmt.Errorf("testenv: zookeeper not ready: %w (last: %s)", err, last)
		}
	}
}

// FourLetter sends a four-letter word (ruok, srvr, mntr, stat, conf, cons,
// isro are whitelisted) to node and returns the answer.
func (z *ZooKeeper) FourLetter(node int, cmd string) (string, error) {
	nd, err := z.node(node)
	if err != nil {
		return "", err
	}
	out, err := fourLetter(nd.clientPort, cmd)
	if err != nil {
		return "", fmt.Errorf("testenv: zookeeper node %d %s: %w", node, cmd, err)
	}
	return out, nil
}

// Mntr returns node's parsed mntr answer, e.g. m["zk_server_state"], m["zk_packets_received"].
func (z *ZooKeeper) Mntr(node int) (map[string]string, error) {
	out, err := z.FourLetter(node, "mntr")
	if err != nil {
		return nil, err
	}
	return parseMntr(out), nil
}

// Received returns the packets node has received on the connections of the
// given sessions, summed from its cons answer (pings and the connect
// request included). A count of a test's own sessions, unlike mntr's
// zk_packets_received, leaves out every other connection to the server:
// the pings of sessions an earlier test left to expire, the four-letter
// words themselves. A session with no connection to node counts 0.
func (z *ZooKeeper) Received(node int, sessions ...int64) (int64, error) {
	out, err := z.FourLetter(node, "cons")
	if err != nil {
		return 0, err
	}
	want := make(map[int64]bool, len(sessions))
	for _, s := range sessions {
		want[s] = true
	}
	var n int64
	for l := range strings.SplitSeq(out, "\n") {
		// " /127.0.0.1:41234[1](queued=0,recved=7,sent=7,sid=0x100...,lop=...)"
		_, attrs, ok := strings.Cut(l, "](")
		if !ok {
			continue
		}
		var recved, sid int64
		var haveSid bool
		for kv := range strings.SplitSeq(strings.TrimSuffix(strings.TrimSpace(attrs), ")"), ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "recved":
				recved, err = strconv.ParseInt(v, 10, 64)
			case "sid":
				sid, err = strconv.ParseInt(strings.TrimPrefix(v, "0x"), 16, 64)
				if err != nil { // a session id above 2^63 is a uint64 in hex
					var u uint64
					u, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
					sid = int64(u)
				}
				haveSid = true
			}
			if err != nil {
				return 0, fmt.Errorf("testenv: zookeeper node %d cons: %q: %w", node, l, err)
			}
		}
		if haveSid && want[sid] {
			n += recved
		}
	}
	return n, nil
}

func parseMntr(out string) map[string]string {
	m := make(map[string]string)
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "\t"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

func fourLetter(port int, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", loopback(port), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", fmt.Errorf("empty answer to %s", cmd)
	}
	return string(b), nil
}
