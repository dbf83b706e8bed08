package main

// cpu runs a workload command and prints where the machine's CPU went
// while it ran: each process's share over a window inside the measured
// phase, and its CPU per operation (the command's last JSON line's
// ops_per_s). It is how a CPU floor is shown: ZooKeeper's own CPU per
// acquisition, the sidecar's, the clients', against the cores there are.
//
//	baton-bench cpu --after 1.5s --window 3s -- bin/baton-bench W3 --impl baton-shared ...
//
// Processes are sampled from /proc/PID/stat (utime + stime, clock ticks) at
// the window's two ends; the machine's busy share from /proc/stat. Figures,
// never assertions.

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

type cpuProc struct {
	PID     int     `json:"pid"`
	Comm    string  `json:"comm"`
	CPUPct  float64 `json:"cpu_pct"`             // of one core, over the window
	UsPerOp float64 `json:"us_per_op,omitempty"` // CPU µs per operation of the command
}

type cpuResult struct {
	Probe     string    `json:"probe"`
	Command   string    `json:"command"`
	WindowS   float64   `json:"window_s"`
	CPUs      int       `json:"cpus"`
	BusyPct   float64   `json:"busy_pct"` // of all CPUs
	OpsPerS   float64   `json:"ops_per_s"`
	Processes []cpuProc `json:"processes"` // the busiest first
	LoadAvg   string    `json:"loadavg"`
	Error     string    `json:"error,omitempty"`
}

func cpuMain(args []string) int {
	fs := flag.NewFlagSet("baton-bench cpu", flag.ExitOnError)
	after := fs.Duration("after", 1500*time.Millisecond, "start of the window, after the command starts (past its warm-up)")
	window := fs.Duration("window", 3*time.Second, "length of the window (within the command's measured phase)")
	top := fs.Int("top", 8, "processes listed")
	_ = fs.Parse(args)
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: baton-bench cpu [--after D] [--window D] -- COMMAND [ARGS...]")
		return 64
	}
	res := cpuResult{Probe: "cpu", Command: strings.Join(fs.Args(), " "), LoadAvg: loadAvg()}
	err := cpuShare(&res, fs.Args(), *after, *window, *top)
	return report(&res, err, &res.Error)
}

func cpuShare(res *cpuResult, argv []string, after, window time.Duration, top int) error {
	var stdout bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	time.Sleep(after)
	p0, b0, err := procTimes()
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(window)
	p1, b1, err := procTimes()
	if err != nil {
		return err
	}
	el := time.Since(t0)
	var runErr error
	ended := false
	select {
	case runErr = <-exited:
		ended = true
	default:
		runErr = <-exited
	}
	os.Stdout.Write(stdout.Bytes())
	res.WindowS = el.Seconds()
	res.CPUs = b1.cpus
	if d := b1.total - b0.total; d > 0 {
		res.BusyPct = 100 * (1 - float64(b1.idle-b0.idle)/float64(d))
	}
	res.OpsPerS = lastOpsPerS(stdout.Bytes())
	for pid, a := range p1 {
		b, ok := p0[pid]
		if !ok || a.ticks <= b.ticks {
			continue
		}
		pct := 100 * float64(a.ticks-b.ticks) / clockTicks / el.Seconds()
		p := cpuProc{PID: pid, Comm: a.comm, CPUPct: pct}
		if res.OpsPerS > 0 {
			p.UsPerOp = pct / 100 * 1e6 / res.OpsPerS
		}
		res.Processes = append(res.Processes, p)
	}
	slices.SortFunc(res.Processes, func(a, b cpuProc) int { return cmp.Compare(b.CPUPct, a.CPUPct) })
	res.Processes = res.Processes[:min(top, len(res.Processes))]
	if runErr != nil {
		return fmt.Errorf("%s: %w", argv[0], runErr)
	}
	if ended {
		return errors.New("the command ended before the window did: give it more operations, or a shorter window")
	}
	if res.OpsPerS == 0 {
		return errors.New("the command printed no ops_per_s")
	}
	return nil
}

type procTick struct {
	comm  string
	ticks int64 // utime + stime
}

type busyTicks struct {
	total, idle int64 // all CPUs: every field; idle + iowait
	cpus        int
}

// procTimes reads every process's CPU ticks and the machine's.
func procTimes() (map[int]procTick, busyTicks, error) {
	var b busyTicks
	st, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, b, err
	}
	sc := bufio.NewScanner(bytes.NewReader(st))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 5 && f[0] == "cpu":
			for i, v := range f[1:] {
				n, _ := strconv.ParseInt(v, 10, 64)
				b.total += n
				if i == 3 || i == 4 {
					b.idle += n
				}
			}
		case strings.HasPrefix(f[0], "cpu"):
			b.cpus++
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, b, err
	}
	out := make(map[int]procTick, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces
		lp, rp := bytes.IndexByte(s, '('), bytes.LastIndexByte(s, ')')
		if lp < 0 || rp < lp {
			continue
		}
		f := strings.Fields(string(s[rp+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = procTick{comm: string(s[lp+1 : rp]), ticks: u + k}
	}
	return out, b, nil
}

// lastOpsPerS is ops_per_s of the last JSON line of out that has it.
func lastOpsPerS(out []byte) float64 {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range slices.Backward(lines) {
		var v struct {
			OpsPerS float64 `json:"ops_per_s"`
		}
		if json.Unmarshal([]byte(l), &v) == nil && v.OpsPerS > 0 {
			return v.OpsPerS
		}
	}
	return 0
}
