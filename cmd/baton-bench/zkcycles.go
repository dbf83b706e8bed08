package main

// zk-cycles (run by cost as a child process): W1's ZooKeeper work alone,
// as Baton sends it for an uncontended cycle on the native protocol: one
// multi that creates an ephemeral-sequential child and rewrites the object
// node's data guarded by its version, then one that deletes the child and
// rewrites the data again, through go-zookeeper (the client Baton must
// use) on one session, its connection read and written through
// internal/rawio and GOMAXPROCS as `baton serve`'s, with no HTTP and no
// lock logic. Its CPU per cycle is what the ZooKeeper client alone costs a
// sidecar per W1 cycle on this machine.
//
// Protocol with the parent: after the warm-up it prints "ready"; it runs
// the measured cycles when a line arrives on stdin, then prints "done".
//
// With --socket it is instead the leanest sidecar of Baton's shape: the
// raw echo's hand-written HTTP/1.1 on a unix socket, each POST one acquire
// multi and each DELETE one release multi, sent from the connection's
// goroutine, with a canned answer; no lock logic, no net/http. --shape
// peer makes each POST the peer's uncontended acquire instead (create an
// ephemeral-sequential child, list the children) and each DELETE its
// release (delete the child): go-zookeeper's lock recipe's ZooKeeper work;
// --shape read reads the object node's data before each acquire multi (an
// acquire on an object another sidecar used last reads its version first).

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/internal/rawio"
	"github.com/go-zookeeper/zk"
)

func zkCyclesMain(args []string) int {
	fs := flag.NewFlagSet("zk-cycles", flag.ExitOnError)
	addr := fs.String("zk", "", "ZooKeeper address")
	root := fs.String("root", "", "a fresh znode path for the object")
	cycles := fs.Int("cycles", 2000, "measured cycles")
	warmup := fs.Int("warmup", 300, "unmeasured cycles first")
	sock := fs.String("socket", "", "serve W1 cycles over HTTP/1.1 on this unix socket instead")
	shape := fs.String("shape", "multi", "with --socket: multi (Baton's two multis), read (a getData, then the two multis) or peer (create + getChildren, delete)")
	engine := fs.Bool("engine", false, "the cycles through Baton's lock engine (native protocol) instead of two bare multis (enginecycles.go); with --socket behind the lean sidecar's HTTP")
	raw := fs.String("raw", "", "a floor (rawfloor.go), --shape multi only: the same work with hand-encoded requests and no ZooKeeper client library, on one thread with blocking raw sockets (blocking) or on one goroutine on Go's netpoller (netpoll)")
	_ = fs.Parse(args)
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1) // as `baton serve` (cmd/baton/runtime.go)
	}
	run := func() error { return zkCycles(*addr, *root, *cycles, *warmup) }
	blocking := *raw == "blocking"
	switch {
	case *raw != "" && !blocking && *raw != "netpoll":
		run = func() error { return fmt.Errorf("--raw %q: want blocking or netpoll", *raw) }
	case *engine && (*raw != "" || *shape != "multi"):
		run = func() error { return errors.New("--engine: not with --raw or --shape") }
	case *engine:
		run = func() error { return engineCycles(*addr, *root, *sock, *cycles, *warmup) }
	case *raw != "" && *shape != "multi":
		run = func() error { return fmt.Errorf("--raw: --shape %q: only multi", *shape) }
	case *raw != "" && *sock != "":
		run = func() error { return rawServe(*addr, *root, *sock, blocking) }
	case *raw != "":
		run = func() error { return rawCycles(*addr, *root, blocking, *cycles, *warmup) }
	case *sock != "":
		run = func() error { return leanServe(*addr, *root, *sock, *shape) }
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "zk-cycles:", err)
		return 1
	}
	return 0
}

// zkObject is one object node and the two multis of a W1 cycle on it.
type zkObject struct {
	c       *zk.Conn
	root    string
	version int32
	child   string
	peer    bool // the peer's shape (leanServe --shape peer)
	read    bool // a getData before the acquire multi (--shape read)
}

// rawioConn is a net.Conn read and written through internal/rawio, as
// baton serve's ZooKeeper connection is (lock/tracker.go).
type rawioConn struct {
	net.Conn
	io rawio.IO
}

func (c rawioConn) Read(p []byte) (int, error)  { return c.io.Read(p) }
func (c rawioConn) Write(p []byte) (int, error) { return c.io.Write(p) }

