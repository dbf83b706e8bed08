package main

// w3floor: W3 with a sidecar process per client (baton-http,
// baton-client), against the fastest that shape can go on this machine. W3
// is eight clients, each taking random objects of 1,000, so almost every
// acquisition is uncontended: eight W1 loops in parallel, and on a 2-core
// machine they are bound by the CPU that ZooKeeper, the clients and the
// sidecars spend, not by latency. Round after round on one ZooKeeper it
// runs, rotated:
//
//   - the peer's W3 (the peers harness's go-zookeeper lockbench: each
//     client calls ZooKeeper itself, no hop);
//   - the floor: the same eight clients, each calling its own "lean
//     sidecar" process (zk-cycles --socket: the raw echo's hand-written
//     HTTP/1.1, no lock logic, no net/http) that does only the ZooKeeper
//     work of an uncontended acquisition and release, in one of three
//     shapes — Baton's (two multis, as W1), Baton's with the read of an
//     object another sidecar used last (a getData first: most of W3's
//     acquisitions), or the peer's own (create and getChildren, then
//     delete) — each with the stock net/http client (as
//     baton-http), Baton's Go client (as baton-client; the lean sidecar
//     answers a lease as `baton serve` does) and a raw client (a
//     hand-written request on a kept connection, the cheapest any client
//     can be);
//   - Baton's W3 per client (baton-http, baton-client; native protocol).
//
// A lean sidecar holds no lock: the floor is a bound below any lock served
// by a process per client that does at least this ZooKeeper work per
// acquisition, whatever its protocol or its client.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/client"
)

func w3floorMain(args []string) int {
	fs := flag.NewFlagSet("w3floor", flag.ExitOnError)
	zkAddr := fs.String("zk", "", "ZooKeeper address (default: start one with testenv)")
	bat := fs.String("baton", "", "the baton executable")
	gozk := fs.String("gozk", "", "the peers harness's go-zookeeper lockbench binary (gozk/bin/lockbench)")
	rounds := fs.Int("rounds", 3, "rounds (every run once per round, rotated)")
	clients := fs.Int("clients", 8, "clients (and sidecars)")
	ops := fs.Int("ops", 4000, "measured acquisitions per run")
	warmup := fs.Int("warmup", 1000, "unmeasured acquisitions first")
	objects := fs.Int("objects", 1000, "objects for the peer's and Baton's W3")
	_ = fs.Parse(args)
	if *gozk == "" {
		fmt.Fprintln(os.Stderr, "w3floor: --gozk is required (the peer is what the floor is set against)")
		return 64
	}
	if err := w3floor(*zkAddr, *bat, *gozk, *rounds, *clients, *ops, *warmup, *objects); err != nil {
		fmt.Fprintln(os.Stderr, "w3floor:", err)
		return 1
	}
	return 0
}

// w3Lean is one floor configuration: eight lean sidecars of one shape,
// called by one kind of client.
type w3Lean struct {
	name   string
	socks  []string
	client string // "stock" (net/http), "go" (package client) or "raw" (hand-written)
}

func w3floor(zkAddr, bat, gozk string, rounds, clients, ops, warmup, objects int) error {
	fmt.Printf("w3floor: load at start %s, %s UTC\n", loadAvg(), time.Now().UTC().Format("2006-01-02 15:04:05"))
	bin, addr, dir, done, err := benchSetup(bat, zkAddr, "bbw3")
	if err != nil {
		return err
	}
	defer done()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	run := fmt.Sprintf("/w3floor-%d", time.Now().UnixNano())

	// the lean sidecars' shapes (zk-cycles --shape), each with what it does
	shapes := []struct{ shape, work string }{
		{"multi", "two multis (Baton's, its version known)"},
		{"read", "a read + two multis (Baton's, another sidecar used the object last)"},
		{"peer", "the peer's ZooKeeper work"},
	}
	var leans []w3Lean
	for _, sh := range shapes {
		var socks []string
		for i := range clients {
			sock := filepath.Join(dir, fmt.Sprintf("%s%d.sock", sh.shape, i))
			lp, err := startLeanShape(addr, sock, sh.shape)
			if err != nil {
				return fmt.Errorf("lean %s: %w", sh.shape, err)
			}
			defer lp.stop()
			socks = append(socks, sock)
		}
		for _, cl := range []struct{ kind, name string }{{"stock", "stock"}, {"go", "Go"}, {"raw", "raw"}} {
			if sh.shape == "read" && cl.kind == "raw" {
				continue // the read's cost is told by the other two
			}
			leans = append(leans, w3Lean{name: fmt.Sprintf("floor: %s, %s client", sh.work, cl.name), socks: socks, client: cl.kind})
		}
	}

	type job struct {
		name string
		run  func(r int) (float64, error)
	}
	w3Args := func(root string) []string {
		return []string{"--zk", addr, "--root", root, "--clients", strconv.Itoa(clients), "--ops", strconv.Itoa(ops),
			"--warmup", strconv.Itoa(warmup), "--objects", strconv.Itoa(objects)}
	}
	jobs := []job{{"gozk (the peer)", func(r int) (float64, error) {
		res, err := peerRun(append(append([]string{gozk, "W3"}, w3Args(fmt.Sprintf("%s/gozk-%d", run, r))...), "--impl", "gozk")...)
		return res.OpsPerS, err
	}}}
	for _, impl := range []string{"baton-http", "baton-client"} {
		jobs = append(jobs, job{impl + "-native", func(r int) (float64, error) {
			argv := append(append([]string{exe, "W3"}, w3Args(fmt.Sprintf("%s/%s-%d", run, impl, r))...), "--impl", impl, "--protocol", "native", "--baton", bin)
			res, err := runResult(exec.Command(argv[0], argv[1:]...))
			if err == nil && res.Overlaps != 0 {
				err = fmt.Errorf("%d overlaps", res.Overlaps)
			}
			return res.OpsPerS, err
		}})
	}
	for _, l := range leans {
		jobs = append(jobs, job{l.name, func(int) (float64, error) { return w3LeanRun(l, ops, warmup) }})
	}

	rates := map[string][]float64{}
	for r := range rounds {
		for k := range jobs {
			j := jobs[(k+r)%len(jobs)] // rotated: the machine's drift hits all alike
			v, err := j.run(r)
			if err != nil {
				return fmt.Errorf("round %d: %s: %w", r, j.name, err)
			}
			rates[j.name] = append(rates[j.name], v)
		}
	}
	fmt.Printf("w3floor: load at end %s, %s UTC\n\n", loadAvg(), time.Now().UTC().Format("2006-01-02 15:04:05"))
	peer := median(rates[jobs[0].name])
	fmt.Printf("W3, %d clients, a sidecar per client; acquisitions/s per round (rotated), the median, and the median against the peer's (%.0f/s):\n\n"+
		"| run | per round | median | × peer |\n|---|---|---|---|\n", clients, peer)
	for _, j := range jobs {
		v := rates[j.name]
		m := median(v)
		fmt.Printf("| %s | %v | %.0f | %.2f |\n", j.name, roundAll(v), m, m/peer)
	}
	return nil
}

