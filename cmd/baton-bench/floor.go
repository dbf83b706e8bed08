package main

// floor: where a W4 handoff's time goes, against what this machine cannot
// go below. In one run on one ZooKeeper, round after round, it interleaves
// the primitives a handoff is made of (a release-shaped multi, a plain
// delete, getData, getChildren, the latency of a watch event from a delete
// on one session to the watch firing on another, a stock net/http round
// trip over a unix socket to `baton serve`'s /healthz and to a raw echo)
// with W4 runs of each implementation (go-zookeeper's lock and Baton's
// modes, each a subprocess), recording ZooKeeper's packets on the loopback
// during every W4 run (wire.go): each handoff, from the holder's t0 to the
// waiter's t1 (BATON_BENCH_STAMPS), becomes a sequence of wire events
// whose segment medians it prints.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/client"
)

func floorMain(args []string) int {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	zkAddr := fs.String("zk", "", "ZooKeeper address (default: start one with testenv)")
	bat := fs.String("baton", "", "the baton executable")
	gozk := fs.String("gozk", "", "the peers harness's go-zookeeper lockbench binary (gozk/bin/lockbench); empty: no gozk runs")
	rounds := fs.Int("rounds", 3, "rounds (primitives, then every impl's W4)")
	n := fs.Int("n", 200, "samples of each primitive per round")
	ops := fs.Int("ops", 300, "W4 handoffs per run")
	warmup := fs.Int("warmup", 100, "W4 warm-up handoffs per run")
	impls := fs.String("impls", "gozk engine:native http:native client:native shared:native http:plugin shared:plugin",
		"W4 runs per round: gozk, or a baton impl (engine, http, client, shared) with :native or :plugin")
	capture := fs.Bool("capture", true, "record ZooKeeper's packets on lo during W4 (needs CAP_NET_RAW)")
	settle := fs.Duration("settle", 0, "passed to Baton's W4 runs (baton-bench W4 --settle): release this long after the waiter queued; gozk is not run then")
	var env envFlags
	fs.Var(&env, "env", "KEY=VALUE for every `baton serve` (and the W4 runs, whose sidecars inherit it), e.g. GOMAXPROCS=2; repeatable")
	_ = fs.Parse(args)
	sidecarEnv = env
	w4Settle = *settle
	if err := floor(*zkAddr, *bat, *gozk, *rounds, *n, *ops, *warmup, strings.Fields(*impls), *capture); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	return 0
}

// primParked names the primitive of a parked handoff's release multi.
const primParked = "zk write: multi (delete child + create child + setData, guarded + check: a parked handoff)"

// the primitives the floors are made of (primitives' keys)
const (
	primMulti   = "zk write: multi (delete child + setData, guarded)"
	primRTStock = "http round trip: stock client → raw echo"
	primRTGo    = "http round trip: Baton's Go client → raw echo"
)

// w4Settle is floor's --settle.
var w4Settle time.Duration

// floorRun accumulates one implementation's W4 runs.
type floorRun struct {
	name     string
	p50      []float64
	handoffs int
	segs     map[string][]int64 // segment → its duration in each handoff (ns)
	ops      map[string]int     // "H|W opname" → requests in all handoffs
}

