package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/testenv"
	"github.com/go-zookeeper/zk"
)

var (
	buildOnce sync.Once
	buildDir  string // removed by TestMain
	batonPath string
	buildErr  error
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "echo-server" { // cost and reqcost start this executable as their echo
		os.Exit(echoServerMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "peer-sidecar" { // the gozk-* impls start this executable as their sidecar
		os.Exit(peerSidecarMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "zk-cycles" { // cost starts this executable for W1's ZooKeeper work alone
		os.Exit(zkCyclesMain(os.Args[2:]))
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// baton builds cmd/baton once for the tests that run `baton serve`.
func baton(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "baton-bench-test"); buildErr != nil {
			return
		}
		out := filepath.Join(buildDir, "baton")
		if b, err := exec.Command("go", "build", "-o", out, "../baton").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ../baton: %v\n%s", err, b)
			return
		}
		batonPath = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return batonPath
}

// TestProcessImpls runs the workloads through `baton serve` processes (one
// per client; one for all with baton-shared), and through the control's
// peer-sidecar processes (gozk-http, gozk-shared), and checks that every
// acquisition was granted to one holder at a time.
func TestProcessImpls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and baton serve processes")
	}
	bin := baton(t)
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	for _, impl := range []string{"baton-http", "baton-client", "baton-shared", "gozk-http", "gozk-shared"} {
		for _, w := range []string{"W1", "W2", "W3", "W4", "W5"} {
			t.Run(impl+"/"+w, func(t *testing.T) {
				// Baton's releases answer before their write lands
				// (?wait=false), the control's (gozk-*) wait: it has no
				// such mode.
				cfg := config{impl: impl, workload: w, zkAddr: z.Servers()[0], root: "/t/" + impl + "/" + w,
					baton: bin, clients: 4, ops: 60, objects: 10, waiters: 6, warmup: 5,
					releaseWait: strings.HasPrefix(impl, "gozk-")}
				res, err := run(cfg)
				if err != nil {
					t.Fatalf("%s %s: %v (%+v)", impl, w, err, res)
				}
				if res.Overlaps != 0 || res.Errors != 0 {
					t.Fatalf("%s %s: %d overlaps, %d errors", impl, w, res.Overlaps, res.Errors)
				}
				want := cfg.ops
				if w == "W5" {
					want = cfg.waiters
				}
				if res.Ops != want || res.OpsPerS <= 0 {
					t.Fatalf("%s %s: ops %d, %.1f/s; want %d measured", impl, w, res.Ops, res.OpsPerS, want)
				}
			})
		}
	}
}

// TestProbe runs the waiter probe small, on both protocols: every waiter
// granted once, no overlap, the sidecar's memory read, znodes back to their
// baseline (native: plus exactly the 3 nodes an object keeps by design).
func TestProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and baton serve")
	}
	bin := baton(t)
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	for _, proto := range []string{"plugin", "native"} {
		for _, k := range []int{1, 10} {
			p := &prober{bin: bin, zk: z.Servers()[0], waiters: 60, objects: k, batch: 25, znodeWait: 20 * time.Second, protocol: proto}
			res := p.run()
			if res.Error != "" || res.Errors != 0 || res.Overlaps != 0 {
				t.Fatalf("%s, objects %d: %+v", proto, k, res)
			}
			if p.completed.Load() != 60 || res.HandoffsPerS <= 0 {
				t.Fatalf("%s, objects %d: %d of 60 waiters granted, %.1f handoffs/s", proto, k, p.completed.Load(), res.HandoffsPerS)
			}
			if res.RSSWaitingMiB <= 0 || res.RSSPeakMiB < res.RSSWaitingMiB {
				t.Fatalf("%s, objects %d: RSS waiting %.1f MiB, peak %.1f MiB", proto, k, res.RSSWaitingMiB, res.RSSPeakMiB)
			}
			if res.LiveWaitingMiB <= 0 || res.LiveWaitingMiB > res.RSSPeakMiB {
				t.Fatalf("%s, objects %d: live heap and stacks %.1f MiB waiting, RSS peak %.1f MiB", proto, k, res.LiveWaitingMiB, res.RSSPeakMiB)
			}
			kept := int64(0)
			if proto == "native" {
				kept = 3 * int64(k)
			}
			// a waiter parked in the sidecar behind its gate (native) has no
			// znode until the release before it creates one
			if res.ZnodesWaiting < res.ZnodesBase+60-int64(res.Parked) || !res.ZnodesBack || res.ZnodesKept != kept || res.ZnodesAfter != res.ZnodesBase+kept {
				t.Fatalf("%s, objects %d: znodes baseline %d, waiting %d (%d parked), after %d (kept by design %d, want %d)",
					proto, k, res.ZnodesBase, res.ZnodesWaiting, res.Parked, res.ZnodesAfter, res.ZnodesKept, kept)
			}
			if (proto == "native") != (res.Parked > 0) {
				t.Fatalf("%s, objects %d: %d waiters parked behind the gates", proto, k, res.Parked)
			}
		}
	}
}

