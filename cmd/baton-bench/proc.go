package main

// Baton as deployed: `baton serve` processes, driven over their unix
// sockets by a stock net/http client (baton-http) or by Baton's Go client
// (baton-client, baton-shared). The clients live in this process (so the
// overlap detector sees every holder); only the sidecars are processes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonhq/baton/client"
)

// sidecarProc is one `baton serve` process with its own properties file,
// socket, queue directory and ZooKeeper session.
type sidecarProc struct {
	cmd    *exec.Cmd
	socket string
	log    string
	exited chan struct{}
}

// batonBin finds the baton executable: --baton, $BATON_BIN, bin/baton
// beside this executable's directory, then PATH.
func batonBin(flagValue string) (string, error) {
	for _, p := range []string{flagValue, os.Getenv("BATON_BIN")} {
		if p != "" {
			return filepath.Abs(p)
		}
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "baton")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("baton")
	if err != nil {
		return "", errors.New("no baton executable: build it (go build -o bin/baton ./cmd/baton) and pass --baton PATH")
	}
	return p, nil
}

// tickTime is the ZooKeeper server's tickTime: the conf four-letter word,
// else $ZK_TICK (the peers harness's zk.sh setting), else 2000 ms.
func tickTime(zkAddr string) int {
	if out, err := fourLetter(zkAddr, "conf"); err == nil {
		for line := range strings.Lines(out) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == "tickTime" {
				if n, err := strconv.Atoi(v); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	if n, err := strconv.Atoi(os.Getenv("ZK_TICK")); err == nil && n > 0 {
		return n
	}
	return 2000
}

func fourLetter(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	return string(b), err
}

// mntr reads one integer of the mntr four-letter word.
func mntr(addr, key string) (int64, error) {
	out, err := fourLetter(addr, "mntr")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == key {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in mntr", key)
}

// sidecarEnv is added to the environment of every `baton serve` started
// (the --env flags of cost and probe, e.g. GOMAXPROCS=2).
var sidecarEnv []string

// startSidecar writes name.properties in dir and starts `baton serve`; it
// returns once /readyz answers 200 (ZooKeeper session up).
func startSidecar(bin, dir, name string, props map[string]string) (*sidecarProc, error) {
	sock := filepath.Join(dir, name+".sock")
	p := map[string]string{
		"sidecar.socket.path":    sock,
		"sidecar.socket.mode":    "0600",
		"sidecar.node.id":        name,
		"sidecar.shutdown.grace": "0",
		"queue.dir":              filepath.Join(dir, name+"-queue"),
		"log.level":              "warn",
	}
	maps.Copy(p, props)
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	cfg := filepath.Join(dir, name+".properties")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	return spawnSidecar(exec.Command(bin, "serve", "--config", cfg), dir, name, sock)
}

// startPeerSidecar starts this executable's peer-sidecar (peersidecar.go):
// the peer's lock behind a plain HTTP server, the control impls gozk-*.
func startPeerSidecar(dir, name, zkAddr, root string) (*sidecarProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, name+".sock")
	return spawnSidecar(exec.Command(self, "peer-sidecar", "--zk", zkAddr, "--root", root, "--socket", sock), dir, name, sock)
}

// spawnSidecar starts cmd, a sidecar serving sock, and returns once its
// /readyz answers 200.
func spawnSidecar(cmd *exec.Cmd, dir, name, sock string) (*sidecarProc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), sidecarEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	logf.Close()
	s := &sidecarProc{cmd: cmd, socket: sock, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	c := client.New(sock)
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ready(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("sidecar %s exited: %s", name, s.tail())
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("sidecar %s not ready within 60s: %v; %s", name, err, s.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *sidecarProc) pid() int { return s.cmd.Process.Pid }

func (s *sidecarProc) tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// stop: SIGTERM (shutdown grace 0: the leases left are released at once),
// SIGKILL after 10 s.
func (s *sidecarProc) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// sidecarProps are the properties of a bench sidecar: the shape of
// an application node (15 s session, the server's tickTime, no app URL).
func (e *env) sidecarProps() map[string]string {
	return map[string]string{
		"zookeeper.servers":         e.cfg.zkAddr,
		"zookeeper.session.timeout": "15000",
		"zookeeper.tick.time":       strconv.Itoa(e.tick),
		"zookeeper.lock.root":       e.cfg.root,
		"zookeeper.lock.protocol":   e.cfg.proto(),
	}
}

// procSession is one client of its own `baton serve` process (or, for
// baton-shared, of the one shared process: then it does not own it).
type procSession struct {
	sc     *sidecarProc
	own    bool
	c      *client.Client // baton-client, baton-shared
	http   *http.Client   // baton-http
	noWait bool           // --release-wait=false: DELETE ?wait=false
}

func (e *env) newProcSession(i int64) (session, error) {
	var sc *sidecarProc
	peer := strings.HasPrefix(e.cfg.impl, "gozk-")
	own := e.cfg.impl != "baton-shared" && e.cfg.impl != "gozk-shared"
	if own {
		var err error
		name := "s" + strconv.FormatInt(i, 10)
		if peer {
			sc, err = startPeerSidecar(e.dir, name, e.cfg.zkAddr, e.cfg.root)
		} else {
			sc, err = startSidecar(e.bin, e.dir, name, e.sidecarProps())
		}
		if err != nil {
			return nil, err
		}
	} else {
		e.sharedOnce.Do(func() {
			if peer {
				e.shared, e.sharedErr = startPeerSidecar(e.dir, "shared", e.cfg.zkAddr, e.cfg.root)
				return
			}
			p := e.sidecarProps()
			p["sidecar.max.waiters"] = "100000"
			e.shared, e.sharedErr = startSidecar(e.bin, e.dir, "shared", p)
		})
		if e.sharedErr != nil {
			return nil, e.sharedErr
		}
		sc = e.shared
	}
	s := &procSession{sc: sc, own: own, noWait: !e.cfg.releaseWait}
	if e.cfg.impl == "baton-http" || peer {
		s.http = unixHTTPClient(sc.socket)
	} else {
		s.c = client.New(sc.socket)
	}
	return s, nil
}

// unixHTTPClient is Go's stock net/http client, dialing the unix socket.
func unixHTTPClient(sock string) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     time.Minute,
	}
	return &http.Client{Transport: tr}
}

func (s *procSession) locker(obj string) locker {
	if s.http != nil {
		return &httpLocker{c: s.http, obj: obj, noWait: s.noWait}
	}
	return &clientLocker{c: s.c, obj: obj, noWait: s.noWait}
}

func (s *procSession) close() {
	if s.c != nil {
		s.c.Close()
	}
	if s.http != nil {
		s.http.CloseIdleConnections()
	}
	if s.own {
		s.sc.stop()
	}
}

// httpLocker speaks the HTTP API with net/http: POST
// /v1/locks/{object}/acquire, DELETE /v1/leases/{id}.
type httpLocker struct {
	c      *http.Client
	obj    string
	lease  string
	noWait bool
}

var acquireBody = []byte(`{"wait_ms":60000}`)

func (l *httpLocker) Lock() error {
	var v struct {
		LeaseID string `json:"lease_id"`
	}
	if err := httpDo(l.c, http.MethodPost, "/v1/locks/"+url.PathEscape(l.obj)+"/acquire", acquireBody, &v); err != nil {
		return err
	}
	if v.LeaseID == "" {
		return errors.New("acquire: no lease_id in the answer")
	}
	l.lease = v.LeaseID
	return nil
}

func (l *httpLocker) Unlock() error {
	var v struct {
		Released  bool `json:"released"`
		Releasing bool `json:"releasing"`
	}
	if l.noWait {
		if err := httpDo(l.c, http.MethodDelete, "/v1/leases/"+url.PathEscape(l.lease)+"?wait=false", nil, &v); err != nil {
			return err
		}
		if !v.Releasing {
			return errors.New("release ?wait=false: releasing is false")
		}
		return nil
	}
	if err := httpDo(l.c, http.MethodDelete, "/v1/leases/"+url.PathEscape(l.lease), nil, &v); err != nil {
		return err
	}
	if !v.Released {
		return errors.New("release: released is false")
	}
	return nil
}

// httpDo sends one request and decodes a 200 (or 202) answer into out.
func httpDo(c *http.Client, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://baton"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// sharedState is what the baton-shared sessions share.
type sharedState struct {
	sharedOnce sync.Once
	shared     *sidecarProc
	sharedErr  error
}

// benchSetup is what floor, w3floor and cost run on: the baton executable
// (bat, else found as batonBin finds it), a ZooKeeper (zkAddr, else one
// started here) and a fresh temporary directory (named after prefix).
// done stops what it started and removes the directory.
func benchSetup(bat, zkAddr, prefix string) (bin, addr, dir string, done func(), err error) {
	if bin, err = batonBin(bat); err != nil {
		return "", "", "", nil, err
	}
	addr, stop, err := startZK(zkAddr)
	if err != nil {
		return "", "", "", nil, err
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		stop()
		return "", "", "", nil, err
	}
	return bin, addr, dir, func() { os.RemoveAll(dir); stop() }, nil
}