func floor(zkAddr, bat, gozk string, rounds, n, ops, warmup int, impls []string, capture bool) error {
	fmt.Printf("floor: load at start %s, %s UTC\n", loadAvg(), time.Now().UTC().Format("2006-01-02 15:04:05"))
	bin, addr, dir, done, err := benchSetup(bat, zkAddr, "bbf")
	if err != nil {
		return err
	}
	defer done()
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	run := fmt.Sprintf("/floor-%d", time.Now().UnixNano())

	// primitives' setup: two sessions, a sidecar, the echo
	a, err := rawZK(addr)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := rawZK(addr)
	if err != nil {
		return err
	}
	defer b.Close()
	obj := run + "/o"
	for _, p := range []string{run, obj} {
		if _, err := a.Create(p, []byte(`{"native":1}`), 0, zk.WorldACL(zk.PermAll)); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	sc, err := startSidecar(bin, dir, "floor", map[string]string{
		"zookeeper.servers":         addr,
		"zookeeper.session.timeout": "15000",
		"zookeeper.tick.time":       strconv.Itoa(tickTime(addr)),
		"zookeeper.lock.root":       run + "/sidecar",
	})
	if err != nil {
		return err
	}
	defer sc.stop()
	hc := unixHTTPClient(sc.socket)
	body, err := httpGet(hc)
	if err != nil {
		return err
	}
	bodyFile := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return err
	}
	var echoes []*http.Client // the raw echo, then a stock net/http server
	var echoSocks []string
	for i, extra := range [][]string{nil, {"--nethttp"}} {
		sock := filepath.Join(dir, fmt.Sprintf("echo%d.sock", i))
		_, stop, err := startEcho(exe, sock, bodyFile, nil, extra...)
		if err != nil {
			return err
		}
		defer stop()
		echoes = append(echoes, unixHTTPClient(sock))
		echoSocks = append(echoSocks, sock)
	}

	var wc *wireCapture
	if capture {
		if wc, err = startCapture(port); err != nil {
			return err
		}
		defer wc.stop()
	}
	prim := map[string][]time.Duration{}
	runs := map[string]*floorRun{}
	peer := map[string][]result{} // the peer's W1 and W2, each round: the W1 and W2 floors against the same moments
	for r := range rounds {
		if err := primitives(a, b, hc, echoes, client.New(sc.socket), client.New(echoSocks[0]), obj, n, prim); err != nil {
			return fmt.Errorf("round %d: primitives: %w", r, err)
		}
		if gozk != "" && w4Settle == 0 {
			for _, w := range []struct{ name, clients, ops, warmup string }{{"W1", "1", "1000", "300"}, {"W2", "8", "2000", "500"}} {
				res, err := peerRun(gozk, w.name, "--zk", addr, "--root", fmt.Sprintf("%s/%s-%d", run, strings.ToLower(w.name), r),
					"--clients", w.clients, "--ops", w.ops, "--warmup", w.warmup, "--objects", "1", "--impl", "gozk")
				if err != nil {
					return fmt.Errorf("round %d: gozk %s: %w", r, w.name, err)
				}
				peer[w.name] = append(peer[w.name], res)
			}
		}
		for k := range impls {
			impl := impls[(k+r)%len(impls)] // rotated: noise hits all alike
			name, argv := w4Argv(impl, gozk, exe, bin, addr, fmt.Sprintf("%s/w4-%d-%d", run, r, k), ops, warmup)
			if argv == nil {
				continue
			}
			fr := runs[name]
			if fr == nil {
				fr = &floorRun{name: name, segs: map[string][]int64{}, ops: map[string]int{}}
				runs[name] = fr
			}
			if err := w4Once(fr, argv, dir, wc); err != nil {
				return fmt.Errorf("round %d: %s: %w", r, name, err)
			}
		}
	}
	fmt.Printf("floor: load at end %s, %s UTC\n\n", loadAvg(), time.Now().UTC().Format("2006-01-02 15:04:05"))
	fmt.Printf("primitives, %d rounds × %d samples, interleaved:\n\n| primitive | p50 µs | p10 µs | p90 µs |\n|---|---|---|---|\n", rounds, n)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range prim {
			if !yield(k) {
				return
			}
		}
	}) {
		v := prim[k]
		slices.Sort(v)
		fmt.Printf("| %s | %.0f | %.0f | %.0f |\n", k, quantileUs(v, 0.5), quantileUs(v, 0.1), quantileUs(v, 0.9))
	}
	for _, impl := range impls {
		name, _ := w4Argv(impl, gozk, exe, bin, addr, "", ops, warmup)
		if fr := runs[name]; fr != nil {
			fr.print()
		}
	}
	floorTable(prim, runs)
	printPeerFloors(prim, peer)
	return nil
}

