package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

func TestLockArgs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dash     int
		args     []string
		wantObj  []string
		wantArgv []string
		wantErr  string
	}{
		{"ok", 1, []string{"obj", "cmd", "a"}, []string{"obj"}, []string{"cmd", "a"}, ""},
		{"no dash", -1, []string{"obj", "cmd"}, nil, nil, "missing -- before the command"},
		{"held without a command", -1, []string{"obj"}, []string{"obj"}, nil, ""},
		{"nothing", -1, nil, nil, nil, "missing OBJECT"},
		{"no object", 0, []string{"cmd"}, nil, nil, "missing OBJECT"},
		{"two objects", 2, []string{"a", "b", "cmd"}, []string{"a", "b"}, []string{"cmd"}, ""},
		{"too many objects", 65, append(make([]string, 65), "cmd"), nil, nil, "65 objects before --, at most 64"},
		{"no command", 1, []string{"obj"}, nil, nil, "missing CMD after --"},
		{"set without a command", 2, []string{"a", "b"}, nil, nil, "missing CMD after --"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, argv, err := lockArgs(tc.dash, tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("lockArgs(%d, %q) error = %v, want %q", tc.dash, tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(obj, tc.wantObj) || !slices.Equal(argv, tc.wantArgv) {
				t.Errorf("lockArgs(%d, %q) = %q, %q, %v; want %q, %q", tc.dash, tc.args, obj, argv, err, tc.wantObj, tc.wantArgv)
			}
		})
	}
}

func TestLockEnv(t *testing.T) {
	base := []string{"PATH=/bin", "BATON_OBJECT=old", "BATON_LEASE_ID=old", "BATON_FENCING_TOKEN=1", "BATON_LOG_LEVEL=debug"}
	got := lockEnv(base, "article-42", "inc.lease", 1234)
	want := []string{"PATH=/bin", "BATON_LOG_LEVEL=debug", "BATON_OBJECT=article-42", "BATON_LEASE_ID=inc.lease", "BATON_FENCING_TOKEN=1234"}
	if !slices.Equal(got, want) {
		t.Errorf("lockEnv = %q, want %q", got, want)
	}
	base = append(base, "BATON_FENCING_TOKENS=old=1", "BATON_PERMIT=9", "BATON_SEMAPHORE=old")
	got = lockEnv(base, "a", "inc.lease", 7, "BATON_FENCING_TOKENS=a=7 b=8")
	want = []string{"PATH=/bin", "BATON_LOG_LEVEL=debug", "BATON_OBJECT=a", "BATON_LEASE_ID=inc.lease", "BATON_FENCING_TOKEN=7", "BATON_FENCING_TOKENS=a=7 b=8"}
	if !slices.Equal(got, want) {
		t.Errorf("lockEnv of a set = %q, want %q", got, want)
	}
}

// lockRun runs `baton --socket sock lock ARGS` in-process in a goroutine.
type lockRun struct {
	out, err *logBuf
	done     chan int
	started  time.Time
}

func startLock(sock string, stdin io.Reader, args ...string) *lockRun {
	r := &lockRun{out: newLogBuf(), err: newLogBuf(), done: make(chan int, 1), started: time.Now()}
	full := append([]string{"--config", os.DevNull, "--socket", sock, "lock"}, args...)
	go func() { r.done <- runIn(full, stdin, r.out, r.err) }()
	return r
}

// wait returns the exit status and when it came.
func (r *lockRun) wait(t *testing.T, timeout time.Duration) (int, time.Time) {
	t.Helper()
	select {
	case code := <-r.done:
		return code, time.Now()
	case <-time.After(timeout):
		t.Fatalf("baton lock still running after %v; stdout %q stderr %q", timeout, r.out.String(), r.err.String())
		return 0, time.Time{}
	}
}

// lockIn runs `baton lock` in-process to the end.
func lockIn(t *testing.T, sock string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	r := startLock(sock, nil, args...)
	code, _ = r.wait(t, 60*time.Second)
	return code, r.out.String(), r.err.String()
}

// holderOf returns the object's holder as the sidecar sees it (nil if free).
func holderOf(t *testing.T, sock, obj string) *api.Holder {
	t.Helper()
	c := client.New(sock)
	defer c.Close()
	st, err := c.Inspect(context.Background(), obj)
	if err != nil {
		t.Fatalf("inspect %q: %v", obj, err)
	}
	return st.Holder
}

