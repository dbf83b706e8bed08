package main

// ab: W1 cycles alternated between two `baton serve` processes (A and B:
// two builds, or one build with two environments, e.g. BATON_LEAN_PATH=off
// for A) on one ZooKeeper, cycle by cycle, so that the machine's drifting
// speed (±50 % between two runs a minute apart on the development VM)
// hits both alike. Per round: each sidecar's CPU per cycle and cycle p50,
// and B's ratios to A's. The tenth round's A/B in BENCHMARKS.md.

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"
)

type abRound struct {
	ACPUUs   float64 `json:"a_cpu_us_per_cycle"`
	BCPUUs   float64 `json:"b_cpu_us_per_cycle"`
	AP50us   float64 `json:"a_cycle_p50_us"`
	BP50us   float64 `json:"b_cycle_p50_us"`
	CPURatio float64 `json:"cpu_b_over_a"`
	P50Ratio float64 `json:"p50_b_over_a"`
	LoadAvg  string  `json:"loadavg"`
}

type abResult struct {
	Probe  string    `json:"probe"`
	A      string    `json:"a"`
	B      string    `json:"b"`
	Cycles int       `json:"cycles_per_round"`
	Rounds []abRound `json:"rounds"`
	Error  string    `json:"error,omitempty"`
}

func abMain(args []string) int {
	fs := flag.NewFlagSet("ab", flag.ExitOnError)
	zkAddr := fs.String("zk", "", "ZooKeeper address (default: start one with testenv)")
	binA := fs.String("baton-a", "", "A's baton executable")
	binB := fs.String("baton-b", "", "B's baton executable (default: A's)")
	var envA, envB envFlags
	fs.Var(&envA, "env-a", "KEY=VALUE added to A's environment (repeatable), e.g. BATON_LEAN_PATH=off")
	fs.Var(&envB, "env-b", "KEY=VALUE added to B's environment (repeatable)")
	protocol := fs.String("protocol", "native", "zookeeper.lock.protocol of both")
	cycles := fs.Int("cycles", 3000, "measured W1 cycles of each sidecar per round")
	rounds := fs.Int("rounds", 4, "rounds")
	warmup := fs.Int("warmup", 200, "unmeasured cycles of each first")
	_ = fs.Parse(args)
	if *binB == "" {
		*binB = *binA
	}
	res := abResult{Probe: "ab", A: *binA + " " + envA.String(), B: *binB + " " + envB.String(), Cycles: *cycles}
	err := ab(&res, *zkAddr, [2]string{*binA, *binB}, [2][]string{envA, envB}, *protocol, *warmup, *rounds)
	return report(&res, err, &res.Error)
}

func ab(res *abResult, zkAddr string, bins [2]string, envs [2][]string, protocol string, warmup, rounds int) error {
	addr, stop, err := startZK(zkAddr)
	if err != nil {
		return err
	}
	defer stop()
	dir, err := os.MkdirTemp("", "bbab")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var lockers [2]*httpLocker
	var pids [2]int
	for i, name := range [2]string{"a", "b"} {
		bin, err := batonBin(bins[i])
		if err != nil {
			return err
		}
		sidecarEnv = envs[i]
		sc, err := startSidecar(bin, dir, name, map[string]string{
			"zookeeper.servers":         addr,
			"zookeeper.session.timeout": "15000",
			"zookeeper.tick.time":       strconv.Itoa(tickTime(addr)),
			"zookeeper.lock.protocol":   protocol,
			"zookeeper.lock.root":       fmt.Sprintf("/baton-ab/%d/%s", time.Now().UnixNano(), name),
		})
		sidecarEnv = nil
		if err != nil {
			return err
		}
		defer sc.stop()
		hc := unixHTTPClient(sc.socket)
		defer hc.CloseIdleConnections()
		lockers[i], pids[i] = &httpLocker{c: hc, obj: "ab/w1"}, sc.pid()
	}
	cycle := func(l *httpLocker) (time.Duration, error) {
		t0 := time.Now()
		if err := l.Lock(); err != nil {
			return 0, err
		}
		err := l.Unlock()
		return time.Since(t0), err
	}
	for i := range 2 * warmup {
		if _, err := cycle(lockers[i%2]); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	for range rounds {
		var c0, c1 [2]taskCost
		var lat [2][]time.Duration
		for i := range 2 {
			if c0[i], err = procCost(pids[i]); err != nil {
				return err
			}
		}
		for i := range 2 * res.Cycles {
			d, err := cycle(lockers[i%2])
			if err != nil {
				return err
			}
			lat[i%2] = append(lat[i%2], d)
		}
		for i := range 2 {
			if c1[i], err = procCost(pids[i]); err != nil {
				return err
			}
			slices.Sort(lat[i])
		}
		r := abRound{
			ACPUUs:  float64(c1[0].cpuNs-c0[0].cpuNs) / 1000 / float64(res.Cycles),
			BCPUUs:  float64(c1[1].cpuNs-c0[1].cpuNs) / 1000 / float64(res.Cycles),
			AP50us:  quantileUs(lat[0], 0.5),
			BP50us:  quantileUs(lat[1], 0.5),
			LoadAvg: loadAvg(),
		}
		r.CPURatio, r.P50Ratio = r.BCPUUs/r.ACPUUs, r.BP50us/r.AP50us
		res.Rounds = append(res.Rounds, r)
	}
	return nil
}
