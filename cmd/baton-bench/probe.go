package main

// probe: many concurrent waiting acquires on one `baton serve` process —
// its memory while they wait and at its peak, how fast the queue drains
// (handoffs/s) on one object and spread over many, and whether ZooKeeper's
// znode count is back to its baseline afterwards.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/testenv"
)

type probeResult struct {
	Probe         string  `json:"probe"`
	Waiters       int     `json:"waiters"`
	Objects       int     `json:"objects"`
	Conns         int     `json:"conns"` // HTTP connections held open by the waiting acquires
	QueueS        float64 `json:"queue_s"`
	RSSIdleMiB    float64 `json:"rss_idle_mib"`
	RSSWaitingMiB float64 `json:"rss_waiting_mib"`
	RSSPeakMiB    float64 `json:"rss_peak_mib"`
	RSSAfterMiB   float64 `json:"rss_after_mib"`
	// (VmRSS waiting − VmRSS idle) / waiters: the sidecar's memory per
	// waiting acquire (its connection, goroutines, buffers, the engine's
	// waiter), the gates' share included
	BytesPerWaiter float64 `json:"bytes_per_waiter"`
	// (live waiting − live idle) / waiters, live being the Go runtime's
	// heap spans and stacks in use (the sidecar's /metrics): what a waiter
	// keeps, less the garbage the collector left for later (VmRSS holds
	// that too, up to GOMEMLIMIT; heap spans in use still hold some)
	LiveBytesPerWaiter float64 `json:"live_bytes_per_waiter"`
	LiveWaitingMiB     float64 `json:"live_waiting_mib"`
	// sidecar CPU (schedstat, all threads) per handoff during the drain
	CPUUsPerHandoff float64 `json:"cpu_us_per_handoff"`
	LoadAvg         string  `json:"loadavg"`
	DrainS          float64 `json:"drain_s"`
	HandoffsPerS    float64 `json:"handoffs_per_s"`
	Overlaps        int64   `json:"overlaps"`
	Errors          int64   `json:"errors"`
	// znodes under the probe's own root (counted by listing it, so other
	// roots on the server, and their containers being reaped meanwhile,
	// do not count)
	ZnodesBase    int64 `json:"znodes_baseline"`
	ZnodesWaiting int64 `json:"znodes_waiting"`
	// Parked: of the waiters, those parked in the sidecar behind its gate
	// (native protocol): no znode of theirs is in ZnodesWaiting
	Parked      int   `json:"parked"`
	ZnodesAfter int64 `json:"znodes_after"`
	ZnodesBack  bool  `json:"znodes_back_to_baseline"` // baseline plus what the protocol keeps by design (ZnodesKept)
	// native protocol: an object keeps its node, its persistent privateLock
	// and that sentinel's child (README, "Native protocol"): 3 per object
	ZnodesKept  int64   `json:"znodes_kept,omitempty"`
	PktsPerHand float64 `json:"pkts_per_handoff"`
	PktsDrain   int64   `json:"pkts_drain"` // zk_packets_received during the drain, gates' releases included
	Granted     int64   `json:"granted"`
	Error       string  `json:"error,omitempty"`
}

// startZK starts a standalone ZooKeeper (tickTime 2 s, like zk.sh) when no
// --zk was given; stop is a no-op otherwise.
func startZK(addr string) (string, func(), error) {
	if addr != "" {
		return addr, func() {}, nil
	}
	z, err := testenv.StartZooKeeper(testenv.ZKOptions{TickTime: 2 * time.Second, Heap: "512m"})
	if err != nil {
		return "", nil, err
	}
	return z.Servers()[0], func() { _ = z.Stop() }, nil
}