// newZKObject connects (through rawio, as baton serve) and creates root.
func newZKObject(addr, root string) (*zkObject, error) {
	c, err := rawZKDial(addr, func(network, address string, timeout time.Duration) (net.Conn, error) {
		nc, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return rawioConn{Conn: nc, io: rawio.New(nc)}, nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := c.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		c.Close()
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	_, st, err := c.Get(root)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &zkObject{c: c, root: root, version: st.Version}, nil
}

// acquire creates our child and names it in the data, guarded by its version.
func (o *zkObject) acquire() error {
	if o.peer {
		child, err := o.c.Create(o.root+"/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		if err != nil {
			return err
		}
		o.child = child
		_, _, err = o.c.Children(o.root)
		return err
	}
	if o.read { // what an acquire that did not release the object last reads first: its version
		if _, _, err := o.c.Get(o.root); err != nil {
			return err
		}
	}
	res, err := o.c.Multi(
		&zk.CreateRequest{Path: o.root + "/A_x_r_", Data: []byte(`{"r":"r"}`), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral | zk.FlagSequence},
		&zk.SetDataRequest{Path: o.root, Data: []byte(`{"native":1,"h":[{"r":"r","t":0}]}`), Version: o.version},
	)
	if err != nil {
		return err
	}
	o.child = res[0].String
	o.version++
	return nil
}

// release deletes our child and rewrites the data, guarded by its version.
func (o *zkObject) release() error {
	if o.peer {
		return o.c.Delete(o.child, -1)
	}
	if _, err := o.c.Multi(
		&zk.DeleteRequest{Path: o.child, Version: -1},
		&zk.SetDataRequest{Path: o.root, Data: []byte(`{"native":1}`), Version: o.version},
	); err != nil {
		return err
	}
	o.version++
	return nil
}

func zkCycles(addr, root string, cycles, warmup int) error {
	o, err := newZKObject(addr, root)
	if err != nil {
		return err
	}
	defer o.c.Close()
	return runCycles(o.acquire, o.release, cycles, warmup)
}

// runCycles is zk-cycles' protocol with its parent (cost): warmup
// unmeasured cycles, "ready", then a line from the parent, the measured
// cycles, "done", then the end of stdin.
func runCycles(acquire, release func() error, cycles, warmup int) error {
	cycle := func() error {
		if err := acquire(); err != nil {
			return err
		}
		return release()
	}
	for range warmup {
		if err := cycle(); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	if err := waitLine(); err != nil {
		return err
	}
	for range cycles {
		if err := cycle(); err != nil {
			return err
		}
	}
	fmt.Println("done")
	// Exit only when the parent closes stdin, after it has read this
	// process's CPU: exiting at once raced that read, and a process whose
	// threads had gone counted 0 µs or less (zk_only 0.0 and
	// netpoll_zk_only -0.1 in two of three cost runs, 2026-11-28).
	_ = waitLine()
	return nil
}

// waitLine waits for a line on stdin (the parent's "go").
func waitLine() error {
	_, err := bufio.NewReader(os.Stdin).ReadString('\n')
	return err
}

// zkCyclesCost runs zk-cycles (more: its other flags, e.g. --raw) as a
// child process and returns its CPU (µs) and context switches per
// measured cycle.
func zkCyclesCost(addr string, warmup, cycles int, more ...string) (cpuUs, ctxsw float64, err error) {
	cmd, err := zkCyclesCmd(addr, "zk", append([]string{"--cycles", strconv.Itoa(cycles), "--warmup", strconv.Itoa(warmup)}, more...)...)
	if err != nil {
		return 0, 0, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = in.Close(); _ = cmd.Wait() }()
	r := bufio.NewReader(out)
	expect := func(want string) error {
		l, err := r.ReadString('\n')
		if strings.TrimSpace(l) != want {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("zk-cycles said %q, want %q", l, want)
			}
			return err
		}
		return nil
	}
	if err := expect("ready"); err != nil {
		return 0, 0, err
	}
	c0, err := procCost(cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		return 0, 0, err
	}
	if err := expect("done"); err != nil {
		return 0, 0, err
	}
	c1, err := procCost(cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	n := float64(cycles)
	return float64(c1.cpuNs-c0.cpuNs) / 1000 / n, float64(c1.ctxsw-c0.ctxsw) / n, nil
}

// The lean and raw sidecars' answers: a lease as `baton serve` answers it
// (for a client that decodes it, the Go client), a release, a failure.
var (
	leanAcquired = echoAnswer([]byte(`{"lease_id":"l-7f3a9c2e1b4d4e8f9a0b1c2d3e4f5a6b","object":"o","type":"foreground","info":"","token":"12884902145",` +
		`"node":"/lean/o/A_x_7f3a9c2e_0000000123","acquired_at":"2026-11-28T04:50:01.123Z","lease_expires_at":"2026-11-28T04:50:31.123Z",` +
		`"valid_until":"2026-11-28T04:50:11.123Z","valid_for_ms":9998,"state":"held","waited_ms":0,"holds":1,"mode":"exclusive"}`))
	leanReleased = echoAnswer([]byte(`{"released":true}`))
	leanFailed   = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
)

// w1Object is an object's two W1 requests' ZooKeeper work (zkObject,
// rawObject).
type w1Object interface {
	acquire() error
	release() error
}

// w1Answer does a W1 request's ZooKeeper work (post: acquire; del:
// release; neither: none) and returns the lean and raw sidecars' answer.
func w1Answer(o w1Object, post, del bool) []byte {
	var err error
	answer := leanAcquired
	switch {
	case post:
		err = o.acquire()
	case del:
		err, answer = o.release(), leanReleased
	}
	if err != nil {
		return leanFailed
	}
	return answer
}

// leanServe answers W1 cycles on sock: a POST acquires, a DELETE releases
// (W1 is sequential: one holder of the one object at a time), in shape
// "multi" or "peer".
func leanServe(addr, root, sock, shape string) error {
	if shape != "multi" && shape != "peer" && shape != "read" {
		return fmt.Errorf("--shape %q: want multi, read or peer", shape)
	}
	o, err := newZKObject(addr, root)
	if err != nil {
		return err
	}
	o.peer, o.read = shape == "peer", shape == "read"
	defer o.c.Close()
	return leanListen(sock, o)
}

// engineCycles is zk-cycles --engine: the cycles (or, with sock, the lean
// sidecar) through Baton's engine.
func engineCycles(addr, root, sock string, cycles, warmup int) error {
	o, err := newEngineObject(addr, root)
	if err != nil {
		return err
	}
	defer o.e.Close()
	if sock != "" {
		return leanListen(sock, o)
	}
	return runCycles(o.acquire, o.release, cycles, warmup)
}

// leanListen serves the lean sidecar's HTTP/1.1 on sock, each request's
// work done by o (w1Answer).
func leanListen(sock string, o w1Object) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		// the app's connection through rawio too, as baton serve's
		// (sidecar/caps.go): through net.Conn every request and answer
		// woke sysmon, a fifth of this sidecar's CPU (perf, 2026-11-28)
		c = rawioConn{Conn: c, io: rawio.New(c)}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				method, err := readRequest(br)
				if err != nil {
					return
				}
				answer := w1Answer(o, method == "POST", method == "DELETE")
				if _, err := c.Write(answer); err != nil {
					return
				}
			}
		}()
	}
}

