package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// TestMessageNoSocket: no sidecar on the socket is exit 69 with one
// "client:" prefix, the socket path, a hint at --socket and
// BATON_SIDECAR_SOCKET_PATH, and no blame on ZooKeeper.
func TestMessageNoSocket(t *testing.T) {
	dir := cleanEnv(t)
	sock := filepath.Join(dir, "none.sock")
	for _, args := range [][]string{
		{"--socket", sock, "lock", "P1", "--", "true"},
		{"--socket", sock, "status"},
		{"--socket", sock, "locks"},
		{"--socket", sock, "reload"},
	} {
		code, _, stderr := runBaton(t, args...)
		if code != exitUnavailable {
			t.Errorf("%q: exit %d, want 69; stderr %q", args, code, stderr)
		}
		for _, want := range []string{"no sidecar answers at " + sock, "--socket", "BATON_SIDECAR_SOCKET_PATH"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%q: stderr %q, want %q", args, stderr, want)
			}
		}
		if n := strings.Count(stderr, "client:"); n > 1 {
			t.Errorf("%q: stderr has %d \"client:\" prefixes: %q", args, n, stderr)
		}
		if strings.Contains(strings.ToLower(stderr), "zookeeper") {
			t.Errorf("%q: stderr blames ZooKeeper for a missing socket: %q", args, stderr)
		}
	}
}

// TestMessageNotBaton: a socket served by something that is not Baton is
// exit 69 with a message saying so, not a JSON decoding error (exit 1).
func TestMessageNotBaton(t *testing.T) {
	dir := cleanEnv(t)
	sock := filepath.Join(dir, "web.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<!doctype html><html><body>not baton</body></html>")
	})}
	go hs.Serve(ln)
	defer hs.Close()
	for _, args := range [][]string{
		{"--socket", sock, "status"},
		{"--socket", sock, "lock", "P1", "--", "true"},
		{"--socket", sock, "locks"},
	} {
		code, stdout, stderr := runBaton(t, args...)
		if code != exitUnavailable {
			t.Errorf("%q: exit %d, want 69; stderr %q", args, code, stderr)
		}
		if !strings.Contains(stderr, sock+" does not answer as a Baton sidecar: HTTP 200, text/html") ||
			strings.Contains(stderr, "invalid character") {
			t.Errorf("%q: stderr %q", args, stderr)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q, want nothing (the command must not run)", args, stdout)
		}
	}
}

// TestMessageCommandNotRunnable: `baton lock -- ./missing` is 127 (not
// found) and a file that is not executable 126, as in POSIX shells; no
// sidecar is asked (none listens here).
func TestMessageCommandNotRunnable(t *testing.T) {
	dir := cleanEnv(t)
	sock := filepath.Join(dir, "none.sock")
	notExec := writeFile(t, filepath.Join(dir, "script"), "#!/bin/sh")
	for _, tc := range []struct {
		cmd  string
		want int
		msg  string
	}{
		{"./missing", exitNotFound, "./missing: command not found"},
		{filepath.Join(dir, "missing"), exitNotFound, "missing: command not found"},
		{"no-such-command-baton", exitNotFound, "no-such-command-baton: command not found"},
		{notExec, exitCannotExec, "script: cannot be run"},
		{dir, exitCannotExec, "cannot be run"},
	} {
		code, _, stderr := runBaton(t, "--socket", sock, "lock", "obj", "--", tc.cmd)
		if code != tc.want || !strings.Contains(stderr, tc.msg) || !strings.Contains(stderr, "no lock taken") {
			t.Errorf("baton lock -- %s: exit %d, stderr %q; want %d and %q", tc.cmd, code, stderr, tc.want, tc.msg)
		}
	}
	code, stdout, _ := runBaton(t, "lock", "--help")
	if code != 0 || !strings.Contains(stdout, "127             CMD not found") || !strings.Contains(stdout, "126             CMD found but cannot be run") {
		t.Errorf("baton lock --help does not document 126 and 127: %q", stdout)
	}
}

// TestMessageConfigFile: a --config file that does not exist, or is not
// a file, is one line naming --config and the file.
func TestMessageConfigFile(t *testing.T) {
	dir := cleanEnv(t)
	missing := filepath.Join(dir, "x", "y.properties")
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--config", missing, "status"}, exitFailure},
		{[]string{"--config", missing, "config", "check"}, exitFailure},
		{[]string{"--config", missing, "serve"}, exitFailure},
		{[]string{"--config", missing, "lock", "P1", "--", "true"}, exitUsage},
	} {
		code, _, stderr := runBaton(t, tc.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != tc.code || first != "baton: --config "+missing+": no such file" {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, "baton: --config "+missing+": no such file")
		}
	}
	code, _, stderr := runBaton(t, "--config", dir, "config", "check")
	if code != exitFailure || stderr != "baton: --config "+dir+": is a directory\n" {
		t.Errorf("--config DIR: exit %d, stderr %q", code, stderr)
	}
}