// median of v (not modified).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func roundAll(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x + 0.5)
	}
	return out
}

// startLeanShape starts a lean sidecar of shape ("multi" or "peer") on sock.
func startLeanShape(addr, sock, shape string) (*leanProc, error) {
	return startLeanArgs(addr, sock, "--shape", shape)
}

// w3LeanRun runs W3's loop against l's sidecars, one client per sidecar:
// warmup then ops acquisitions (a POST, then a DELETE), shared among the
// clients as W3 shares them; acquisitions per second over the measured
// ones.
func w3LeanRun(l w3Lean, ops, warmup int) (float64, error) {
	total := int64(warmup + ops)
	var tickets atomic.Int64
	var start atomic.Int64
	var firstErr atomic.Value
	base := time.Now()
	var wg sync.WaitGroup
	for _, sock := range l.socks {
		cycle, closeFn, err := leanCaller(sock, l.client)
		if err != nil {
			return 0, err
		}
		defer closeFn()
		wg.Go(func() {
			for {
				t := tickets.Add(1)
				if t > total {
					return
				}
				if t == int64(warmup)+1 {
					start.Store(int64(time.Since(base)))
				}
				if err := cycle(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					tickets.Store(total)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(ops) / (time.Since(base) - time.Duration(start.Load())).Seconds(), nil
}

// leanCaller is one client of a lean sidecar: cycle sends an acquire
// (POST) and a release (DELETE), each answered 200.
func leanCaller(sock, kind string) (cycle func() error, closeFn func(), err error) {
	switch kind {
	case "go": // as clientLocker
		c := client.New(sock)
		return func() error {
			l, err := c.Acquire(context.Background(), "o", client.WithWait(time.Minute), client.WithoutRenewal())
			if err != nil {
				return err
			}
			return l.Release(context.Background())
		}, func() { c.Close() }, nil
	case "stock":
		hc := unixHTTPClient(sock)
		do := func(method string) error {
			req, err := http.NewRequest(method, "http://baton/v1/locks/o/acquire", nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", method, resp.Status)
			}
			return nil
		}
		return func() error {
			if err := do(http.MethodPost); err != nil {
				return err
			}
			return do(http.MethodDelete)
		}, hc.CloseIdleConnections, nil
	case "raw":
	default:
		return nil, nil, fmt.Errorf("client %q: want stock, go or raw", kind)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	post := []byte("POST /v1/locks/o/acquire HTTP/1.1\r\nHost: baton\r\nContent-Length: 0\r\n\r\n")
	del := []byte("DELETE /v1/leases/lean HTTP/1.1\r\nHost: baton\r\n\r\n")
	do := func(req []byte) error {
		if _, err := c.Write(req); err != nil {
			return err
		}
		return readAnswer(br)
	}
	return func() error {
		if err := do(post); err != nil {
			return err
		}
		return do(del)
	}, func() { c.Close() }, nil
}

// readAnswer reads one HTTP/1.1 answer with a Content-Length body from br:
// an error unless it is a 200.
func readAnswer(br *bufio.Reader) error {
	status, clen := "", 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		s := strings.TrimRight(string(line), "\r\n")
		if s == "" {
			break
		}
		if status == "" {
			status = s
		} else if k, v, ok := strings.Cut(s, ":"); ok && strings.EqualFold(k, "Content-Length") {
			clen, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if _, err := br.Discard(clen); err != nil {
		return err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200 ") {
		return errors.New("lean sidecar answered " + status)
	}
	return nil
}