// leanProc is a running lean server.
type leanProc struct {
	pid    int
	socket string
	stop   func()
}

// startLean starts zk-cycles --socket on sock and waits until it accepts.
func startLean(addr, sock string) (*leanProc, error) { return startLeanArgs(addr, sock) }

// startLeanArgs is startLean with more zk-cycles flags.
func startLeanArgs(addr, sock string, args ...string) (*leanProc, error) {
	cmd, err := zkCyclesCmd(addr, "lean", append([]string{"--socket", sock}, args...)...)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	for i := 0; ; i++ {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return &leanProc{pid: cmd.Process.Pid, socket: sock, stop: stop}, nil
		}
		if i > 1000 {
			stop()
			return nil, fmt.Errorf("lean server: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zkCyclesCmd is this executable's zk-cycles on a fresh root named after
// what (args: its other flags), with the sidecar's environment (--env);
// it dies with its parent.
func zkCyclesCmd(addr, what string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	root := fmt.Sprintf("/baton-cost-%s-%d", what, time.Now().UnixNano())
	cmd := exec.Command(self, append([]string{"zk-cycles", "--zk", addr, "--root", root}, args...)...)
	cmd.Env = append(os.Environ(), sidecarEnv...)
	if i := slices.Index(args, "--raw"); i >= 0 && i+1 < len(args) && args[i+1] == "blocking" {
		// the floor blocks its one thread in raw system calls: no
		// preemption signals to interrupt them (rawfloor.go)
		cmd.Env = append(cmd.Env, "GODEBUG=asyncpreemptoff=1")
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}
