package main

// cost: what one `baton serve` process spends, in CPU and context switches,
// on W1 cycles (acquire + release of an uncontended lock) driven over its
// unix socket by Go's stock net/http client, against a raw echo server
// (another process: hand-written HTTP/1.1, one canned answer) driven by the
// same client, and against the control (peersidecar.go: go-zookeeper's
// lock behind a plain net/http server) on the same W1 cycles, and against
// W1's ZooKeeper work alone (zkcycles.go) plus two echo requests, and
// against the two floors of rawfloor.go (the same work with no ZooKeeper
// client library: on one thread with blocking raw sockets, the physical
// floor; on one goroutine on Go's netpoller, a Go sidecar's). CPU is the
// sum over the process's threads of the first field
// of /proc/PID/task/TID/schedstat (ns on CPU; the leader's own
// /proc/PID/schedstat counts one thread only); context switches the sum of
// voluntary_ctxt_switches + nonvoluntary_ctxt_switches of each thread's
// status. Both are deltas over the measured requests divided by their
// count: figures, never assertions.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

type costResult struct {
	Probe   string `json:"probe"`
	Cycles  int    `json:"cycles"`
	Echo    int    `json:"echo_requests"`
	Sidecar string `json:"sidecar_env,omitempty"` // extra environment of baton serve (--env)
	// W1 through baton serve: CPU (µs) and context switches per cycle (two
	// HTTP requests, two ZooKeeper requests), the cycle's latency.
	CPUUsPerCycle    float64 `json:"cpu_us_per_cycle"`
	CtxSwPerCycle    float64 `json:"ctxsw_per_cycle"`
	CycleP50us       float64 `json:"cycle_p50_us"`
	CPUUsPerRequest  float64 `json:"cpu_us_per_request"` // cpu_us_per_cycle / 2
	ThreadsSidecar   int     `json:"threads_sidecar"`
	HealthCPUUsPerRq float64 `json:"healthz_cpu_us_per_request"` // GET /healthz on baton serve
	// the raw echo, same client, GET /healthz answered with the sidecar's bytes
	EchoCPUUsPerRq float64 `json:"echo_cpu_us_per_request"`
	EchoCtxSwPerRq float64 `json:"echo_ctxsw_per_request"`
	EchoP50us      float64 `json:"echo_p50_us"`
	// over the echo: W1 CPU per request (ZooKeeper work included) and
	// /healthz CPU per request, each minus the echo's CPU per request
	OverEchoUs       float64 `json:"w1_cpu_us_per_request_over_echo"`
	HealthOverEchoUs float64 `json:"healthz_cpu_us_per_request_over_echo"`
	// the control (peersidecar.go: go-zookeeper's zk.Lock behind a plain
	// net/http server, GOMAXPROCS as the sidecar's), the same W1 cycles
	// from the same client on the same ZooKeeper: what a Go sidecar of
	// this shape costs with none of Baton's work (fencing, validity,
	// leases, authorization)
	ControlCPUUsPerCycle float64 `json:"control_cpu_us_per_cycle"`
	ControlCtxSwPerCycle float64 `json:"control_ctxsw_per_cycle"`
	ControlCycleP50us    float64 `json:"control_cycle_p50_us"`
	CPUOverControl       float64 `json:"cpu_ratio_to_control"` // cpu_us_per_cycle / control_cpu_us_per_cycle
	// W1's ZooKeeper work alone (zkcycles.go: the native fast path's two
	// multis through go-zookeeper, GOMAXPROCS as the sidecar's, no HTTP),
	// and the floor of a sidecar of this shape: that plus the raw echo's
	// two requests (cpu_us_per_cycle can go below it only with a cheaper
	// ZooKeeper client than the one Baton must use, or a cheaper HTTP
	// exchange than a raw echo's)
	ZKOnlyCPUUsPerCycle float64 `json:"zk_only_cpu_us_per_cycle"`
	ZKOnlyCtxSwPerCycle float64 `json:"zk_only_ctxsw_per_cycle"`
	FloorCPUUsPerCycle  float64 `json:"floor_cpu_us_per_cycle"` // zk_only + 2 × echo_cpu_us_per_request
	// the leanest sidecar of this shape (zkcycles.go --socket): the raw
	// echo's hand-written HTTP/1.1, each acquire and release one of those
	// multis through go-zookeeper in the connection's goroutine, no lock
	// logic; the same W1 cycles from the same client
	LeanCPUUsPerCycle float64 `json:"lean_cpu_us_per_cycle"`
	LeanCtxSwPerCycle float64 `json:"lean_ctxsw_per_cycle"`
	LeanCycleP50us    float64 `json:"lean_cycle_p50_us"`
	// the same cycles through Baton's lock engine (enginecycles.go,
	// zk-cycles --engine: native protocol, one session), alone and behind
	// the lean sidecar's HTTP: between lean_* and cpu_us_per_cycle they
	// split Baton's own CPU into the engine's and the sidecar's
	EngineZKOnlyCPUUsPerCycle float64 `json:"engine_zk_only_cpu_us_per_cycle"`
	EngineCPUUsPerCycle       float64 `json:"engine_lean_cpu_us_per_cycle"`
	EngineCtxSwPerCycle       float64 `json:"engine_lean_ctxsw_per_cycle"`
	EngineCycleP50us          float64 `json:"engine_lean_cycle_p50_us"`
	// the floors (rawfloor.go, zk-cycles --raw): the same work with no
	// ZooKeeper client library (hand-encoded requests, canned answers),
	// alone and as a sidecar answering the same W1 cycles from the same
	// client. raw: one thread, blocking raw sockets, none of Go's runtime
	// in the way: what the kernel's work on the system calls every sidecar
	// of this shape makes costs on this machine (the physical floor).
	// netpoll: one goroutine on Go's netpoller through internal/rawio, as
	// baton serve reads and writes: the floor of a Go sidecar.
	RawZKOnlyCPUUsPerCycle     float64 `json:"raw_zk_only_cpu_us_per_cycle"`
	RawCPUUsPerCycle           float64 `json:"raw_cpu_us_per_cycle"`
	RawCtxSwPerCycle           float64 `json:"raw_ctxsw_per_cycle"`
	RawCycleP50us              float64 `json:"raw_cycle_p50_us"`
	NetpollZKOnlyCPUUsPerCycle float64 `json:"netpoll_zk_only_cpu_us_per_cycle"`
	NetpollCPUUsPerCycle       float64 `json:"netpoll_cpu_us_per_cycle"`
	NetpollCtxSwPerCycle       float64 `json:"netpoll_ctxsw_per_cycle"`
	NetpollCycleP50us          float64 `json:"netpoll_cycle_p50_us"`
	LoadAvg                    string  `json:"loadavg"`
	Error                      string  `json:"error,omitempty"`
}

