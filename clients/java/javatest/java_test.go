package javatest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/testenv"
)

const (
	lockRoot   = "/javatest"
	sidecarID  = "javatest"
	fgTimeout  = 600 * time.Millisecond // zookeeper.foreground.task.timeout
	bgTimeout  = 900 * time.Millisecond // zookeeper.background.task.timeout
	javaWithin = 3 * time.Minute        // bound of one Java run
	jarDir     = "/usr/share/java"      // Debian's ZooKeeper jars (the plugin app's own dependency)
)

// env is what the subtests share: one ZooKeeper, one `baton serve`, the
// compiled Java classes.
type env struct {
	dir     string // short temp dir: socket paths must stay < 108 bytes
	socket  string
	classes string
	zk      *testenv.ZooKeeper
	app     *opstest.App
	sidecar *exec.Cmd
	out     *testenv.Buffer
}

func TestJava(t *testing.T) {
	if _, err := exec.LookPath("javac"); err != nil {
		t.Fatalf("javac not found (%v): `make deps` installs openjdk-17-jdk-headless", err)
	}
	e := setup(t)
	t.Run("unit", e.testUnit)
	t.Run("exclusion-and-tokens-java-go", e.testExclusion)
	t.Run("scenario3-foreground-before-background", e.testScenario3)
	t.Run("timeout-instance-lock-exception", e.testTimeout)
	t.Run("lost-lock-told", e.testLost)
	t.Run("background-op", e.testOps)
	t.Run("process-exit-releases", e.testProcessExit)
	t.Run("plugin-app-imports-changed", e.testPluginApp)
	t.Run("watch-holder-changes", e.testWatch)
	t.Run("shared-on-plugin-refused", e.testSharedOnPlugin)
	t.Run("stalled-sidecar-holder-told-first", e.testStall) // last: it stops the sidecar for a while
}

func setup(t *testing.T) *env {
	dir, err := os.MkdirTemp("", "bj")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{dir: dir, socket: filepath.Join(dir, "s.sock"), classes: filepath.Join(dir, "classes"), out: &testenv.Buffer{}}

	var wg sync.WaitGroup
	var buildErr, javacErr error
	bin := filepath.Join(dir, "baton")
	wg.Go(func() {
		b, err := exec.Command("go", "build", "-o", bin, "github.com/batonhq/baton/cmd/baton").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, b)
		}
	})
	wg.Go(func() { javacErr = javac(e.classes, "", sources(t, "../src")...) })
	e.zk = testenv.ZooKeeperT(t, testenv.ZKOptions{})
	kafka := testenv.KafkaT(t, testenv.KafkaOptions{})
	e.app = opstest.StartT(t, opstest.Options{})
	wg.Wait()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if javacErr != nil {
		t.Fatal(javacErr)
	}

	props := map[string]string{
		"zookeeper.servers":                 e.zk.ConnString(),
		"zookeeper.lock.root":               lockRoot,
		"zookeeper.session.timeout":         "4000",
		"zookeeper.foreground.task.timeout": strconv.FormatInt(fgTimeout.Milliseconds(), 10),
		"zookeeper.background.task.timeout": strconv.FormatInt(bgTimeout.Milliseconds(), 10),
		"sidecar.socket.path":               e.socket,
		"sidecar.node.id":                   sidecarID,
		"sidecar.shutdown.grace":            "2000",
		"sidecar.app.url":                   e.app.URL(),
		"queue.dir":                         filepath.Join(dir, "queue"),
		"kafka.brokers":                     kafka.Addr(),
	}
	var pf strings.Builder
	for k, v := range props {
		fmt.Fprintf(&pf, "%s=%s\n", k, v)
	}
	cfg := filepath.Join(dir, "baton.properties")
	if err := os.WriteFile(cfg, []byte(pf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Stdout, cmd.Stderr = e.out, e.out
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.sidecar = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("baton serve: %v after SIGTERM\n%s", err, e.out.String())
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("baton serve did not exit within 60s of SIGTERM\n%s", e.out.String())
		}
	})
	c := e.client(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ready(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("baton serve exited before it was ready: %v\n%s", err, e.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("baton serve not ready after 60s: %v\n%s", err, e.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// cleanEnv is our environment without BATON_ variables (they would
// override the test's properties and sockets).
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			out = append(out, kv)
		}
	}
	return out
}

func sources(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".java") {
			out = append(out, p)
		}
		return err
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("java sources under %s: %d, %v", root, len(out), err)
	}
	return out
}