func probeMain(args []string) int {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	zkAddr := fs.String("zk", "", "ZooKeeper address (default: start one with testenv)")
	bat := fs.String("baton", "", "the baton executable")
	phases := fs.String("phases", "one,spread", "one: all waiters on one object; spread: over --objects")
	waiters := fs.Int("waiters", 10000, "concurrent waiting acquires (the issue's probe: 10000; each holds a connection, so RLIMIT_NOFILE must exceed it in this process and in baton serve: Go raises the soft limit to the hard one)")
	var env envFlags
	fs.Var(&env, "env", "KEY=VALUE added to baton serve's environment (repeatable), e.g. GOMEMLIMIT=200MiB")
	objects := fs.Int("objects", 1000, "objects of the spread phase")
	batch := fs.Int("batch", 100, "waiters started at once; the next batch starts when these wait with a node in ZooKeeper")
	hold := fs.Duration("hold", 0, "pause this long once every waiter waits, before the drain (to profile the waiting sidecar)")
	znodeWait := fs.Duration("znode-wait", 20*time.Second, "how long to wait for the znode count to come back to its baseline")
	protocol := fs.String("protocol", "plugin", "zookeeper.lock.protocol of the probed sidecar: plugin or native")
	_ = fs.Parse(args)
	sidecarEnv = env
	bin, err := batonBin(*bat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(*waiters)+1000 {
		fmt.Fprintf(os.Stderr, "probe: RLIMIT_NOFILE is %d (hard %d): %d waiters need about %d descriptors in this process and in baton serve; raise the hard limit (ulimit -Hn)\n",
			rl.Cur, rl.Max, *waiters, *waiters+1000)
	}
	addr, stop, err := startZK(*zkAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe: zookeeper:", err)
		return 1
	}
	defer stop()
	rc := 0
	for _, ph := range strings.Split(*phases, ",") {
		k := 1
		if ph == "spread" {
			k = *objects
		}
		p := &prober{bin: bin, zk: addr, waiters: *waiters, objects: k, batch: *batch, znodeWait: *znodeWait, hold: *hold, protocol: *protocol}
		res := p.run()
		out, _ := json.Marshal(res)
		fmt.Println(string(out))
		if res.Error != "" || res.Overlaps != 0 || res.Errors != 0 {
			rc = 1
		}
	}
	return rc
}

type prober struct {
	bin                       string
	zk                        string
	waiters, objects, batch   int
	znodeWait, hold           time.Duration
	protocol                  string
	sc                        *sidecarProc
	c                         *client.Client
	overlaps, errs, completed atomic.Int64
}

func (p *prober) run() (res probeResult) {
	res = probeResult{Probe: "waiters", Waiters: p.waiters, Objects: p.objects, Conns: p.waiters, LoadAvg: loadAvg()}
	if p.objects == 1 {
		res.Probe = "waiters-one-object"
	} else {
		res.Probe = "waiters-spread"
	}
	if err := p.do(&res); err != nil {
		res.Error = err.Error()
	}
	res.Overlaps, res.Errors = p.overlaps.Load(), p.errs.Load()
	return res
}

// do runs the probe once into res: a `baton serve` on a fresh lock root,
// a holder per object, then p.waiters acquires queued behind them; it
// measures the memory idle, waiting and at the peak, the drain's handoffs/s
// and ZooKeeper packets, and whether the znode count returns to its
// baseline.
func (p *prober) do(res *probeResult) error {
	dir, err := os.MkdirTemp("", "bbp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root := fmt.Sprintf("/baton-probe/%d-%d", time.Now().UnixNano(), p.objects)
	// the root exists before the baseline: what is left after must be 0
	raw, err := rawZK(p.zk)
	if err != nil {
		return err
	}
	defer raw.Close()
	if err := mkdirs(raw, root); err != nil {
		return err
	}
	if res.ZnodesBase, err = subtree(raw, root); err != nil {
		return err
	}
	ephBase, err := mntr(p.zk, "zk_ephemerals_count")
	if err != nil {
		return err
	}
	limit := strconv.Itoa(2*p.waiters + p.objects + 16)
	props := map[string]string{
		"zookeeper.servers":               p.zk,
		"zookeeper.session.timeout":       "15000",
		"zookeeper.tick.time":             strconv.Itoa(tickTime(p.zk)),
		"zookeeper.lock.root":             root,
		"sidecar.max.waiters":             limit,
		"sidecar.max.waiters.per.uid":     limit, // every waiter is this process's (this uid's)
		"sidecar.max.leases.per.uid":      limit,
		"sidecar.max.connections":         limit,
		"sidecar.max.connections.per.uid": limit,
	}
	if p.protocol != "" {
		props["zookeeper.lock.protocol"] = p.protocol
	}
	if p.sc, err = startSidecar(p.bin, dir, "probe", props); err != nil {
		return err
	}
	defer p.sc.stop()
	defer func() {
		if p.errs.Load() > 0 {
			b, _ := os.ReadFile(p.sc.log)
			n := 0
			for line := range strings.Lines(string(b)) { // the sidecar's own lines, not the failed requests
				if !strings.Contains(line, `msg="request failed"`) && n < 40 {
					fmt.Fprint(os.Stderr, "probe: baton serve: ", line)
					n++
				}
			}
		}
	}()
	p.c = client.New(p.sc.socket)
	defer p.c.Close()
	ctx := context.Background()
	res.RSSIdleMiB = procMiB(p.sc.pid(), "VmRSS")
	liveIdle, err := runtimeLive(p.sc.socket)
	if err != nil {
		return err
	}

	objs := make([]string, p.objects)
	holders := make([]atomic.Int64, p.objects)
	for k := range objs {
		objs[k] = "probe/" + strconv.Itoa(k)
	}
	// gates: one holder per object, through the same sidecar
	gates := make([]*client.Lease, p.objects)
	if err := parallel(p.objects, 32, func(k int) error {
		var err error
		gates[k], err = p.c.Acquire(ctx, objs[k], client.WithWait(time.Minute), client.WithoutRenewal(), client.WithLease(10*time.Minute))
		return err
	}); err != nil {
		return fmt.Errorf("gates: %w", err)
	}
	var wg sync.WaitGroup
	var firstErr atomic.Value
	t0 := time.Now()
	for started := 0; started < p.waiters; {
		n := min(p.batch, p.waiters-started)
		for i := started; i < started+n; i++ {
			k := i % p.objects
			wg.Go(func() {
				l, err := p.c.Acquire(ctx, objs[k], client.WithWait(10*time.Minute), client.WithoutRenewal())
				if err != nil {
					p.errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				if holders[k].Add(1) != 1 {
					p.overlaps.Add(1)
				}
				holders[k].Add(-1)
				if err := l.Release(ctx); err != nil {
					p.errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				p.completed.Add(1)
			})
		}
		started += n
		if res.Parked, err = p.waitWaiting(started, ephBase); err != nil {
			return fmt.Errorf("%w; first error: %v", err, firstErr.Load())
		}
	}
	res.QueueS = time.Since(t0).Seconds()
	if p.hold > 0 {
		fmt.Fprintf(os.Stderr, "probe: %d waiting on baton serve pid %d; holding %v\n", p.waiters, p.sc.pid(), p.hold)
		time.Sleep(p.hold)
	}
	res.RSSWaitingMiB = procMiB(p.sc.pid(), "VmRSS")
	res.BytesPerWaiter = (res.RSSWaitingMiB - res.RSSIdleMiB) * (1 << 20) / float64(p.waiters)
	live, err := runtimeLive(p.sc.socket)
	if err != nil {
		return err
	}
	res.LiveWaitingMiB = live / (1 << 20)
	res.LiveBytesPerWaiter = (live - liveIdle) / float64(p.waiters)
	res.ZnodesWaiting, _ = subtree(raw, root)
	if p.completed.Load() != 0 || p.errs.Load() != 0 {
		return fmt.Errorf("%d waiters finished before the gates opened (errors: %v)", p.completed.Load(), firstErr.Load())
	}
	pk0, _ := mntr(p.zk, "zk_packets_received")
	cpu0, _ := procCost(p.sc.pid())
	start := time.Now()
	gdone := make(chan error, 1)
	go func() {
		gdone <- parallel(p.objects, 32, func(k int) error { return gates[k].Release(ctx) })
	}()
	wg.Wait()
	drain := time.Since(start)
	cpu1, _ := procCost(p.sc.pid())
	pk1, _ := mntr(p.zk, "zk_packets_received")
	res.PktsDrain, res.Granted = pk1-pk0, p.completed.Load()
	if gerr := <-gdone; gerr != nil {
		return fmt.Errorf("gate release: %w", gerr)
	}
	res.DrainS = drain.Seconds()
	res.HandoffsPerS = float64(p.completed.Load()) / drain.Seconds()
	if p.completed.Load() > 0 {
		res.PktsPerHand = float64(pk1-pk0) / float64(p.completed.Load())
		res.CPUUsPerHandoff = float64(cpu1.cpuNs-cpu0.cpuNs) / 1000 / float64(p.completed.Load())
	}
	res.RSSPeakMiB = procMiB(p.sc.pid(), "VmHWM")
	res.RSSAfterMiB = procMiB(p.sc.pid(), "VmRSS")
	// containers are reaped by the server (testenv: every 100 ms; a stock
	// server: znode.container.checkIntervalMs, 60 s)
	if p.protocol == "native" {
		res.ZnodesKept = 3 * int64(p.objects)
	}
	deadline := time.Now().Add(p.znodeWait)
	for {
		res.ZnodesAfter, err = subtree(raw, root)
		if err == nil && res.ZnodesAfter <= res.ZnodesBase+res.ZnodesKept {
			res.ZnodesBack = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := firstErr.Load(); v != nil {
		return errors.New(v.(string))
	}
	return nil
}

// waitWaiting polls /healthz until n acquires wait in the sidecar
// (zookeeper.waiting) and ZooKeeper holds an ephemeral node for each of
// them not parked in the sidecar (zookeeper.parked: native, behind a
// holder of the sidecar) and for each object's gate, beyond ephBase (the
// server's ephemeral count before the probe).
func (p *prober) waitWaiting(n int, ephBase int64) (parked int, _ error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h, err := p.c.Health(ctx)
		cancel()
		if err == nil && h.ZooKeeper.Waiting >= n {
			// each waiter's child and each gate's are ephemeral: counted
			// server-wide, which old roots' containers being reaped do not
			// change (the znode count did: the check then never passed)
			if z, err := mntr(p.zk, "zk_ephemerals_count"); err == nil && z >= ephBase+int64(n-h.ZooKeeper.Parked+p.objects) {
				return h.ZooKeeper.Parked, nil
			}
		}
		if p.errs.Load() > 0 {
			return 0, fmt.Errorf("waiters failed while queueing (%d errors)", p.errs.Load())
		}
		if time.Now().After(deadline) {
			w := -1
			if h != nil {
				w = h.ZooKeeper.Waiting
			}
			return 0, fmt.Errorf("only %d of %d acquires waiting after 5 min (%v)", w, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parallel runs f(0..n-1) on at most par goroutines; the first error wins.
func parallel(n, par int, f func(int) error) error {
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make([]error, par)
	for w := range par {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// procMiB reads a kB field (VmRSS, VmHWM) of /proc/PID/status in MiB.
func procMiB(pid int, field string) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return -1
}

// subtree counts the znodes below root (root itself not counted).
func subtree(c *zk.Conn, root string) (int64, error) {
	var n int64
	todo := []string{root}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		kids, _, err := c.Children(p)
		if errors.Is(err, zk.ErrNoNode) { // reaped while we walk
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("list %s: %w", p, err)
		}
		n += int64(len(kids))
		for _, k := range kids {
			todo = append(todo, path.Join(p, k))
		}
	}
	return n, nil
}

// mkdirs creates path's persistent nodes.
func mkdirs(c *zk.Conn, path string) error {
	cur := ""
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		cur += "/" + seg
		if _, err := c.Create(cur, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// runtimeLive is the Go heap and stacks in use of the sidecar listening on
// socket (go_memstats_heap_inuse_bytes + go_memstats_stack_inuse_bytes of
// its /metrics).
func runtimeLive(socket string) (float64, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://baton/metrics")
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	var sum float64
	found := 0
	for line := range strings.Lines(string(b)) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && (name == "go_memstats_heap_inuse_bytes" || name == "go_memstats_stack_inuse_bytes") {
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return 0, fmt.Errorf("metrics: %s: %w", name, err)
			}
			sum += v
			found++
		}
	}
	if found != 2 {
		return 0, fmt.Errorf("metrics: go_memstats_heap_inuse_bytes or go_memstats_stack_inuse_bytes missing (status %s)", resp.Status)
	}
	return sum, nil
}