// envFlags collects repeated --env KEY=VALUE flags.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, " ") }
func (e *envFlags) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("--env %q: want KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func costMain(args []string) int {
	fs := flag.NewFlagSet("cost", flag.ExitOnError)
	zkAddr := fs.String("zk", "", "ZooKeeper address (default: start one with testenv)")
	bat := fs.String("baton", "", "the baton executable")
	cycles := fs.Int("cycles", 2000, "measured W1 cycles (and twice as many echo and /healthz requests)")
	warmup := fs.Int("warmup", 300, "unmeasured W1 cycles first")
	var env envFlags
	fs.Var(&env, "env", "KEY=VALUE added to baton serve's environment (repeatable), e.g. GOMAXPROCS=2")
	_ = fs.Parse(args)
	res := costResult{Probe: "cost", Cycles: *cycles, Echo: 2 * *cycles, Sidecar: env.String(), LoadAvg: loadAvg()}
	err := cost(&res, *zkAddr, *bat, *warmup, env)
	return report(&res, err, &res.Error)
}

func cost(res *costResult, zkAddr, bat string, warmup int, env []string) error {
	bin, addr, dir, done, err := benchSetup(bat, zkAddr, "bbc")
	if err != nil {
		return err
	}
	defer done()
	sidecarEnv = env
	defer func() { sidecarEnv = nil }()
	sc, err := startSidecar(bin, dir, "cost", map[string]string{
		"zookeeper.servers":         addr,
		"zookeeper.session.timeout": "15000",
		"zookeeper.tick.time":       strconv.Itoa(tickTime(addr)),
		"zookeeper.lock.root":       fmt.Sprintf("/baton-cost/%d", time.Now().UnixNano()),
	})
	if err != nil {
		return err
	}
	defer sc.stop()
	hc := unixHTTPClient(sc.socket)
	defer hc.CloseIdleConnections()
	w, err := w1Cost(sc.pid(), hc, warmup, res.Cycles)
	if err != nil {
		return err
	}
	res.CPUUsPerCycle, res.CtxSwPerCycle, res.CycleP50us = w.cpuUs, w.ctxsw, w.p50us
	res.CPUUsPerRequest = res.CPUUsPerCycle / 2
	res.ThreadsSidecar = w.threads

	// the sidecar's /healthz body, which the echo sends back
	get := func(c *http.Client) error {
		resp, err := c.Get("http://baton/healthz")
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
		return err
	}
	resp, err := hc.Get("http://baton/healthz")
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	perReq := func(pid int, c *http.Client) (cpuUs, ctxsw, p50 float64, err error) {
		for range 200 {
			if err := get(c); err != nil {
				return 0, 0, 0, err
			}
		}
		lat := make([]time.Duration, 0, res.Echo)
		a, err := procCost(pid)
		if err != nil {
			return 0, 0, 0, err
		}
		for range res.Echo {
			t0 := time.Now()
			if err := get(c); err != nil {
				return 0, 0, 0, err
			}
			lat = append(lat, time.Since(t0))
		}
		b, err := procCost(pid)
		if err != nil {
			return 0, 0, 0, err
		}
		slices.Sort(lat)
		m := float64(res.Echo)
		return float64(b.cpuNs-a.cpuNs) / 1000 / m, float64(b.ctxsw-a.ctxsw) / m, quantileUs(lat, 0.5), nil
	}
	if res.HealthCPUUsPerRq, _, _, err = perReq(sc.pid(), hc); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}

	bodyFile := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	echoSock := filepath.Join(dir, "echo.sock")
	echoPid, stop, err := startEcho(exe, echoSock, bodyFile, env) // the same runtime settings as the sidecar
	if err != nil {
		return err
	}
	defer stop()
	ec := unixHTTPClient(echoSock)
	defer ec.CloseIdleConnections()
	if res.EchoCPUUsPerRq, res.EchoCtxSwPerRq, res.EchoP50us, err = perReq(echoPid, ec); err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	res.OverEchoUs = res.CPUUsPerRequest - res.EchoCPUUsPerRq
	res.HealthOverEchoUs = res.HealthCPUUsPerRq - res.EchoCPUUsPerRq

	// the control, with the sidecar's runtime settings (--env; unset, the
	// peer-sidecar takes GOMAXPROCS=1 as baton serve does)
	ctl, err := startPeerSidecar(dir, "control", addr, fmt.Sprintf("/baton-cost-control/%d", time.Now().UnixNano()))
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	defer ctl.stop()
	cc := unixHTTPClient(ctl.socket)
	defer cc.CloseIdleConnections()
	cw, err := w1Cost(ctl.pid(), cc, warmup, res.Cycles)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	res.ControlCPUUsPerCycle, res.ControlCtxSwPerCycle, res.ControlCycleP50us = cw.cpuUs, cw.ctxsw, cw.p50us
	if cw.cpuUs > 0 {
		res.CPUOverControl = res.CPUUsPerCycle / cw.cpuUs
	}
	if res.ZKOnlyCPUUsPerCycle, res.ZKOnlyCtxSwPerCycle, err = zkCyclesCost(addr, warmup, res.Cycles); err != nil {
		return fmt.Errorf("zk-cycles: %w", err)
	}
	res.FloorCPUUsPerCycle = res.ZKOnlyCPUUsPerCycle + 2*res.EchoCPUUsPerRq
	lean, err := startLean(addr, filepath.Join(dir, "lean.sock"))
	if err != nil {
		return fmt.Errorf("lean: %w", err)
	}
	defer lean.stop()
	lc := unixHTTPClient(lean.socket)
	defer lc.CloseIdleConnections()
	lw, err := w1Cost(lean.pid, lc, warmup, res.Cycles)
	if err != nil {
		return fmt.Errorf("lean: %w", err)
	}
	res.LeanCPUUsPerCycle, res.LeanCtxSwPerCycle, res.LeanCycleP50us = lw.cpuUs, lw.ctxsw, lw.p50us
	// the other zk-cycles variants, each alone and as a sidecar: Baton's
	// engine, then the two floors
	for _, f := range []struct {
		name, sock string
		args       []string
		zkOnly     *float64
		cpu, ctxsw *float64
		p50        *float64
	}{
		{"--engine", "engine", []string{"--engine"}, &res.EngineZKOnlyCPUUsPerCycle, &res.EngineCPUUsPerCycle, &res.EngineCtxSwPerCycle, &res.EngineCycleP50us},
		{"--raw blocking", "blocking", []string{"--raw", "blocking"}, &res.RawZKOnlyCPUUsPerCycle, &res.RawCPUUsPerCycle, &res.RawCtxSwPerCycle, &res.RawCycleP50us},
		{"--raw netpoll", "netpoll", []string{"--raw", "netpoll"}, &res.NetpollZKOnlyCPUUsPerCycle, &res.NetpollCPUUsPerCycle, &res.NetpollCtxSwPerCycle, &res.NetpollCycleP50us},
	} {
		if *f.zkOnly, _, err = zkCyclesCost(addr, warmup, res.Cycles, f.args...); err != nil {
			return fmt.Errorf("zk-cycles %s: %w", f.name, err)
		}
		p, err := startLeanArgs(addr, filepath.Join(dir, f.sock+".sock"), f.args...)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		hc := unixHTTPClient(p.socket)
		w, err := w1Cost(p.pid, hc, warmup, res.Cycles)
		hc.CloseIdleConnections()
		p.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		*f.cpu, *f.ctxsw, *f.p50 = w.cpuUs, w.ctxsw, w.p50us
	}
	return nil
}

