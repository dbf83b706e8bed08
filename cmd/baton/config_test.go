package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batonhq/baton/props"
)

func TestConfigCheckSources(t *testing.T) {
	dir := cleanEnv(t)
	writeFile(t, filepath.Join(dir, "baton.properties"), // found in the working directory
		"# test",
		"zookeeper.servers = zk1:2181,zk2:2181/baton", // 2
		"log.level = debug",                           // 3, overridden by env
		"queue.workers = 2",                           // 4, overridden by --set
	)
	t.Setenv("BATON_LOG_LEVEL", "warn")
	code, stdout, stderr := runBaton(t, "config", "check", "--set", "queue.workers=8", "--set", "kafka.brokers=k1:9092,k2:9092")
	if code != 0 || stderr != "" {
		t.Fatalf("config check = exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(props.Keys()) {
		t.Errorf("%d lines, want one per key (%d):\n%s", len(lines), len(props.Keys()), stdout)
	}
	if !slices.IsSorted(lines) {
		t.Errorf("lines not sorted:\n%s", stdout)
	}
	for _, k := range props.Keys() {
		if !strings.Contains(stdout, "\n"+k.Key+"=") && !strings.HasPrefix(stdout, k.Key+"=") {
			t.Errorf("no line for %s", k.Key)
		}
	}
	for _, want := range []string{
		"zookeeper.servers=zk1:2181,zk2:2181/baton  # baton.properties:2",
		"log.level=warn  # env BATON_LOG_LEVEL",
		"queue.workers=8  # --set",
		"kafka.brokers=k1:9092,k2:9092  # --set",
		"zookeeper.session.timeout=5000  # default",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("missing line %q in:\n%s", want, stdout)
		}
	}
}

func TestConfigCheckExplicitFile(t *testing.T) {
	cleanEnv(t)
	path := writeFile(t, filepath.Join(t.TempDir(), "custom.properties"), "queue.dir = /srv/q")
	code, stdout, _ := runBaton(t, "--config", path, "config", "check")
	if want := fmt.Sprintf("queue.dir=/srv/q  # %s:1\n", path); code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("exit %d, stdout %q, want %q", code, stdout, want)
	}
	code, _, stderr := runBaton(t, "config", "check", "--config", filepath.Join(t.TempDir(), "missing.properties"))
	if code != exitFailure || !strings.Contains(stderr, "missing.properties") {
		t.Errorf("missing --config: exit %d, stderr %q", code, stderr)
	}
}

func TestConfigCheckBadFile(t *testing.T) {
	dir := cleanEnv(t)
	writeFile(t, filepath.Join(dir, "baton.properties"),
		"log.level = info",
		"zookeeper.session.timeout = 5s",         // 2
		"zookeeper.background.lock.prefix = A-B", // 3
		"zookeeper.sesion.timeout = 1",           // 4: only a warning
	)
	code, stdout, stderr := runBaton(t, "config", "check")
	if code != exitFailure {
		t.Errorf("exit %d, want 1", code)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing", stdout)
	}
	for _, want := range []string{
		`baton.properties:2: zookeeper.session.timeout: "5s" is not a whole number of milliseconds from 1000 to 600000` + "\n",
		`baton.properties:3: zookeeper.background.lock.prefix: "A-B" is not a node-name prefix of letters and digits ([A-Za-z0-9]+)` + "\n",
		"baton: invalid configuration: 2 errors\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
	}
	code, _, stderr = runBaton(t, "config", "check", "--set", "zookeeper.session.timeout=6000", "--set", "zookeeper.background.lock.prefix=B")
	if code != 0 {
		t.Errorf("with --set fixes: exit %d, stderr %q", code, stderr)
	}
}

func TestConfigCheckSyntaxError(t *testing.T) {
	dir := cleanEnv(t)
	writeFile(t, filepath.Join(dir, "baton.properties"), "a = 1", `b = \u00G0`)
	code, _, stderr := runBaton(t, "config", "check")
	if want := `baton.properties:2: \u is not followed by 4 hex digits`; code != exitFailure || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q, want 1 and %q", code, stderr, want)
	}
}

func TestConfigCheckWarnings(t *testing.T) {
	dir := cleanEnv(t)
	writeFile(t, filepath.Join(dir, "baton.properties"), "log.level = info", "", "zookeeper.sesion.timeout = 1000")
	t.Setenv("BATON_LOG_LEVLE", "debug")
	code, stdout, stderr := runBaton(t, "config", "check")
	if code != 0 {
		t.Errorf("exit %d, want 0 with warnings only (stderr %q)", code, stderr)
	}
	for _, want := range []string{
		`warning: baton.properties:3: unknown key "zookeeper.sesion.timeout" (did you mean "zookeeper.session.timeout"?)` + "\n",
		`warning: env BATON_LOG_LEVLE: unknown variable "BATON_LOG_LEVLE" (did you mean "BATON_LOG_LEVEL"?)` + "\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
	}
	if !strings.Contains(stdout, "zookeeper.session.timeout=5000  # default\n") {
		t.Errorf("stdout %q, want the default session timeout", stdout)
	}
}

func TestConfigCheckRedactsDigest(t *testing.T) {
	dir := cleanEnv(t)
	const secret = "pa55-w0rd"
	writeFile(t, filepath.Join(dir, "baton.properties"), "zookeeper.auth.digest = alice:"+secret)
	code, stdout, stderr := runBaton(t, "config", "check")
	if code != 0 || !strings.Contains(stdout, "zookeeper.auth.digest=<redacted>  # baton.properties:1\n") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
	if strings.Contains(stdout+stderr, secret) {
		t.Errorf("secret printed: %q %q", stdout, stderr)
	}
	// An invalid digest is reported without echoing it.
	code, stdout, stderr = runBaton(t, "config", "check", "--set", "zookeeper.auth.digest="+secret)
	if code != exitFailure || strings.Contains(stdout+stderr, secret) || !strings.Contains(stderr, "--set zookeeper.auth.digest: <redacted> is not user:password") {
		t.Errorf("bad digest: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