// TestEcho: the raw echo answers keep-alive requests, with or without a
// body, to both clients reqcost uses.
func TestEcho(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "e.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"status":"serving","ready":true}`
	done := make(chan struct{})
	go func() { serveEcho(ln, echoAnswer([]byte(body))); close(done) }()
	hc := unixHTTPClient(sock)
	for range 3 {
		resp, err := hc.Post("http://x/v1/locks/a/acquire", "application/json", strings.NewReader(`{"wait_ms":1}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != body {
			t.Fatalf("body %q, want %q", b, body)
		}
	}
	c := client.New(sock)
	for range 3 {
		if err := c.Ready(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	hc.CloseIdleConnections()
	ln.Close()
	<-done
}

// TestCost runs cost small: it produces every figure (CPU and context
// switches of baton serve per W1 cycle and per request, the echo's, the
// control's, W1's ZooKeeper work alone and the lean server's),
// without asserting any of their values.
func TestCost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and baton serve")
	}
	bin := baton(t)
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	res := costResult{Cycles: 50, Echo: 100}
	if err := cost(&res, z.Servers()[0], bin, 10, []string{"GOMAXPROCS=1"}); err != nil {
		t.Fatal(err)
	}
	if res.CPUUsPerCycle <= 0 || res.CtxSwPerCycle <= 0 || res.CycleP50us <= 0 || res.HealthCPUUsPerRq <= 0 ||
		res.EchoCPUUsPerRq <= 0 || res.EchoP50us <= 0 || res.ThreadsSidecar <= 0 ||
		res.ControlCPUUsPerCycle <= 0 || res.ControlCycleP50us <= 0 || res.CPUOverControl <= 0 ||
		res.ZKOnlyCPUUsPerCycle <= 0 || res.FloorCPUUsPerCycle <= res.ZKOnlyCPUUsPerCycle || res.LeanCPUUsPerCycle <= 0 || res.LeanCycleP50us <= 0 ||
		res.EngineZKOnlyCPUUsPerCycle <= 0 || res.EngineCPUUsPerCycle <= 0 || res.EngineCycleP50us <= 0 {
		t.Fatalf("a figure missing: %+v", res)
	}
	t.Logf("%+v", res)
}

// TestCPUShare: cpu finds a command that burns a core in its window (a
// shell's busy loop) and divides by the command's ops_per_s; a command that
// ends before the window does is an error, not a figure.
func TestCPUShare(t *testing.T) {
	busy := `timeout 2 sh -c 'while :; do :; done'; echo '{"ops_per_s":1000}'`
	var res cpuResult
	// Every process of the machine is measured: under make test's load (a
	// dozen test processes on 2 cores, a burner beside them) the spinning
	// shell gets a fraction of a core, and others may be as busy. So it
	// must be listed among the top 20 with at least a tenth of a core, not
	// be the busiest (it measured 26.7 %, tied with a burner, at load 7).
	if err := cpuShare(&res, []string{"sh", "-c", busy}, 200*time.Millisecond, 500*time.Millisecond, 20); err != nil {
		t.Fatal(err)
	}
	if res.OpsPerS != 1000 || len(res.Processes) == 0 {
		t.Fatalf("ops_per_s %v, processes %+v", res.OpsPerS, res.Processes)
	}
	var sh *cpuProc
	for i, p := range res.Processes { // the busiest first
		if p.Comm == "sh" {
			sh = &res.Processes[i]
			break
		}
	}
	if sh == nil || sh.CPUPct < 10 || sh.UsPerOp != sh.CPUPct/100*1e6/1000 {
		t.Fatalf("the busy shell not found busy: %+v", res.Processes)
	}
	var short cpuResult
	if err := cpuShare(&short, []string{"sh", "-c", `echo '{"ops_per_s":5}'`}, 0, 300*time.Millisecond, 3); err == nil {
		t.Fatalf("a command that ended before the window: no error (%+v)", short)
	}
}

// TestAB: ab alternates W1 cycles between two sidecars and reports, per
// round, each one's CPU and p50 and B's ratios to A's (here one build,
// B on the lean path and A without it).
func TestAB(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and two baton serve")
	}
	bin := baton(t)
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	res := abResult{Cycles: 50}
	if err := ab(&res, z.Servers()[0], [2]string{bin, bin}, [2][]string{{"BATON_LEAN_PATH=off"}, nil}, "native", 10, 2); err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) != 2 {
		t.Fatalf("%d rounds, want 2", len(res.Rounds))
	}
	for _, r := range res.Rounds {
		if r.ACPUUs <= 0 || r.BCPUUs <= 0 || r.AP50us <= 0 || r.BP50us <= 0 || r.CPURatio != r.BCPUUs/r.ACPUUs || r.P50Ratio != r.BP50us/r.AP50us {
			t.Fatalf("a figure missing or wrong: %+v", r)
		}
	}
	t.Logf("%+v", res.Rounds)
}

// TestW3LeanShapes: w3floor's lean sidecars do the ZooKeeper work of their
// shape for every acquire and release they answer, with each client —
// the peer's shape a create and a delete per cycle (two child changes),
// Baton's two data writes — and leave no child behind.
func TestW3LeanShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	addr, c := zkWithClient(t)
	dir := t.TempDir()
	const ops, warmup = 40, 10
	for _, shape := range []string{"multi", "read", "peer"} {
		before, _, err := c.Children("/")
		if err != nil {
			t.Fatal(err)
		}
		lp, err := startLeanShape(addr, filepath.Join(dir, shape+".sock"), shape)
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range []string{"stock", "go", "raw"} {
			rate, err := w3LeanRun(w3Lean{name: shape, socks: []string{lp.socket}, client: cl}, ops, warmup)
			if err != nil || rate <= 0 {
				t.Fatalf("%s, %s client: rate %v, %v", shape, cl, rate, err)
			}
		}
		lp.stop()
		after, _, err := c.Children("/")
		if err != nil {
			t.Fatal(err)
		}
		var root string
		for _, n := range after {
			if !slices.Contains(before, n) && strings.HasPrefix(n, "baton-cost-lean-") {
				root = "/" + n
			}
		}
		if root == "" {
			t.Fatalf("%s: no object node made by the lean sidecar among %v", shape, after)
		}
		_, st, err := c.Get(root)
		if err != nil {
			t.Fatal(err)
		}
		cycles := int32(3 * (ops + warmup))
		switch shape {
		case "multi", "read":
			if st.Version != 2*cycles || st.Cversion != 2*cycles {
				t.Errorf("%s: data version %d, cversion %d after %d cycles: want %d each", shape, st.Version, st.Cversion, cycles, 2*cycles)
			}
		case "peer":
			if st.Version != 0 || st.Cversion != 2*cycles {
				t.Errorf("peer: data version %d, cversion %d after %d cycles: want 0 and %d", st.Version, st.Cversion, cycles, 2*cycles)
			}
		}
		if st.NumChildren != 0 {
			t.Errorf("%s: %d children left", shape, st.NumChildren)
		}
	}
}

// zkWithClient starts a ZooKeeper server for t and connects a client to it.
func zkWithClient(t *testing.T) (string, *zk.Conn) {
	t.Helper()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	addr := z.Servers()[0]
	c, err := rawZK(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return addr, c
}

// TestRawFloors: both floors of cost (rawfloor.go) really do W1's
// ZooKeeper work, alone and as a sidecar answering all three clients, and
// keep their session across a quiet spell longer than their ping interval
// (a ping's reply read before the next multi's): the object node's data
// version and cversion count two writes per cycle, no child is left, and
// the data is the release's.
func TestRawFloors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	addr, c := zkWithClient(t)
	// newRoot returns the one root among / 's children that fn made
	newRoot := func(prefix string, fn func()) string {
		t.Helper()
		before, _, err := c.Children("/")
		if err != nil {
			t.Fatal(err)
		}
		fn()
		after, _, err := c.Children("/")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range after {
			if !slices.Contains(before, n) && strings.HasPrefix(n, prefix) {
				return "/" + n
			}
		}
		t.Fatalf("no new %s* node among %v", prefix, after)
		return ""
	}
	check := func(what, root string, cycles int32) {
		t.Helper()
		data, st, err := c.Get(root)
		if err != nil {
			t.Fatal(err)
		}
		if st.Version != 2*cycles || st.Cversion != 2*cycles || st.NumChildren != 0 || string(data) != `{"native":1}` {
			t.Errorf("%s: after %d cycles: data %q, version %d, cversion %d, %d children; want {\"native\":1}, %d, %d, 0",
				what, cycles, data, st.Version, st.Cversion, st.NumChildren, 2*cycles, 2*cycles)
		}
	}
	const ops, warmup = 40, 10
	dir := t.TempDir()
	for _, mode := range []string{"blocking", "netpoll"} {
		root := newRoot("baton-cost-zk-", func() {
			// the work is checked below; the CPU of 40 cycles is within the
			// noise of summing the threads' counters (it came out below 0)
			if _, _, err := zkCyclesCost(addr, warmup, ops, "--raw", mode); err != nil {
				t.Fatalf("zk-cycles --raw %s: %v", mode, err)
			}
		})
		check("zk-cycles --raw "+mode, root, ops+warmup)

		root = newRoot("baton-cost-lean-", func() {
			lp, err := startLeanArgs(addr, filepath.Join(dir, mode+".sock"), "--raw", mode)
			if err != nil {
				t.Fatal(err)
			}
			defer lp.stop()
			for _, cl := range []string{"stock", "go", "raw"} {
				if rate, err := w3LeanRun(w3Lean{name: mode, socks: []string{lp.socket}, client: cl}, ops, warmup); err != nil || rate <= 0 {
					t.Fatalf("--raw %s, %s client: rate %v, %v", mode, cl, rate, err)
				}
			}
			time.Sleep(2500 * time.Millisecond) // past the 2 s ping interval
			if rate, err := w3LeanRun(w3Lean{name: mode, socks: []string{lp.socket}, client: "stock"}, ops, warmup); err != nil || rate <= 0 {
				t.Fatalf("--raw %s after a quiet spell: rate %v, %v", mode, rate, err)
			}
		})
		check("zk-cycles --raw "+mode+" --socket", root, 4*(ops+warmup))
	}
}

func TestParseRawRequest(t *testing.T) {
	post := "POST /v1/locks/o/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n{\"wait_ms\":100}"
	del := "DELETE /v1/leases/l-1 HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		in     string
		method byte
		used   int
		bad    bool
	}{
		{in: ""},
		{in: post[:20]},
		{in: post[:len(post)-1]}, // the body not all there yet
		{in: post, method: 'P', used: len(post)},
		{in: post + del, method: 'P', used: len(post)},
		{in: del, method: 'D', used: len(del)},
		{in: "POST / HTTP/1.1\r\ncontent-LENGTH:  2 \r\n\r\nab", method: 'P', used: len("POST / HTTP/1.1\r\ncontent-LENGTH:  2 \r\n\r\nab")},
		{in: "POST / HTTP/1.1\r\nContent-Length: x2\r\n\r\nab", bad: true},
		{in: "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", bad: true},
	} {
		m, used, err := parseRawRequest([]byte(tc.in))
		if (err != nil) != tc.bad || m != tc.method || used != tc.used {
			t.Errorf("parseRawRequest(%q) = %q, %d, %v; want %q, %d, bad %v", tc.in, m, used, err, tc.method, tc.used, tc.bad)
		}
	}
}

// TestW5Explain: only requests inside the window count, pings by name; a
// session counts as a late waiter for a create or an exists in the window,
// not for its reads, answers or events.
func TestW5Explain(t *testing.T) {
	pkts := []zkPkt{
		{ts: 5, conn: 1, req: true, op: 3},            // before the window
		{ts: 10, conn: 1, req: true, op: 14},          // the gate's multi
		{ts: 11, conn: 2, req: true, op: 4},           // a successor's read
		{ts: 12, conn: 3, req: true, op: 3},           // a late waiter's watch
		{ts: 12, conn: 3, req: true, op: 12},          // and its listing
		{ts: 13, conn: 4, req: true, op: 1},           // a late waiter's create
		{ts: 14, conn: 5, req: false, op: 0},          // an answer
		{ts: 15, conn: 6, req: true, xid: -2, op: 11}, // a ping
		{ts: 30, conn: 7, req: true, op: 3},           // after the window
	}
	ops, late := w5Explain(pkts, 10, 20)
	want := map[string]int{"multi": 1, "getData": 1, "exists": 1, "getChildren2": 1, "create": 1, "ping": 1}
	if len(ops) != len(want) {
		t.Fatalf("ops %v, want %v", ops, want)
	}
	for k, v := range want {
		if ops[k] != v {
			t.Errorf("ops[%s] = %d, want %d (all: %v)", k, ops[k], v, ops)
		}
	}
	if late == nil || *late != 2 {
		t.Errorf("late waiters %v, want 2", late)
	}
}
