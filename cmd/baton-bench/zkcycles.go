package main

// zk-cycles (run by cost as a child process): W1's ZooKeeper work alone,
// as Baton sends it for an uncontended cycle on the native protocol: one
// multi that creates an ephemeral-sequential child and rewrites the object
// node's data guarded by its version, then one that deletes the child and
// rewrites the data again, through go-zookeeper (the client Baton must
// use) on one session, GOMAXPROCS as `baton serve`'s, with no HTTP and no
// lock logic. Its CPU per cycle is what the ZooKeeper client alone costs a
// sidecar per W1 cycle on this machine.
//
// Protocol with the parent: after the warm-up it prints "ready"; it runs
// the measured cycles when a line arrives on stdin, then prints "done".

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

func zkCyclesMain(args []string) int {
	fs := flag.NewFlagSet("zk-cycles", flag.ExitOnError)
	addr := fs.String("zk", "", "ZooKeeper address")
	root := fs.String("root", "", "a fresh znode path for the object")
	cycles := fs.Int("cycles", 2000, "measured cycles")
	warmup := fs.Int("warmup", 300, "unmeasured cycles first")
	_ = fs.Parse(args)
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1) // as `baton serve` (cmd/baton/runtime.go)
	}
	if err := zkCycles(*addr, *root, *cycles, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "zk-cycles:", err)
		return 1
	}
	return 0
}

func zkCycles(addr, root string, cycles, warmup int) error {
	c, _, err := zk.Connect([]string{addr}, 15*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		return err
	}
	defer c.Close()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create(root, nil, 0, acl); err != nil {
		return fmt.Errorf("create %s: %w", root, err)
	}
	_, st, err := c.Get(root)
	if err != nil {
		return err
	}
	version := st.Version
	cycle := func() error {
		res, err := c.Multi(
			&zk.CreateRequest{Path: root + "/A_x_r_", Data: []byte(`{"r":"r"}`), Acl: acl, Flags: zk.FlagEphemeral | zk.FlagSequence},
			&zk.SetDataRequest{Path: root, Data: []byte(`{"native":1,"h":[{"r":"r","t":0}]}`), Version: version},
		)
		if err != nil {
			return err
		}
		child := res[0].String
		version++
		if _, err := c.Multi(
			&zk.DeleteRequest{Path: child, Version: -1},
			&zk.SetDataRequest{Path: root, Data: []byte(`{"native":1}`), Version: version},
		); err != nil {
			return err
		}
		version++
		return nil
	}
	for range warmup {
		if err := cycle(); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	for range cycles {
		if err := cycle(); err != nil {
			return err
		}
	}
	fmt.Println("done")
	return nil
}

// zkCyclesCost runs zk-cycles as a child process and returns its CPU (µs)
// and context switches per measured cycle.
func zkCyclesCost(addr string, warmup, cycles int) (cpuUs, ctxsw float64, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(self, "zk-cycles", "--zk", addr, "--root", fmt.Sprintf("/baton-cost-zk-%d", time.Now().UnixNano()),
		"--cycles", strconv.Itoa(cycles), "--warmup", strconv.Itoa(warmup))
	cmd.Env = append(os.Environ(), sidecarEnv...)
	cmd.Stderr = os.Stderr
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