func waitersOf(t *testing.T, sock, obj string) int {
	t.Helper()
	c := client.New(sock)
	defer c.Close()
	st, err := c.Inspect(context.Background(), obj)
	if err != nil {
		t.Fatalf("inspect %q: %v", obj, err)
	}
	return len(st.Waiters)
}

// testLockEnv: CMD gets BATON_OBJECT, BATON_LEASE_ID and BATON_FENCING_TOKEN
// (the holder's token as GET /v1/locks/OBJ shows it), overriding inherited
// values; the lock is released when CMD exits.
func testLockEnv(t *testing.T, e *env, s *sidecarProc) {
	t.Setenv("BATON_OBJECT", "inherited")
	t.Setenv("BATON_LEASE_ID", "inherited")
	t.Setenv("BATON_FENCING_TOKEN", "-1")
	const obj = "env-1"
	inR, inW := io.Pipe()
	defer inW.Close()
	r := startLock(s.socket, inR, "--info", "env test", obj, "--", "sh", "-c",
		`echo "obj=$BATON_OBJECT lease=$BATON_LEASE_ID token=$BATON_FENCING_TOKEN"; read x; echo "bye $x"`)
	line := r.out.waitFor(t, 0, "\n", 30*time.Second)
	m := regexp.MustCompile(`^obj=(\S*) lease=(\S*) token=(\S*)\n`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("CMD printed %q", line)
	}
	gotObj, gotLease, gotToken := m[1], m[2], m[3]
	h := holderOf(t, s.socket, obj)
	if h == nil {
		t.Fatalf("no holder of %q while CMD runs", obj)
	}
	if gotObj != obj {
		t.Errorf("BATON_OBJECT = %q, want %q", gotObj, obj)
	}
	if want := strconv.FormatInt(h.Token, 10); gotToken != want {
		t.Errorf("BATON_FENCING_TOKEN = %q, want the holder's token %s", gotToken, want)
	}
	if h.Info != "env test" || h.Sidecar != "shared" {
		t.Errorf("holder = %+v, want info %q from sidecar shared", h, "env test")
	}
	c := client.New(s.socket)
	defer c.Close()
	hl, err := c.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(gotLease, hl.Incarnation+".") || len(gotLease) < len(hl.Incarnation)+33 {
		t.Errorf("BATON_LEASE_ID = %q, want a lease id of incarnation %s", gotLease, hl.Incarnation)
	}
	// The lease is live: GET /v1/leases/{id} answers held.
	if code, body := rawDo(t, s.socket, http.MethodGet, "/v1/leases/"+gotLease); code != 200 || !strings.Contains(body, `"state":"held"`) {
		t.Errorf("GET the lease: %d %s", code, body)
	}
	fmt.Fprintln(inW, "now")
	inW.Close() // EOF for the copy of stdin into CMD (in-process runs only: a real stdin is passed as is)
	code, _ := r.wait(t, 30*time.Second)
	if code != 0 || !strings.Contains(r.out.String(), "bye now") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0 and bye", code, r.out.String(), r.err.String())
	}
	if h := holderOf(t, s.socket, obj); h != nil {
		t.Errorf("holder after CMD exited = %+v, want none", h)
	}
}