// TestMessageSessionTimeoutRange: a negative session timeout names the range.
func TestMessageSessionTimeoutRange(t *testing.T) {
	cleanEnv(t)
	code, _, stderr := runBaton(t, "config", "check", "--set", "zookeeper.session.timeout=-1")
	want := `--set zookeeper.session.timeout: "-1" is not a whole number of milliseconds from 1000 to 600000`
	if code != exitFailure || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want %q", code, stderr, want)
	}
}

// startNoZKSidecar runs a real sidecar in-process whose ZooKeeper
// (127.0.0.1:1) never answers: it serves the API, validates requests and
// reports itself unready. It logs to the returned buffer.
func startNoZKSidecar(t *testing.T, dir string) (sock string, logs *testenv.Buffer) {
	t.Helper()
	sock = filepath.Join(dir, "nozk.sock")
	l, err := props.Load(props.LoadOptions{NoFile: true, Set: []string{
		"zookeeper.servers=127.0.0.1:1", "sidecar.socket.path=" + sock, "sidecar.node.id=nozk",
		"sidecar.lease.max=60000", "queue.dir=" + filepath.Join(dir, "q"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	logs = &testenv.Buffer{}
	srv, err := sidecar.New(l.Config, sidecar.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	c := client.New(sock)
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Health(context.Background()); err == nil {
			return sock, logs
		}
		if time.Now().After(deadline) {
			t.Fatal("the sidecar does not answer /healthz")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMessageLeaseFlag: `baton lock --lease 1h` over the sidecar's
// sidecar.lease.max names --lease and the allowed range, not lease_ms.
func TestMessageLeaseFlag(t *testing.T) {
	dir := cleanEnv(t)
	sock, _ := startNoZKSidecar(t, dir)
	code, stdout, stderr := runBaton(t, "--socket", sock, "lock", "--lease", "1h", "P1", "--", "echo", "ran")
	want := "baton: --lease: 1h0m0s is not between 1ms and 1m0s (the sidecar's sidecar.lease.max)\n"
	if code != exitUsage || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "lease_ms") || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 64 and %q", code, stdout, stderr, want)
	}
}

// TestMessageKafkaUnset: `baton dlq ls` with nothing listening at the
// brokers is exit 69 naming kafka.brokers, BATON_KAFKA_BROKERS and where the
// value came from — the default nobody set, or the --set that set it — not a
// bare dial error (issue 20 item 5).
func TestMessageKafkaUnset(t *testing.T) {
	cleanEnv(t)
	ports, err := testenv.ReservePorts(1) // reserved, and nothing listens on it
	if err != nil {
		t.Fatal(err)
	}
	defer ports[0].Release()
	closed := ports[0].Addr()
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"default", []string{"dlq", "ls"}, []string{"kafka.brokers is not set", "localhost:9092", "BATON_KAFKA_BROKERS"}},
		{"set", []string{"--set", "kafka.brokers=" + closed, "dlq", "ls"}, []string{"kafka.brokers is set by --set", closed, "BATON_KAFKA_BROKERS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "default" {
				if c, err := net.DialTimeout("tcp", "localhost:9092", time.Second); err == nil {
					c.Close()
					t.Skip("something listens on localhost:9092 here")
				}
			}
			code, _, stderr := runBaton(t, tc.args...)
			if code != exitUnavailable {
				t.Errorf("exit %d, want 69; stderr %q", code, stderr)
			}
			for _, want := range tc.wants {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q, want %q", stderr, want)
				}
			}
		})
	}
}

// TestMessageMissingArg: a missing or extra positional argument names it and
// shows the usage line, as baton lock does (issue 20: "accepts 1 arg(s),
// received 0"); and counts are singular where they are one.
func TestMessageMissingArg(t *testing.T) {
	cleanEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"revoke"}, "missing OBJECT: baton revoke OBJECT"},
		{[]string{"ops", "get"}, "missing ID: baton ops get ID"},
		{[]string{"ops", "replay", "a", "b"}, `too many arguments (2; unexpected "b"): baton ops replay ID`},
		{[]string{"ops", "submit"}, "missing OBJECT: baton ops submit OBJECT [PAYLOAD-JSON]"},
		{[]string{"ops", "discard"}, "missing ID: baton ops discard ID"},
	} {
		code, _, stderr := runBaton(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "arg(s)") {
			t.Errorf("%q: exit %d, stderr %q; want 64 and %q", tc.args, code, stderr, tc.want)
		}
	}
	for n, want := range map[int]string{0: "0 attempts", 1: "1 attempt", 2: "2 attempts"} {
		if got := count(n, "attempt"); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
	if got := count(3, "older entry"); got != "3 older entries" {
		t.Errorf("count(3, entry) = %q", got)
	}
}