// peerRun runs one workload of the peers harness's go-zookeeper lockbench.
func peerRun(argv ...string) (result, error) {
	res, err := runResult(exec.Command(argv[0], argv[1:]...))
	if err == nil && res.Overlaps != 0 {
		err = fmt.Errorf("%d overlaps", res.Overlaps)
	}
	return res, err
}

// runResult runs a workload command (killed if this process dies) and
// reads the result it prints; its error, or the result's.
func runResult(cmd *exec.Cmd) (result, error) {
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	var res result
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		return res, fmt.Errorf("%v: %s", err, out)
	}
	if res.Error != "" || err != nil {
		return res, fmt.Errorf("%v %s", err, res.Error)
	}
	return res, nil
}

// primP50 is the p50 of primitive k, in µs.
func primP50(prim map[string][]time.Duration, k string) float64 {
	v := slices.Clone(prim[k])
	slices.Sort(v)
	return quantileUs(v, 0.5)
}

// peerFloor is one row of peerFloors: a goal, what its floor is made of,
// the floor per acquisition and its ratio to the peer's figure.
type peerFloor struct {
	goal, floor string
	us, ratio   float64
}

// peerFloors sets W1's and W2-on-one-sidecar's floors against the peer's W1
// and W2 of the same run (interleaved with the primitives, round by round):
// W1, Baton's cycle is two multis (the fast path's grant, the release: the
// release multi's shape) and two round trips, against the peer's cycle p50;
// W2 on one shared sidecar, each acquisition a parked handoff's write and a
// Go-client round trip, against the peer's acquisitions per second (a
// ratio of rates: above the goal means the goal is within the floor).
func peerFloors(prim map[string][]time.Duration, w1p50, w2rate float64) []peerFloor {
	w, wp := primP50(prim, primMulti), primP50(prim, primParked)
	rs, rg := primP50(prim, primRTStock), primP50(prim, primRTGo)
	return []peerFloor{
		{"W1 ≤ 1.0×, stock client (cycle p50)", "two multis + two stock round trips", 2*w + 2*rs, (2*w + 2*rs) / w1p50},
		{"W1 ≤ 0.9×, Go client (cycle p50)", "two multis + two Go round trips", 2*w + 2*rg, (2*w + 2*rg) / w1p50},
		{"W2 shared ≥ 1.5× (acquisitions/s)", "a parked handoff's multi + a Go round trip", wp + rg, 1e6 / (wp + rg) / w2rate},
	}
}

// printPeerFloors prints peerFloors with the peer's runs.
func printPeerFloors(prim map[string][]time.Duration, peer map[string][]result) {
	if len(peer["W1"]) == 0 || len(peer["W2"]) == 0 {
		return
	}
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	p50 := func(r result) float64 { return r.P50us }
	rate := func(r result) float64 { return r.OpsPerS }
	w1, w2 := med(peer["W1"], p50), med(peer["W2"], rate)
	fmt.Printf("\nW1 and W2 floors against the peer's own runs, interleaved (gozk W1 p50 per round %v, median %.0f µs; W2 acquisitions/s per round %v, median %.0f):\n\n"+
		"| goal | floor | floor µs per cycle or acquisition | floor × peer |\n|---|---|---|---|\n",
		fmtRuns(peer["W1"], p50), w1, fmtRuns(peer["W2"], rate), w2)
	for _, f := range peerFloors(prim, w1, w2) {
		fmt.Printf("| %s | %s | %.0f | %.2f |\n", f.goal, f.floor, f.us, f.ratio)
	}
}

// fmtRuns is f of each run, rounded.
func fmtRuns(rs []result, f func(result) float64) []int {
	v := make([]int, len(rs))
	for i, r := range rs {
		v[i] = int(f(r) + 0.5)
	}
	return v
}