// javac compiles srcs into out with classpath cp, warnings as errors.
func javac(out, cp string, srcs ...string) error {
	args := []string{"-Xlint:all,-path", "-Werror", "-encoding", "UTF-8", "--release", "17", "-d", out}
	if cp != "" {
		args = append(args, "-cp", cp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), javaWithin)
	defer cancel()
	b, err := exec.CommandContext(ctx, "javac", append(args, srcs...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("javac: %v\n%s", err, b)
	}
	return nil
}

func (e *env) client(t *testing.T) *client.Client {
	c := client.New(e.socket)
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) javaCmd(ctx context.Context, cp string, args ...string) *exec.Cmd {
	full := append([]string{"-Dbaton.socket=" + e.socket, "-cp", cp}, args...)
	cmd := exec.CommandContext(ctx, "java", full...)
	cmd.Env = cleanEnv()
	return cmd
}

// runJava runs one Java main to its end and returns its output; a non-zero
// exit fails the test.
func (e *env) runJava(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), javaWithin)
	defer cancel()
	b, err := e.javaCmd(ctx, e.classes, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("java %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b)
}

// javaProc is a Java process the test talks to line by line.
type javaProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	all   *testenv.Buffer
	done  chan struct{} // closed when the process has exited; err is then set
	err   error
}

func (e *env) startJava(t *testing.T, args ...string) *javaProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), javaWithin)
	cmd := e.javaCmd(ctx, e.classes, args...)
	p := &javaProc{cmd: cmd, lines: make(chan string, 100), all: &testenv.Buffer{}, done: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.all
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(p.all, sc.Text())
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// wait waits for the process to exit and returns its exit error.
func (p *javaProc) wait() error {
	<-p.done
	return p.err
}

// line returns the next output line starting with prefix (skipping others).
func (p *javaProc) line(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("java exited before printing %q; output:\n%s", prefix, p.all.String())
			}
			if strings.HasPrefix(l, "FAIL") {
				t.Fatalf("java: %s\n%s", l, p.all.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timer.C:
			t.Fatalf("no %q from java within %v; output:\n%s", prefix, within, p.all.String())
		}
	}
}