// w1Figures: a sidecar process's CPU (µs) and context switches per W1
// cycle, the cycle's p50 latency and the process's threads.
type w1Figures struct {
	cpuUs, ctxsw, p50us float64
	threads             int
}

// w1Cost drives cycles W1 cycles (acquire and release of one uncontended
// object, Go's stock net/http client over the unix socket) through the
// server process pid that hc reaches, after warmup unmeasured ones.
func w1Cost(pid int, hc *http.Client, warmup, cycles int) (w1Figures, error) {
	l := &httpLocker{c: hc, obj: "cost/w1"}
	cycle := func() error {
		if err := l.Lock(); err != nil {
			return err
		}
		return l.Unlock()
	}
	for range warmup {
		if err := cycle(); err != nil {
			return w1Figures{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	lat := make([]time.Duration, 0, cycles)
	c0, err := procCost(pid)
	if err != nil {
		return w1Figures{}, err
	}
	for range cycles {
		t0 := time.Now()
		if err := cycle(); err != nil {
			return w1Figures{}, fmt.Errorf("W1: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	c1, err := procCost(pid)
	if err != nil {
		return w1Figures{}, err
	}
	slices.Sort(lat)
	n := float64(cycles)
	return w1Figures{
		cpuUs:   float64(c1.cpuNs-c0.cpuNs) / 1000 / n,
		ctxsw:   float64(c1.ctxsw-c0.ctxsw) / n,
		p50us:   quantileUs(lat, 0.5),
		threads: c1.threads,
	}, nil
}

// taskCost is a process's CPU and context switches, summed over its threads.
type taskCost struct {
	cpuNs, ctxsw int64
	threads      int
}

// procCost sums, over the threads of pid, the first field of
// /proc/PID/task/TID/schedstat (ns on CPU) and the voluntary and
// nonvoluntary context switches of /proc/PID/task/TID/status.
func procCost(pid int) (taskCost, error) {
	var tc taskCost
	base := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(base)
	if err != nil {
		return tc, err
	}
	for _, t := range tids {
		b, err := os.ReadFile(filepath.Join(base, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			tc.cpuNs += ns
		}
		st, err := os.ReadFile(filepath.Join(base, t.Name(), "status"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(st)) {
			for _, k := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
				if rest, ok := strings.CutPrefix(line, k); ok {
					v, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
					tc.ctxsw += v
				}
			}
		}
		tc.threads++
	}
	return tc, nil
}

// loadAvg is /proc/loadavg's three load averages (the machine is shared:
// every figure is quoted with it).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