// floorTable sets each mode's W4 against its floor: the peer's handoff
// (one write, its event, one read: the same ZooKeeper work as a native
// handoff across sidecars) plus what the mode cannot do without — the two
// HTTP half-hops (a round trip to the raw echo, with the client the mode
// uses), and for the plugin protocol across sidecars the successor's own
// write in series. A local handoff (both clients on one sidecar), on either
// protocol, is one write and the round trip: no event, no read.
func floorTable(prim map[string][]time.Duration, runs map[string]*floorRun) {
	p50 := func(k string) float64 { return primP50(prim, k) }
	med := func(name string) float64 {
		fr := runs[name]
		if fr == nil || len(fr.p50) == 0 {
			return 0
		}
		v := slices.Clone(fr.p50)
		slices.Sort(v)
		return v[len(v)/2]
	}
	peer := med("gozk")
	if peer == 0 {
		return
	}
	w := p50(primMulti)
	rs := p50(primRTStock)
	rg := p50(primRTGo)
	fmt.Printf("\nfloors (peer = gozk W4 p50 %.0f µs; write %.0f (a parked handoff's: %.0f), stock-client round trip %.0f, Go-client round trip %.0f):\n\n"+
		"| mode | impl | W4 p50 µs | × peer | floor µs | floor × peer | goal | above the floor µs |\n|---|---|---|---|---|---|---|---|\n",
		peer, w, p50(primParked), rs, rg)
	for _, m := range []struct {
		mode, impl, floor string
		f, goal           float64
	}{
		{"native, engine alone", "baton-engine-native", "peer", peer, 1.0},
		{"native across sidecars, stock client", "baton-http-native", "peer + stock round trip", peer + rs, 1.0},
		{"native across sidecars, Go client", "baton-client-native", "peer + Go round trip", peer + rg, 1.0},
		{"native, local handoff (one sidecar)", "baton-shared-native", "write + Go round trip", w + rg, 0.7},
		{"plugin across sidecars, stock client", "baton-http", "peer + write + stock round trip", peer + w + rs, 1.5},
		// the plugin's local handoff is one write too (its release multi
		// creates the successor's privateLock; 30615b9): the same floor
		// and the same goal as the native protocol's
		{"plugin, local handoff (one sidecar)", "baton-shared", "write + Go round trip", w + rg, 0.7},
	} {
		got := med(m.impl)
		if got == 0 {
			continue
		}
		fmt.Printf("| %s | %s | %.0f | %.2f | %.0f (%s) | %.2f | ≤ %.1f | %.0f |\n",
			m.mode, m.impl, got, got/peer, m.f, m.floor, m.f/peer, m.goal, got-m.f)
	}
}