// fields parses "KEY a=1 b=x" into a map.
func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line)[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// testUnit runs the Java unit tests (JSON, HTTP exchange, validity,
// renewal, loss, the plugin drop-in against a scripted socket server).
func (e *env) testUnit(t *testing.T) {
	out := e.runJava(t, "com.batonhq.baton.UnitTests")
	if !regexp.MustCompile(`unit tests: [1-9][0-9]* passed, 0 failed`).MatchString(out) {
		t.Fatalf("java unit tests:\n%s", out)
	}
	t.Log(strings.TrimSpace(out[strings.LastIndex(out, "unit tests:"):]))
}

// testExclusion: a Java process (BatonClient and ZkBlockingWriteLock in
// turn) and a Go holder (the Go client) take one object in a loop at the
// same time. Inside the lock each creates a marker file exclusively (an
// existing one is an overlap) and appends its fencing token to a log: the
// log, in grant order, must hold strictly increasing tokens from both.
func (e *env) testExclusion(t *testing.T) {
	const object, javaRounds, minGoRounds = "mixed-holders", 60, 20
	dir := t.TempDir()
	inside, logPath := filepath.Join(dir, "inside"), filepath.Join(dir, "tokens.log")
	c := e.client(t)
	p := e.startJava(t, "com.batonhq.baton.it.IntegrationTest", "exclusion", object, strconv.Itoa(javaRounds), dir)

	javaDone := make(chan struct{})
	go func() {
		for range p.lines {
		}
		close(javaDone)
	}()
	goRounds := 0
	for {
		select {
		case <-javaDone:
		default:
			goto round
		}
		if goRounds >= minGoRounds {
			break
		}
	round:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		l, err := c.Acquire(ctx, object, client.WithInfo("go"), client.WithWait(time.Minute))
		cancel()
		if err != nil {
			t.Fatalf("go acquire: %v\njava output:\n%s", err, p.all.String())
		}
		f, err := os.OpenFile(inside, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatalf("overlap: go granted token %d while another holder was inside (%v)", l.Token(), err)
		}
		f.Close()
		lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(lf, "%d go\n", l.Token())
		lf.Close()
		time.Sleep(time.Millisecond)
		if err := os.Remove(inside); err != nil {
			t.Fatal(err)
		}
		if l.ValidFor() <= 0 {
			t.Fatalf("go lease not valid at the end of the critical section")
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("go release: %v", err)
		}
		goRounds++
	}
	if err := p.wait(); err != nil {
		t.Fatalf("java: %v\n%s", err, p.all.String())
	}
	if !strings.Contains(p.all.String(), fmt.Sprintf("DONE %d", javaRounds)) {
		t.Fatalf("java did not finish its rounds:\n%s", p.all.String())
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	var count = map[string]int{}
	handoffs, prev := 0, ""
	for i, ln := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		tok, who, _ := strings.Cut(ln, " ")
		n := atoi(t, tok)
		if n <= last {
			t.Fatalf("line %d: token %d (%s) not above the previous grant's %d", i+1, n, who, last)
		}
		last = n
		count[who]++
		if prev != "" && who != prev {
			handoffs++
		}
		prev = who
	}
	if count["java"] != javaRounds || count["go"] != goRounds {
		t.Fatalf("grants logged: %v, want java %d, go %d", count, javaRounds, goRounds)
	}
	if handoffs == 0 {
		t.Fatalf("the Java and Go holders never contended (no handoff between them): the test proved nothing")
	}
	t.Logf("%d java + %d go grants, %d handoffs between them, tokens strictly increasing, no overlap",
		count["java"], count["go"], handoffs)
}

// testScenario3: from Java, a background request queued before a
// foreground one is granted after it (seed scenario 3).
func (e *env) testScenario3(t *testing.T) {
	out := e.runJava(t, "com.batonhq.baton.it.IntegrationTest", "scenario3", "scenario-3")
	for _, want := range []string{"QUEUE foreground,background", "ORDER foreground,background", "TOKENS "} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
}

// testTimeout: a Go holder keeps an object; the plugin's lockWithTimeout()
// from Java waits the type's timeout from the sidecar's properties and
// throws InstanceLockException naming the holder and position 1, leaving no
// waiter behind.
// testSharedOnPlugin: AcquireOptions.shared(true) through the plugin-protocol
// sidecar is a BatonException 409 SharedNeedsNative naming
// zookeeper.lock.protocol=native; an exclusive lease says its mode.
func (e *env) testSharedOnPlugin(t *testing.T) {
	out := e.runJava(t, "com.batonhq.baton.it.IntegrationTest", "shared-on-plugin", "java-shared")
	for _, want := range []string{"REFUSED status=409 kind=SharedNeedsNative native=true\n", "HELD mode=exclusive\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("shared-on-plugin: no %q in\n%s", want, out)
		}
	}
}