// rawDo sends one request over the socket and returns status and body.
func rawDo(t *testing.T, sock, method, path string) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://baton"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// testLockExitStatuses: CMD's own status, 128+n, 69, 64, 126/127.
func testLockExitStatuses(t *testing.T, e *env, s *sidecarProc) {
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(e.dir, "none.sock")
	for _, tc := range []struct {
		name   string
		sock   string // default: the shared sidecar
		args   []string
		want   int
		stderr string // substring of stderr
	}{
		{"CMD status 0", "", []string{"ex-0", "--", "true"}, 0, ""},
		{"CMD status 3", "", []string{"ex-3", "--", "sh", "-c", "exit 3"}, 3, ""},
		{"CMD killed by SIGKILL", "", []string{"ex-kill", "--", "sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
		{"CMD killed by SIGTERM", "", []string{"ex-term", "--", "sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"CMD not found", "", []string{"ex-nf", "--", "no-such-command-baton"}, 127, "executable file not found"},
		{"CMD not executable", "", []string{"ex-nx", "--", notExec}, 126, "permission denied"},
		{"no sidecar", none, []string{"ex-ns", "--", "true"}, exitUnavailable, "no sidecar answers at " + none},
		{"no --", "", []string{"ex-u", "true"}, exitUsage, "missing -- before the command"},
		{"no CMD", "", []string{"ex-u", "--"}, exitUsage, "missing CMD after --"},
		{"no OBJECT", "", []string{"--", "true"}, exitUsage, "missing OBJECT"},
		{"two names with -n", "", []string{"-n", "2", "a", "b", "--", "true"}, exitUsage, "-n: a semaphore has one NAME, got 2 (a b)"},
		{"a set with --preempt", "", []string{"--preempt", "a", "b", "--", "true"}, exitUsage, "--preempt: not with several objects"},
		{"bad duration", "", []string{"--wait", "soon", "ex-u", "--", "true"}, exitUsage, `invalid argument "soon" for "--wait"`},
		{"wait too long", "", []string{"--wait", "11m", "ex-u", "--", "true"}, exitUsage, "--wait: 11m0s is not between 0 and 10m0s"},
		{"negative kill grace", "", []string{"--kill-grace", "-1s", "ex-u", "--", "true"}, exitUsage, "--kill-grace: -1s is negative"},
		{"zero lease", "", []string{"--lease", "0s", "ex-u", "--", "true"}, exitUsage, "--lease: 0s is not a positive duration"},
		{"bad type", "", []string{"--type", "urgent", "ex-u", "--", "true"}, exitUsage, `--type: "urgent" is not foreground or background`},
		{"bad conflict code", "", []string{"--conflict-exit-code", "300", "ex-u", "--", "true"}, exitUsage, "--conflict-exit-code: 300"},
		{"unknown flag", "", []string{"--bogus", "ex-u", "--", "true"}, exitUsage, "unknown flag: --bogus"},
		{"bad object name (sidecar 400)", "", []string{"bad\x01name", "--", "true"}, exitUsage, "BadRequest"},
		{"lease over the max (sidecar 400)", "", []string{"--lease", "1000h", "ex-u", "--", "true"}, exitUsage, "--lease: 1000h0m0s is not between 1ms and"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := tc.sock
			if sock == "" {
				sock = s.socket
			}
			code, stdout, stderr := lockIn(t, sock, tc.args...)
			if code != tc.want {
				t.Errorf("baton lock %q = exit %d, want %d; stdout %q stderr %q", tc.args, code, tc.want, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("baton lock %q stderr = %q, want %q", tc.args, stderr, tc.stderr)
			}
			if tc.want == exitUsage && !strings.Contains(stderr, "Run 'baton lock --help' for usage.") {
				t.Errorf("baton lock %q stderr = %q, want a usage hint", tc.args, stderr)
			}
		})
	}
	for _, obj := range []string{"ex-0", "ex-3", "ex-kill", "ex-term"} {
		if h := holderOf(t, s.socket, obj); h != nil {
			t.Errorf("%s still held after baton lock exited: %+v", obj, h)
		}
	}
}

// testLockConflict: 75 when held elsewhere (or --conflict-exit-code), CMD
// not run, no node left behind.
func testLockConflict(t *testing.T, e *env, s *sidecarProc) {
	const obj = "conflict-1"
	c := client.New(s.socket)
	defer c.Close()
	held, err := c.Acquire(context.Background(), obj, client.WithInfo("held by the test"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for _, tc := range []struct {
		name string
		args []string
		want int
		min  time.Duration
	}{
		{"wait 200ms", []string{"--wait", "200ms"}, exitNotTaken, 200 * time.Millisecond},
		{"try once", []string{"--wait", "0"}, exitNotTaken, 0},
		{"conflict exit code", []string{"--wait", "200ms", "--conflict-exit-code", "9"}, 9, 200 * time.Millisecond},
		{"background type", []string{"--type", "background", "--wait", "100ms"}, exitNotTaken, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			code, stdout, stderr := lockIn(t, s.socket, append(tc.args, obj, "--", "echo", "ran")...)
			took := time.Since(t0)
			if code != tc.want {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.want, stderr)
			}
			if stdout != "" {
				t.Errorf("CMD ran: stdout %q", stdout)
			}
			if !strings.Contains(stderr, "not granted after") || !strings.Contains(stderr, `info "held by the test"`) || strings.Contains(stderr, "baton: baton:") {
				t.Errorf("stderr %q, want the holder named once", stderr)
			}
			if took < tc.min {
				t.Errorf("gave up after %v, want at least %v", took, tc.min)
			}
		})
	}
	if n := waitersOf(t, s.socket, obj); n != 0 {
		t.Errorf("%d waiter nodes left behind", n)
	}
}

// testLockLostKillGrace: a lock lost while CMD runs (its privateLock
// deleted by another ZooKeeper client) → SIGTERM to CMD, SIGKILL after
// --kill-grace for a CMD that does not exit, exit 76.
func testLockLostKillGrace(t *testing.T, e *env, s *sidecarProc) {
	conn := e.zkConn(t)
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		script  string
		wantOut string
	}{
		{"TERM trapped, keeps running", time.Second, // below the validity left (≥ half the session timeout)
			`trap "echo got-TERM" TERM; echo started; while :; do sleep 0.1; done`, "got-TERM"},
		{"TERM ignored", 500 * time.Millisecond, `trap "" TERM; echo started; sleep 30`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := "lost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			r := startLock(s.socket, nil, "--kill-grace", tc.grace.String(), obj, "--", "sh", "-c", tc.script)
			r.out.waitFor(t, 0, "started", 30*time.Second)
			t0 := time.Now()
			if err := conn.Delete(e2eRoot+"/"+obj+"/privateLock", -1); err != nil {
				t.Fatalf("delete privateLock: %v", err)
			}
			code, at := r.wait(t, 30*time.Second)
			took := at.Sub(t0)
			t.Logf("privateLock deleted → baton lock exited %d after %v (kill grace %v)", code, took.Round(time.Millisecond), tc.grace)
			if code != exitLost {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", code, exitLost, r.out.String(), r.err.String())
			}
			if !strings.Contains(r.out.String(), tc.wantOut) {
				t.Errorf("stdout %q, want %q (SIGTERM first)", r.out.String(), tc.wantOut)
			}
			if took < tc.grace || took > tc.grace+5*time.Second {
				t.Errorf("CMD stopped %v after the loss, want the kill grace %v (plus a little)", took, tc.grace)
			}
			for _, want := range []string{"lost", "sending SIGTERM", "sending SIGKILL"} {
				if !strings.Contains(r.err.String(), want) {
					t.Errorf("stderr %q, want %q", r.err.String(), want)
				}
			}
		})
	}
}

// testLockReleasedByCmd: a lease released with its id (as CMD may do with
// BATON_LEASE_ID) is not a loss: CMD keeps running and its status is kept.
func testLockReleasedByCmd(t *testing.T, e *env, s *sidecarProc) {
	inR, inW := io.Pipe()
	defer inW.Close()
	r := startLock(s.socket, inR, "rel-1", "--", "sh", "-c", `echo "$BATON_LEASE_ID"; read x; echo still-running; exit 4`)
	id := strings.TrimSpace(r.out.waitFor(t, 0, "\n", 30*time.Second))
	if code, body := rawDo(t, s.socket, http.MethodDelete, "/v1/leases/"+id); code != 200 {
		t.Fatalf("DELETE lease: %d %s", code, body)
	}
	r.err.waitFor(t, 0, "released by someone else", 30*time.Second)
	fmt.Fprintln(inW)
	inW.Close()
	code, _ := r.wait(t, 30*time.Second)
	if code != 4 || !strings.Contains(r.out.String(), "still-running") {
		t.Errorf("exit %d stdout %q stderr %q, want 4 and still-running", code, r.out.String(), r.err.String())
	}
}

// testLockSignals: SIGTERM/SIGINT to a `baton lock` process are forwarded
// to CMD; a signal while waiting abandons the wait (128+n, no node left).
func testLockSignals(t *testing.T, e *env, s *sidecarProc) {
	// A test started with SIGINT ignored (in the background of a
	// non-interactive shell) would pass that on to baton lock, which keeps
	// it ignored. Handling it here while spawning gives the children the
	// default action.
	ign := make(chan os.Signal, 1)
	signal.Notify(ign, syscall.SIGINT)
	defer signal.Stop(ign)
	t.Run("SIGTERM forwarded, CMD's status", func(t *testing.T) {
		p := start(t, "lock-fwd", nil, e.bin, "--socket", s.socket, "lock", "fwd-1", "--",
			"sh", "-c", `trap "echo got TERM; exit 7" TERM; echo ready; sleep 30 & wait`)
		p.out.waitFor(t, 0, "ready", 30*time.Second)
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t, 30*time.Second); code != 7 || !strings.Contains(p.out.String(), "got TERM") {
			t.Errorf("exit %d, output %q; want 7 and got TERM", code, p.out.String())
		}
		if h := holderOf(t, s.socket, "fwd-1"); h != nil {
			t.Errorf("fwd-1 still held: %+v", h)
		}
	})
	t.Run("SIGINT forwarded, CMD dies of it", func(t *testing.T) {
		p := start(t, "lock-int", nil, e.bin, "--socket", s.socket, "lock", "fwd-2", "--", "sh", "-c", `echo ready; exec sleep 30`)
		p.out.waitFor(t, 0, "ready", 30*time.Second)
		p.signal(t, syscall.SIGINT)
		if code := p.wait(t, 30*time.Second); code != 128+2 {
			t.Errorf("exit %d, want 130; output %q", code, p.out.String())
		}
	})
	// Without a command (issue 20): holds until SIGINT or SIGTERM, prints
	// the lease, exits 0 after releasing.
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("held without a command until "+sig.String(), func(t *testing.T) {
			obj := "hold-" + strconv.Itoa(int(sig))
			p := start(t, "lock-hold", nil, e.bin, "--socket", s.socket, "lock", obj)
			out := p.out.waitFor(t, 0, "until SIGINT", 30*time.Second)
			h := holderOf(t, s.socket, obj)
			if h == nil || !strings.Contains(out, "BATON_OBJECT="+obj+"\n") ||
				!strings.Contains(out, "BATON_FENCING_TOKEN="+strconv.FormatInt(h.Token, 10)+"\n") ||
				!strings.Contains(out, "BATON_NODE="+h.Node+"\n") || !strings.Contains(out, "BATON_LEASE_ID=") {
				t.Fatalf("holder %+v; output %q: want the lease printed", h, out)
			}
			if code, _, _ := runBaton(t, "--socket", s.socket, "lock", "--wait", "0s", obj, "--", "true"); code != exitNotTaken {
				t.Errorf("a second baton lock while held: exit %d, want 75", code)
			}
			p.signal(t, sig)
			if code := p.wait(t, 30*time.Second); code != 0 || !strings.Contains(p.out.String(), "released") {
				t.Errorf("exit %d after %v, output %q; want 0 and released", code, sig, p.out.String())
			}
			if h := holderOf(t, s.socket, obj); h != nil {
				t.Errorf("%s still held after %v: %+v", obj, sig, h)
			}
		})
	}
	t.Run("--verbose says what it waits for", func(t *testing.T) {
		c := client.New(s.socket)
		defer c.Close()
		held, err := c.Acquire(context.Background(), "verbose-1", client.WithInfo("the blocker"))
		if err != nil {
			t.Fatal(err)
		}
		p := start(t, "lock-verbose", nil, e.bin, "--socket", s.socket, "lock", "-v", "--wait", "60s", "verbose-1", "--", "echo", "ran")
		out := p.out.waitFor(t, 0, "waiting for", 30*time.Second)
		for _, want := range []string{`waiting for "verbose-1": held by ` + held.Node(), "token " + strconv.FormatInt(held.Token(), 10), `info "the blocker"`, "1 waiting"} {
			if !strings.Contains(out, want) {
				t.Errorf("output %q, want %q", out, want)
			}
		}
		if err := held.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 0 || !strings.Contains(p.out.String(), "ran") {
			t.Errorf("exit %d, output %q; want 0 and ran", code, p.out.String())
		}
	})
	t.Run("SIGINT while waiting", func(t *testing.T) {
		c := client.New(s.socket)
		defer c.Close()
		held, err := c.Acquire(context.Background(), "fwd-3")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		p := start(t, "lock-wait", nil, e.bin, "--socket", s.socket, "lock", "--wait", "60s", "fwd-3", "--", "echo", "ran")
		waitCond(t, 30*time.Second, "baton lock waiting", func() bool { return waitersOf(t, s.socket, "fwd-3") == 1 })
		p.signal(t, syscall.SIGINT)
		if code := p.wait(t, 30*time.Second); code != 128+2 || strings.Contains(p.out.String(), "ran") {
			t.Errorf("exit %d, output %q; want 130 and CMD not run", code, p.out.String())
		}
		waitCond(t, 10*time.Second, "the waiter node gone", func() bool { return waitersOf(t, s.socket, "fwd-3") == 0 })
	})
}