func httpGet(c *http.Client) ([]byte, error) {
	resp, err := c.Get("http://baton/healthz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// primitives adds n samples of each primitive, interleaved.
func primitives(a, b *zk.Conn, hc *http.Client, echoes []*http.Client, bc, be *client.Client, obj string, n int, s map[string][]time.Duration) error {
	acl := zk.WorldACL(zk.PermAll)
	data := []byte(`{"native":1,"h":[{"r":"floor"}]}`)
	for range n {
		// the native release's shape: delete our child, rewrite the data guarded by its version
		c, err := a.Create(obj+"/c-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			return err
		}
		_, st, err := a.Get(obj)
		if err != nil {
			return err
		}
		t := time.Now()
		if _, err := a.Multi(&zk.DeleteRequest{Path: c, Version: -1}, &zk.SetDataRequest{Path: obj, Data: data, Version: st.Version}); err != nil {
			return err
		}
		s["zk write: multi (delete child + setData, guarded)"] = append(s["zk write: multi (delete child + setData, guarded)"], time.Since(t))
		// a parked handoff's shape: delete our child, create the
		// successor's, rewrite the data guarded, check the sentinel
		c, err = a.Create(obj+"/c-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			return err
		}
		if _, st, err = a.Get(obj); err != nil {
			return err
		}
		t = time.Now()
		res, err := a.Multi(&zk.DeleteRequest{Path: c, Version: -1},
			&zk.CreateRequest{Path: obj + "/c-", Data: data, Acl: acl, Flags: zk.FlagEphemeral | zk.FlagSequence},
			&zk.SetDataRequest{Path: obj, Data: data, Version: st.Version},
			&zk.CheckVersionRequest{Path: obj, Version: -1})
		if err != nil {
			return err
		}
		s[primParked] = append(s[primParked], time.Since(t))
		if err := a.Delete(res[1].String, -1); err != nil {
			return err
		}
		// the peer's release: a delete, watched from another session
		c, err = a.Create(obj+"/c-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			return err
		}
		ok, _, ch, err := b.ExistsW(c)
		if err != nil || !ok {
			return fmt.Errorf("existsW %s: %v %v", c, ok, err)
		}
		t = time.Now()
		if err := a.Delete(c, -1); err != nil {
			return err
		}
		s["zk write: delete"] = append(s["zk write: delete"], time.Since(t))
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			return errors.New("no watch event within 10 s")
		}
		s["zk event: delete sent → watch fired on another session"] = append(s["zk event: delete sent → watch fired on another session"], time.Since(t))
		t = time.Now()
		if _, _, err := b.Get(obj); err != nil {
			return err
		}
		s["zk read: getData"] = append(s["zk read: getData"], time.Since(t))
		t = time.Now()
		if _, _, err := b.Children(obj); err != nil {
			return err
		}
		s["zk read: getChildren"] = append(s["zk read: getChildren"], time.Since(t))
		t = time.Now()
		if _, err := httpGet(hc); err != nil {
			return err
		}
		s["http round trip: stock client → baton serve /healthz"] = append(s["http round trip: stock client → baton serve /healthz"], time.Since(t))
		for i, name := range []string{"http round trip: stock client → raw echo", "http round trip: stock client → stock net/http server, trivial handler"} {
			t = time.Now()
			if _, err := httpGet(echoes[i]); err != nil {
				return err
			}
			s[name] = append(s[name], time.Since(t))
		}
		for name, c := range map[string]*client.Client{"http round trip: Baton's Go client → baton serve /readyz": bc, "http round trip: Baton's Go client → raw echo": be} {
			t = time.Now()
			if err := c.Ready(context.Background()); err != nil {
				return err
			}
			s[name] = append(s[name], time.Since(t))
		}
	}
	return nil
}

// w4Argv is the command of one W4 run and the name it reports.
func w4Argv(impl, gozk, exe, bin, addr, root string, ops, warmup int) (string, []string) {
	common := []string{"--zk", addr, "--root", root, "--clients", "2", "--ops", strconv.Itoa(ops),
		"--warmup", strconv.Itoa(warmup), "--objects", "1", "--waiters", "1"}
	if impl == "gozk" {
		if gozk == "" || w4Settle > 0 {
			return "gozk", nil
		}
		return "gozk", append(append([]string{gozk, "W4"}, common...), "--impl", "gozk")
	}
	b, proto, _ := strings.Cut(impl, ":")
	if proto == "" {
		proto = "plugin"
	}
	name := "baton-" + b
	if b == "inproc" {
		name = "baton"
	}
	argv := append(append([]string{exe, "W4"}, common...), "--impl", name, "--protocol", proto, "--baton", bin, "--settle", w4Settle.String())
	if proto == "native" {
		name += "-native"
	}
	return name, argv
}

// w4Once runs one W4 and adds its p50 and its handoffs' wire sequences.
func w4Once(fr *floorRun, argv []string, dir string, wc *wireCapture) error {
	stampFile := filepath.Join(dir, "stamps")
	_ = os.Remove(stampFile)
	sdir := filepath.Join(dir, "sidecar-stamps")
	_ = os.RemoveAll(sdir)
	if err := os.Mkdir(sdir, 0o700); err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), sidecarEnv...), "BATON_BENCH_STAMPS="+stampFile, "BATON_DEBUG_STAMPS="+sdir)
	if wc != nil {
		wc.take()
	}
	res, err := runResult(cmd)
	if err != nil {
		return err
	}
	fr.p50 = append(fr.p50, res.P50us)
	if wc == nil {
		return nil
	}
	time.Sleep(50 * time.Millisecond) // the capture's last packets
	pkts := wc.take()
	var windows [][2]int64
	if b, err := os.ReadFile(stampFile); err == nil {
		for line := range strings.Lines(string(b)) {
			var t0, t1 int64
			if _, err := fmt.Sscan(line, &t0, &t1); err == nil {
				windows = append(windows, [2]int64{t0, t1})
			}
		}
	} else {
		// no stamps (gozk): a handoff runs from a delete to the next create
		for i, p := range pkts {
			if p.req && p.op == 2 {
				end := p.ts + int64(10*time.Millisecond)
				for _, q := range pkts[i+1:] {
					if q.req && (q.op == 1 || q.op == 15) {
						end = q.ts
						break
					}
				}
				windows = append(windows, [2]int64{p.ts, end})
			}
		}
		windows = windows[len(windows)/4:] // its warm-up: W4 here runs ops + ops/3 handoffs
	}
	var reqs []sidecarStamp
	files, _ := filepath.Glob(filepath.Join(sdir, "*.stamps"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(b)) {
			var r sidecarStamp
			if _, err := fmt.Sscan(line, &r.method, &r.path, &r.recv, &r.done); err == nil {
				reqs = append(reqs, r)
			}
		}
	}
	addWindows(fr, pkts, windows, reqs)
	return nil
}