func (e *env) testTimeout(t *testing.T) {
	const object = "held-by-go"
	c := e.client(t)
	l, err := c.Acquire(context.Background(), object, client.WithInfo("go holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	for _, tc := range []struct {
		typ  string
		want time.Duration
		name string
	}{{"FOREGROUND_LOCK", fgTimeout, "foreground"}, {"BACKGROUND_LOCK", bgTimeout, "background"}} {
		out := e.runJava(t, "com.batonhq.baton.it.IntegrationTest", "timeout", object, tc.typ)
		i := strings.Index(out, "ILE ")
		if i < 0 {
			t.Fatalf("%s: no InstanceLockException:\n%s", tc.typ, out)
		}
		f := fields(strings.SplitN(out[i:], "\n", 2)[0])
		if waited := time.Duration(atoi(t, f["waited_ms"])) * time.Millisecond; waited < tc.want-time.Millisecond {
			t.Errorf("%s: waited %v, want the sidecar's %s timeout %v", tc.typ, waited, tc.name, tc.want)
		}
		if elapsed := time.Duration(atoi(t, f["elapsed_ms"])) * time.Millisecond; elapsed < tc.want {
			t.Errorf("%s: lockWithTimeout returned after %v, before the %v timeout", tc.typ, elapsed, tc.want)
		}
		if f["position"] != "1" || f["type"] != tc.name || f["holder_sidecar"] != sidecarID ||
			f["holder_info"] != "go_holder" || f["holder_token"] != strconv.FormatInt(l.Token(), 10) {
			t.Errorf("%s: InstanceLockException %v, want position 1, type %s, holder sidecar %s info go_holder token %d",
				tc.typ, f, tc.name, sidecarID, l.Token())
		}
	}
	st, err := c.Inspect(context.Background(), object)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Waiters) != 0 || st.Holder == nil || st.Holder.Token != l.Token() {
		t.Fatalf("after the timeouts: holder %+v, waiters %+v; want the Go holder alone", st.Holder, st.Waiters)
	}
}

// testLost: the privateLock nodes under a Java BatonClient lease and a
// ZkBlockingWriteLock are deleted behind their back; both Java holders are
// told (lost-listener, via the long-poll), close() throws
// LockLostException, unlock() a RuntimeException caused by NoNodeException.
func (e *env) testLost(t *testing.T) {
	objects := []string{"lost-client", "lost-plugin"}
	p := e.startJava(t, "com.batonhq.baton.it.IntegrationTest", "lost", objects[0], objects[1])
	tokens := map[string]int64{}
	for range objects {
		f := strings.Fields(p.line(t, "HELD ", time.Minute))
		tokens[f[1]] = atoi(t, f[2])
	}
	zc := testenv.Client(t, e.zk.Servers())
	for _, obj := range objects {
		esc, err := lock.EscapeObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := zc.Delete(lockRoot+"/"+esc+"/privateLock", -1); err != nil {
			t.Fatalf("delete privateLock of %s: %v", obj, err)
		}
	}
	for _, obj := range objects {
		l := p.line(t, "LOST "+obj, 30*time.Second)
		if !strings.Contains(l, "reason=lock_node_deleted") {
			t.Errorf("%s: %q, want reason lock node deleted", obj, l)
		}
	}
	p.line(t, "CLOSE LockLostException", 10*time.Second)
	p.line(t, "UNLOCK NoNodeException", 10*time.Second)
	if err := p.wait(); err != nil {
		t.Fatalf("java: %v\n%s", err, p.all.String())
	}
	// the objects are free again, and the next grant's token is higher
	c := e.client(t)
	for _, obj := range objects {
		l, err := c.Acquire(context.Background(), obj, client.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("%s after the loss: %v", obj, err)
		}
		if l.Token() <= tokens[obj] {
			t.Errorf("%s: token %d after the loss, not above the lost grant's %d", obj, l.Token(), tokens[obj])
		}
		_ = l.Release(context.Background())
	}
}

// testOps: Java submits a background op; the sidecar takes the background
// lock and delivers it to the app; a second submission of the same id is a
// duplicate.
func (e *env) testOps(t *testing.T) {
	const object, id = "java-op-object", "java-op-1"
	out := e.runJava(t, "com.batonhq.baton.it.IntegrationTest", "ops", object, id)
	for _, want := range []string{"SUBMITTED " + id + " ", "duplicate=false", "DONE " + id, "AGAIN ", "duplicate=true"} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
	ds := e.app.ByID(id)
	if len(ds) == 0 {
		t.Fatalf("the app got no delivery of %s", id)
	}
	var payload, want any
	if err := json.Unmarshal(ds[0].Payload, &payload); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(`{"from":"java","n":[1,2,3]}`), &want)
	if ds[0].Object != object || fmt.Sprint(payload) != fmt.Sprint(want) {
		t.Fatalf("delivery: object %q payload %s, want %q %v", ds[0].Object, ds[0].Payload, object, want)
	}
}

