package main

// reqcost: what the sidecar adds to one trivial request. The same client
// sends GET /healthz (stock net/http; Baton's Go client: GET /readyz via
// Client.Ready, no JSON decoding) to a `baton serve` process and to a raw
// echo server in another process (this executable, echo-server) that
// answers every request with the bytes of the sidecar's own /healthz
// answer. Both are unix sockets; rounds alternate between the targets so
// machine noise hits both alike.

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
	"syscall"
	"time"

	"github.com/batonhq/baton/client"
)

type reqcostResult struct {
	Probe    string             `json:"probe"`
	N        int                `json:"n"` // requests per client and target
	P50us    map[string]float64 `json:"p50_us"`
	P99us    map[string]float64 `json:"p99_us"`
	CostP50  map[string]float64 `json:"sidecar_minus_echo_p50_us"`
	BodySize int                `json:"body_bytes"`
	Error    string             `json:"error,omitempty"`
}

func reqcostMain(args []string) int {
	fs := flag.NewFlagSet("reqcost", flag.ExitOnError)
	zkAddr := fs.String("zk", "", "ZooKeeper address (default: start one with testenv)")
	bat := fs.String("baton", "", "the baton executable")
	n := fs.Int("n", 5000, "requests per client and target")
	_ = fs.Parse(args)
	res := reqcostResult{Probe: "reqcost", N: *n}
	err := reqcost(&res, *zkAddr, *bat)
	return report(&res, err, &res.Error)
}

// reqcost measures into res the latency of GET /healthz on a `baton serve`
// (ZooKeeper at zkAddr, or one it starts; baton binary bat) and on the echo
// server, for stock net/http and Baton's client, in alternating rounds; the
// difference of the medians is what the sidecar adds.
func reqcost(res *reqcostResult, zkAddr, bat string) error {
	bin, err := batonBin(bat)
	if err != nil {
		return err
	}
	addr, stop, err := startZK(zkAddr)
	if err != nil {
		return err
	}
	defer stop()
	dir, err := os.MkdirTemp("", "bbr")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sc, err := startSidecar(bin, dir, "cost", map[string]string{
		"zookeeper.servers":         addr,
		"zookeeper.session.timeout": "15000",
		"zookeeper.tick.time":       strconv.Itoa(tickTime(addr)),
		"zookeeper.lock.root":       "/baton-reqcost",
	})
	if err != nil {
		return err
	}
	defer sc.stop()
	// the echo answers with the sidecar's own /healthz body
	hc := unixHTTPClient(sc.socket)
	resp, err := hc.Get("http://baton/healthz")
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	res.BodySize = len(body)
	bodyFile := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	echoSock := filepath.Join(dir, "echo.sock")
	_, stopEcho, err := startEcho(exe, echoSock, bodyFile, nil)
	if err != nil {
		return err
	}
	defer stopEcho()

	type target struct {
		name string
		do   func() error
	}
	stock := func(sock string) func() error {
		c := unixHTTPClient(sock)
		return func() error {
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
	}
	baton := func(sock string) func() error {
		c := client.New(sock)
		return func() error { return c.Ready(context.Background()) }
	}
	targets := []target{
		{"net/http→sidecar", stock(sc.socket)},
		{"net/http→echo", stock(echoSock)},
		{"baton-client→sidecar", baton(sc.socket)},
		{"baton-client→echo", baton(echoSock)},
	}
	lats := make([][]time.Duration, len(targets))
	const rounds = 10
	per := max(1, res.N/rounds)
	for _, t := range targets { // warm-up
		for range 200 {
			if err := t.do(); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
	}
	for range rounds {
		for i, t := range targets {
			for range per {
				t0 := time.Now()
				if err := t.do(); err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}
	}
	res.P50us, res.P99us, res.CostP50 = map[string]float64{}, map[string]float64{}, map[string]float64{}
	for i, t := range targets {
		slices.Sort(lats[i])
		res.P50us[t.name] = quantileUs(lats[i], 0.50)
		res.P99us[t.name] = quantileUs(lats[i], 0.99)
	}
	res.CostP50["net/http"] = res.P50us["net/http→sidecar"] - res.P50us["net/http→echo"]
	res.CostP50["baton-client"] = res.P50us["baton-client→sidecar"] - res.P50us["baton-client→echo"]
	return nil
}

func quantileUs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(max(int(p*float64(len(sorted))+0.5)-1, 0), len(sorted)-1)
	return float64(sorted[i].Nanoseconds()) / 1000
}

// echoServerMain is the raw echo: HTTP/1.1 keep-alive by hand (read the
// header block, skip a Content-Length body, write one canned answer), no
// net/http server.
func echoServerMain(args []string) int {
	fs := flag.NewFlagSet("echo-server", flag.ExitOnError)
	sock := fs.String("socket", "", "unix socket to listen on")
	bodyFile := fs.String("body", "", "file whose bytes every answer carries")
	stock := fs.Bool("nethttp", false, "answer with Go's stock net/http server instead (a trivial handler)")
	_ = fs.Parse(args)
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo-server:", err)
		return 1
	}
	answer := echoAnswer(body)
	ln, err := net.Listen("unix", *sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo-server:", err)
		return 1
	}
	if *stock {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}))
		return 1
	}
	serveEcho(ln, answer)
	return 1
}

// serveEcho answers every request on ln's connections with answer, until
// ln is closed.
func serveEcho(ln net.Listener, answer []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				if _, err := readRequest(br); err != nil {
					return
				}
				if _, err := c.Write(answer); err != nil {
					return
				}
			}
		}()
	}
}

// readRequest reads one HTTP/1.1 request from br, its body discarded
// (Content-Length only: the benchmark clients send no other framing), and
// returns its method.
func readRequest(br *bufio.Reader) (method string, err error) {
	clen := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return "", err
		}
		s := strings.TrimRight(string(line), "\r\n")
		if s == "" {
			break
		}
		if method == "" {
			method, _, _ = strings.Cut(s, " ")
		} else if k, v, ok := strings.Cut(s, ":"); ok && strings.EqualFold(k, "Content-Length") {
			clen, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if clen > 0 {
		if _, err := br.Discard(clen); err != nil {
			return "", err
		}
	}
	return method, nil
}

// echoAnswer is the raw HTTP/1.1 answer carrying body.
func echoAnswer(body []byte) []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
}

// startEcho starts this executable's echo-server on sock (answering body's
// bytes; extra: its flags, env: added to its environment) and waits until
// it accepts connections. stop kills it.
func startEcho(exe, sock, bodyFile string, env []string, extra ...string) (pid int, stop func(), err error) {
	echo := exec.Command(exe, append([]string{"echo-server", "--socket", sock, "--body", bodyFile}, extra...)...)
	echo.Stderr = os.Stderr
	echo.Env = append(os.Environ(), env...)
	echo.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := echo.Start(); err != nil {
		return 0, nil, err
	}
	stop = func() { _ = echo.Process.Kill(); _ = echo.Wait() }
	for i := 0; ; i++ {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return echo.Process.Pid, stop, nil
		}
		if i > 500 {
			stop()
			return 0, nil, fmt.Errorf("echo server: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