// testLockRenews: a CMD that outlives its --lease keeps the lock (renewed
// in the background) and its status.
func testLockRenews(t *testing.T, e *env, s *sidecarProc) {
	code, stdout, stderr := lockIn(t, s.socket, "--lease", "1s", "renew-1", "--", "sh", "-c", `sleep 2.5; echo "$BATON_FENCING_TOKEN"`)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q; want 0 and no loss", code, stderr)
	}
	if h := holderOf(t, s.socket, "renew-1"); h != nil {
		t.Errorf("still held after exit: %+v", h)
	}
	if strings.TrimSpace(stdout) == "" {
		t.Errorf("no token printed")
	}
}

// testLockLongWait (issue 9, item 1): `baton lock --wait 20s` behind a
// holder that keeps the lock longer than the session timeout (5 s: longer
// than any validity) is granted and runs its command to completion,
// holding past another session timeout: exit 0. The old baton lock counted
// the validity from the acquire's send time and reported the lock lost at
// once (exit 76). Its own sidecar, with the default session timeout.
func testLockLongWait(t *testing.T, e *env) {
	s := e.startSidecar(t, "long-wait", map[string]string{"zookeeper.session.timeout": "5000"})
	const obj = "long-wait"
	first := start(t, "lock-first", nil, e.bin, "--socket", s.socket, "lock", obj, "--", "sh", "-c", "echo holding; sleep 6")
	first.out.waitFor(t, 0, "holding", 30*time.Second)
	t0 := time.Now()
	second := start(t, "lock-second", nil, e.bin, "--socket", s.socket, "lock", "--wait", "20s", obj, "--",
		"sh", "-c", "echo got it; sleep 6; echo done")
	if code := first.wait(t, 30*time.Second); code != 0 {
		t.Errorf("first holder: exit %d: %s", code, first.out.String())
	}
	second.out.waitFor(t, 0, "got it", 30*time.Second)
	granted := time.Now()
	code := second.wait(t, 30*time.Second)
	t.Logf("granted after %v of waiting; exit %d after %v", granted.Sub(t0).Round(time.Millisecond), code, time.Since(granted).Round(time.Millisecond))
	if out := second.out.String(); code != 0 || !strings.Contains(out, "done") {
		t.Errorf("baton lock --wait 20s: exit %d, output %q; want 0 and the command run to completion", code, out)
	}
	if granted.Sub(t0) < 5*time.Second {
		t.Errorf("granted after %v: the wait was not longer than the session timeout", granted.Sub(t0))
	}
	s.stop(t)
}