// testProcessExit: a Java holder with a 5-minute lease dies without
// releasing; the lease is bound to its process, so the lock is free at once.
func (e *env) testProcessExit(t *testing.T) {
	const object = "java-exits"
	p := e.startJava(t, "com.batonhq.baton.it.IntegrationTest", "hold-and-exit", object)
	p.line(t, "HELD ", time.Minute)
	fmt.Fprintln(p.stdin, "exit")
	<-p.done
	c := e.client(t)
	l, err := c.Acquire(context.Background(), object, client.WithWait(10*time.Second))
	var ile *client.InstanceLockError
	if errors.As(err, &ile) {
		t.Fatalf("the dead Java holder's lock was not released: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("granted to go after the Java holder died (waited %d ms; its lease had 5 minutes left)", l.Last().WaitedMS)
	_ = l.Release(context.Background())
}

// testPluginApp: testdata/app is web-app code written against the plugin:
// it compiles against the plugin's signatures (testdata/pluginapi) and
// Debian's ZooKeeper jars; with only its import lines changed (the plugin's
// and KeeperException's replaced by one `import com.batonhq.baton.*;`) it
// compiles against clients/java and runs against the sidecar.
func (e *env) testPluginApp(t *testing.T) {
	zkCP := filepath.Join(jarDir, "zookeeper.jar") + ":" + filepath.Join(jarDir, "zookeeper-jute.jar")
	const src = "testdata/app/com/example/content/ContentService.java"
	if err := javac(t.TempDir(), zkCP, append(sources(t, "testdata/pluginapi"), src)...); err != nil {
		t.Fatalf("the app does not compile against the plugin's API: %v", err)
	}
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	migrated, changed := migrateImports(string(orig))
	if changed == 0 {
		t.Fatal("no plugin import found to change")
	}
	for i, ol := range diffLines(string(orig), migrated) {
		if !strings.HasPrefix(ol, "import ") {
			t.Fatalf("changed line %d is not an import: %q", i, ol)
		}
	}
	dir := t.TempDir()
	msrc := filepath.Join(dir, "ContentService.java")
	if err := os.WriteFile(msrc, []byte(migrated), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "classes")
	if err := javac(out, e.classes+":"+zkCP, msrc); err != nil {
		t.Fatalf("the app with its imports changed does not compile against clients/java: %v", err)
	}
	got := e.runJavaCP(t, out+":"+e.classes+":"+zkCP, "com.example.content.ContentService", "plugin-app-object")
	for _, want := range []string{"saved plugin-app-object under A-", "propagated plugin-app-object BACKGROUND_LOCK"} {
		if !strings.Contains(got, want) {
			t.Fatalf("want %q in:\n%s", want, got)
		}
	}
	t.Logf("%d import lines replaced by one; the app ran: %s", changed, strings.ReplaceAll(strings.TrimSpace(got), "\n", " | "))
}

func (e *env) runJavaCP(t *testing.T, cp string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), javaWithin)
	defer cancel()
	b, err := e.javaCmd(ctx, cp, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("java %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b)
}

// pluginImport matches the imports a migration replaces.
var pluginImport = regexp.MustCompile(`^import (com\.psp\.[\w.]+|org\.apache\.zookeeper\.KeeperException);$`)

// migrateImports replaces the plugin's imports (and KeeperException's) by
// one `import com.batonhq.baton.*;` and returns the source and how many
// lines it replaced.
func migrateImports(src string) (string, int) {
	var out []string
	n := 0
	for _, ln := range strings.Split(src, "\n") {
		if pluginImport.MatchString(ln) {
			if n == 0 {
				out = append(out, "import com.batonhq.baton.*;")
			}
			n++
			continue
		}
		out = append(out, ln)
	}
	return strings.Join(out, "\n"), n
}

// diffLines returns the lines of a and b not in the other (a small
// multiset difference: enough to show only imports changed).
func diffLines(a, b string) []string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		if n != 0 {
			out = append(out, l)
		}
	}
	return out
}