// sidecarStamp is one request as a sidecar recorded it (BATON_DEBUG_STAMPS).
type sidecarStamp struct {
	method, path string
	recv, done   int64
}

// addWindows breaks each handoff [t0, t1] down on the wire: the release's
// write (the first multi or delete in the window, on the holder's
// connection H), its answer, the first watch event of a deletion, the last
// ZooKeeper answer before t1; and counts the requests per connection (H,
// or W: any other) and opcode. Pings are left out.
func addWindows(fr *floorRun, pkts []zkPkt, windows [][2]int64, reqs []sidecarStamp) {
	reqOp := map[[2]int64]int32{}
	for _, p := range pkts {
		if p.req {
			reqOp[[2]int64{int64(p.conn), int64(p.xid)}] = p.op
		}
	}
	j := 0
	for _, w := range windows {
		for j < len(pkts) && pkts[j].ts < w[0] {
			j++
		}
		var in []zkPkt
		for k := j; k < len(pkts) && pkts[k].ts <= w[1]; k++ {
			if p := pkts[k]; p.xid != -2 && !(p.req && p.op == 11) {
				in = append(in, p)
			}
		}
		fr.handoffs++
		seg := map[string]int64{"t0 → t1 (W4's latency)": w[1] - w[0]}
		var rel, sw *zkPkt // the release's write; the successor's write (plugin: privateLock)
		var relAns, ev, evNext, swAns, last int64
		evConn := -1
		for x := range in {
			p := &in[x]
			if rel == nil && p.req && (p.op == 14 || p.op == 2) {
				rel = p
				continue
			}
			if rel == nil {
				continue
			}
			if !p.req && p.conn == rel.conn && p.xid == rel.xid && relAns == 0 {
				relAns = p.ts
			}
			if !p.req && p.xid == -1 && p.op == 2 && ev == 0 {
				ev, evConn = p.ts, p.conn
			}
			if p.req && p.conn == evConn && evNext == 0 {
				evNext = p.ts
			}
			if sw == nil && p.req && p.conn != rel.conn && (p.op == 14 || p.op == 1 || p.op == 15) {
				sw = p
			}
			if sw != nil && !p.req && p.conn == sw.conn && p.xid == sw.xid {
				swAns = p.ts
			}
			if !p.req && p.xid != -1 {
				last = p.ts
			}
		}
		if evNext != 0 {
			seg["c2. deletion event → the successor's next request sent (its wake-up)"] = evNext - ev
		}
		if swAns != 0 {
			seg["d2. the successor's write sent → answered"] = swAns - sw.ts
		}
		for _, p := range in {
			role := "W"
			if rel != nil && p.conn == rel.conn {
				role = "H"
			}
			if p.req {
				fr.ops[role+" "+zkOpName(p.op)]++
			}
		}
		if rel != nil {
			listed := false
			for _, p := range in {
				if p.ts > rel.ts {
					break
				}
				listed = listed || (p.req && p.conn == rel.conn && (p.op == 8 || p.op == 12))
			}
			if listed {
				seg["a+. t0 → release write sent, after a listing by the releaser"] = rel.ts - w[0]
			} else {
				seg["a. t0 → release write sent (client request, sidecar, engine)"] = rel.ts - w[0]
			}
			if relAns != 0 {
				seg["b. release write sent → answered (ZooKeeper write)"] = relAns - rel.ts
				seg["b2. release write answered → t1"] = w[1] - relAns
			}
			if ev != 0 {
				seg["c. release write sent → deletion event on the wire"] = ev - rel.ts
				if last > ev {
					seg["d. deletion event → successor's last ZooKeeper answer"] = last - ev
				}
			}
			if last != 0 {
				seg["e. last ZooKeeper answer → t1 (sidecar's answer, client)"] = w[1] - last
			}
		}
		// the sidecars' own stamps: the release's arrival, the grant's answer
		var relRecv, acqDone int64
		for _, r := range reqs {
			if r.method == "DELETE" && r.recv >= w[0] && r.recv <= w[1] && relRecv == 0 {
				relRecv = r.recv
			}
			if r.method == "POST" && strings.HasSuffix(r.path, "/acquire") && r.done >= w[0] && r.done <= w[1] {
				acqDone = max(acqDone, r.done)
			}
		}
		if relRecv != 0 {
			seg["h1. t0 → the holder's sidecar has the release (client, HTTP request)"] = relRecv - w[0]
			if rel != nil && rel.ts > relRecv {
				seg["h2. the holder's sidecar has the release → release write sent"] = rel.ts - relRecv
			}
		}
		if acqDone != 0 {
			var lastBefore int64
			for _, p := range in {
				if !p.req && p.xid != -1 && p.ts < acqDone {
					lastBefore = p.ts
				}
			}
			if lastBefore != 0 {
				seg["h3. the grant's last ZooKeeper answer → the waiter's sidecar has answered"] = acqDone - lastBefore
			}
			seg["h4. the waiter's sidecar has answered → t1 (HTTP answer, client)"] = w[1] - acqDone
		}
		for k, v := range seg {
			fr.segs[k] = append(fr.segs[k], v)
		}
	}
}

func (fr *floorRun) print() {
	p := slices.Clone(fr.p50)
	slices.Sort(p)
	fmt.Printf("\n### W4 %s: p50 µs per run %v, median %.0f\n\n", fr.name, fr.p50, p[len(p)/2])
	if fr.handoffs == 0 {
		return
	}
	fmt.Printf("%d handoffs on the wire\n\n| segment | handoffs | median µs |\n|---|---|---|\n", fr.handoffs)
	for _, k := range slices.Sorted(maps.Keys(fr.segs)) {
		v := fr.segs[k]
		slices.Sort(v)
		fmt.Printf("| %s | %d | %.0f |\n", k, len(v), float64(v[len(v)/2])/1000)
	}
	fmt.Printf("\nrequests per handoff (H: the releasing connection, W: any other):")
	for _, k := range slices.Sorted(maps.Keys(fr.ops)) {
		fmt.Printf(" %s %.2f;", k, float64(fr.ops[k])/float64(fr.handoffs))
	}
	fmt.Println()
}