// testLockParentKilled: when `baton lock` is killed with SIGKILL the
// sidecar releases its lease at once (its caller exited), and CMD is
// killed with it (parent-death signal), so CMD never runs unlocked.
func testLockParentKilled(t *testing.T, e *env, s *sidecarProc) {
	p := start(t, "lock-k9", nil, e.bin, "--socket", s.socket, "lock", "pk-1", "--", "sh", "-c", `echo "pid $$"; exec sleep 30`)
	out := p.out.waitFor(t, 0, "\n", 30*time.Second)
	var pid int
	if _, err := fmt.Sscanf(out, "pid %d", &pid); err != nil {
		t.Fatalf("CMD printed %q", out)
	}
	if holderOf(t, s.socket, "pk-1") == nil {
		t.Fatal("pk-1 not held while CMD runs")
	}
	p.kill9(t)
	waitCond(t, 10*time.Second, "CMD killed with baton lock", func() bool { return !alive(pid) })
	waitCond(t, 10*time.Second, "pk-1 released", func() bool { return holderOf(t, s.socket, "pk-1") == nil })
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// testLockLeftovers: what CMD leaves running in its process group is killed
// before the lock is released.
func testLockLeftovers(t *testing.T, e *env, s *sidecarProc) {
	code, stdout, stderr := lockIn(t, s.socket, "left-1", "--", "sh", "-c", `sleep 30 >/dev/null 2>&1 & echo "bg $!"`)
	var pid int
	if _, err := fmt.Sscanf(stdout, "bg %d", &pid); err != nil || code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "killed what the command left running") {
		t.Errorf("stderr %q, want the leftover named", stderr)
	}
	waitCond(t, 10*time.Second, "the leftover killed", func() bool { return !alive(pid) })
}