// testWatch: BatonClient.waitChange, chaining versions, sees the Go
// holders of an object in order, with their tokens: a grant, the handoff
// to a second holder, and the release.
func (e *env) testWatch(t *testing.T) {
	const object = "java-watched"
	c := e.client(t)
	ctx := context.Background()
	p := e.startJava(t, "com.batonhq.baton.it.IntegrationTest", "watch", object)
	p.line(t, "WATCH FREE version=", time.Minute)
	l1, err := c.Acquire(ctx, object, client.WithInfo("go-1"))
	if err != nil {
		t.Fatal(err)
	}
	want1 := fmt.Sprintf("WATCH HELD token=%d info=go-1", l1.Token())
	if got := p.line(t, "WATCH HELD ", time.Minute); got != want1 {
		t.Fatalf("java saw %q, want %q", got, want1)
	}
	got2 := make(chan *client.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, object, client.WithInfo("go-2"), client.WithWait(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got2 <- l
	}()
	testenv.WaitFor(t, time.Minute, "go-2 waiting", func() bool {
		st, err := c.Inspect(ctx, object)
		return err == nil && len(st.Waiters) == 1
	})
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got2
	if l2 == nil {
		t.FailNow()
	}
	want2 := fmt.Sprintf("WATCH HELD token=%d info=go-2", l2.Token())
	for {
		got := p.line(t, "WATCH HELD ", time.Minute)
		if got == want2 {
			break
		}
		if got != want1 { // go-1 again while go-2 waits: fine; anything else is not
			t.Fatalf("java saw %q, want %q or %q", got, want1, want2)
		}
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.line(t, "WATCH FREE", time.Minute)
	if err := p.wait(); err != nil {
		t.Errorf("java watch: %v\n%s", err, p.all.String())
	}
}

// testStall: while a Java holder holds a lock, the sidecar is stopped
// (SIGSTOP): no renewal or long-poll answers, and ZooKeeper expires the
// sidecar's session, deleting privateLock (after which another sidecar could
// be granted the object). The Java holder must be told, by its own count
// of the validity, before that deletion.
func (e *env) testStall(t *testing.T) {
	const object = "java-stalled"
	esc, err := lock.EscapeObject(object)
	if err != nil {
		t.Fatal(err)
	}
	zc := testenv.Client(t, e.zk.Servers())
	p := e.startJava(t, "com.batonhq.baton.it.IntegrationTest", "stall", object)
	held := p.line(t, "HELD ", time.Minute)
	path := lockRoot + "/" + esc + "/privateLock"
	if ok, _, err := zc.Exists(path); err != nil || !ok {
		t.Fatalf("%s: exists %v, %v", path, ok, err)
	}
	if err := e.sidecar.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	cont := func() { _ = e.sidecar.Process.Signal(syscall.SIGCONT) }
	defer cont()
	var gone time.Time
	for deadline := time.Now().Add(60 * time.Second); gone.IsZero(); time.Sleep(5 * time.Millisecond) {
		ok, _, err := zc.Exists(path)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			gone = time.Now()
		} else if time.Now().After(deadline) {
			t.Fatalf("%s still there 60s after the sidecar was stopped", path)
		}
	}
	cont()
	f := fields(p.line(t, "LOST ", time.Minute))
	told := time.UnixMilli(atoi(t, f["at_ms"]))
	t.Logf("%s; sidecar stopped, holder told after %v, privateLock gone after %v (reason %s)",
		held, told.Sub(stopped).Round(time.Millisecond), gone.Sub(stopped).Round(time.Millisecond), f["reason"])
	if !told.Before(gone) {
		t.Fatalf("the Java holder was told at %v, not before privateLock was gone at %v", told, gone)
	}
	if f["reason"] != "validity_ran_out" {
		t.Errorf("reason %q, want validity_ran_out (nothing could answer)", f["reason"])
	}
	testenv.WaitFor(t, time.Minute, "the sidecar ready again", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return client.New(e.socket).Ready(ctx) == nil
	})
}
