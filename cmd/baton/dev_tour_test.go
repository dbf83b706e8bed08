package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevTour builds baton with the dev tag, as `make run` does (and with
// -race, which reuses the packages `go test -race` compiled), starts
// `baton dev` as a process and pastes what it prints into sh, as a new user
// would: the exports, then every command of the tour, in order. Each
// command must succeed and show what its step promises (a delivery done, a
// retry, a dead letter, a replay): the tour works on a fresh checkout.
func TestDevTour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds baton -tags dev and runs ZooKeeper")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the tour uses curl, which is not installed")
	}
	dir, err := os.MkdirTemp("", "bd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "baton")
	t0 := time.Now()
	if b, err := exec.Command("go", "build", "-race", "-tags", "dev", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -race -tags dev: %v\n%s", err, b)
	}
	t.Logf("built baton -race -tags dev in %v", time.Since(t0).Round(time.Millisecond))

	out := newLogBuf()
	cmd := exec.Command(bin, "dev")
	cmd.Env = cleanProcEnv()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("baton dev output:\n%s", out.String())
		}
	})
	printed := out.waitFor(t, 0, "dev: Ctrl-C stops", 90*time.Second)

	// What a user pastes: the export lines, then the tour's commands.
	var exports, cmds []string
	inTour := false
	for line := range strings.Lines(printed) {
		line = strings.TrimRight(line, "\n")
		rest, ok := strings.CutPrefix(line, pasteIndent) // a whole line, as a user selects it
		switch {
		case line == "dev: then try:":
			inTour = true
		case !ok:
		case strings.HasPrefix(rest, "export "):
			exports = append(exports, rest)
		case inTour && !strings.HasPrefix(rest, "#"):
			cmds = append(cmds, rest)
		}
	}
	if len(exports) != 2 {
		t.Fatalf("want 2 export lines, got %q", exports)
	}
	app := regexp.MustCompile(`demo app: (http://127\.0\.0\.1:\d+)/answer`).FindStringSubmatch(printed)
	if app == nil {
		t.Fatalf("no demo app address in the output")
	}
	steps := devTour(app[1])
	var want []devStep
	for _, s := range steps {
		if s.Cmd != "" {
			want = append(want, s)
		}
	}
	if len(cmds) != len(want) {
		t.Fatalf("printed %d commands, the tour has %d:\n%s", len(cmds), len(want), strings.Join(cmds, "\n"))
	}

	var lease string
	for i, s := range want {
		if cmds[i] != s.Cmd {
			t.Fatalf("command %d printed as\n  %s\nnot\n  %s", i+1, cmds[i], s.Cmd)
		}
		line := strings.ReplaceAll(s.Cmd, devLeasePlaceholder, lease)
		// Read-only commands are repeated until the step shows what it
		// promises (a delivery or a dead letter takes a moment).
		readOnly := strings.HasPrefix(line, "baton ops get") || strings.HasPrefix(line, "baton dlq ls")
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := shell(exports, line)
			ok := err == nil && strings.Contains(got, s.Want)
			if ok {
				t.Logf("$ %s\n%s", line, got)
				if lease == "" {
					if m := regexp.MustCompile(`"lease_id":"([^"]+)"`).FindStringSubmatch(got); m != nil {
						lease = m[1]
					}
				}
				break
			}
			if !readOnly || time.Now().After(deadline) {
				t.Fatalf("$ %s\n%s\nerror %v; want output containing %q", line, got, err, s.Want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Every op of the tour reached the app: tour-1 and tour-3 once each
	// accepted, tour-2 after two 503s.
	log := out.String()
	for _, l := range []string{
		"object=article-1 token=",
		"op=tour-2 object=article-2 token=",
		"attempt=1 seq=1 payload={\"title\":\"flaky\"} -> 503",
		"attempt=3 seq=1 payload={\"title\":\"flaky\"} -> 200",
		"op=tour-3 object=article-3",
		"-> 400 (rule object:article-3)",
	} {
		if !strings.Contains(log, l) {
			t.Errorf("the dev output has no %q", l)
		}
	}

	// The README's blocks marked "runs as pasted", each pasted whole into
	// bash after the exports (issue 20: the quick start used $SOCK, which
	// nothing sets).
	blocks := readmeBlocks(t, "../../README.md")
	if len(blocks) < 5 {
		t.Fatalf("found %d README blocks marked %q, want the quick start's and the recipes'", len(blocks), pasteMarker)
	}
	for i, b := range blocks {
		got, err := bash(exports, dir, b)
		if err != nil {
			t.Fatalf("README block %d failed (%v):\n%s\noutput:\n%s", i+1, err, b, got)
		}
		// curl -s exits 0 on an HTTP error: every API error in the output
		// must be one the block says it shows ("# 404 …").
		if n, want := strings.Count(got, `"error":`), strings.Count(b, "# 404"); n != want {
			t.Fatalf("README block %d: %d API errors in its output, the block announces %d:\n%s\noutput:\n%s", i+1, n, want, b, got)
		}
		t.Logf("README block %d:\n%s\n%s", i+1, b, got)
	}

	// The README's metrics table and /metrics agree (issue 20: the README
	// said metrics were "not yet there" that /metrics had). After the tour
	// and the README's blocks every family has been touched.
	scrape, err := shell(exports, `curl -s --unix-socket "$BATON_SIDECAR_SOCKET_PATH" http://baton/metrics`)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	served := map[string]bool{}
	for line := range strings.Lines(scrape) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "baton_") {
			served[f[2]] = true
		}
	}
	documented := readmeMetrics(t, "../../README.md")
	for name := range documented {
		if !served[name] {
			t.Errorf("README's Metrics table names %s; /metrics of baton dev has no such family", name)
		}
	}
	for name := range served {
		if !documented[name] {
			t.Errorf("/metrics serves %s; the README's Metrics table does not name it", name)
		}
	}

	// Ctrl-C stops everything, exit status 0.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("baton dev after SIGINT: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("baton dev did not exit within 30s of SIGINT")
	}
}

// shell runs line in sh after the exports, as pasted into a shell.
func shell(exports []string, line string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := strings.Join(exports, "\n") + "\n" + line + "\n"
	c := exec.CommandContext(ctx, "sh", "-c", script)
	c.Env = cleanProcEnv()
	b, err := c.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("%v", err)
	}
	return string(b), nil
}

// pasteMarker precedes a README code block that runs as pasted after
// make run's exports.
const pasteMarker = "<!-- runs as pasted -->"

// readmeBlocks returns the body of every ```sh block right after a
// pasteMarker line.
func readmeBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != pasteMarker {
			continue
		}
		if lines[i+1] != "```sh" {
			t.Fatalf("README line %d: %q is not followed by a ```sh block", i+1, pasteMarker)
		}
		var body []string
		for j := i + 2; j < len(lines) && lines[j] != "```"; j++ {
			body = append(body, lines[j])
		}
		blocks = append(blocks, strings.Join(body, "\n"))
	}
	return blocks
}

// bash runs a pasted block in bash -e (a failing command fails the block),
// after the exports, in dir.
func bash(exports []string, dir, block string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	script := "set -e\n" + strings.Join(exports, "\n") + "\n" + block + "\n"
	c := exec.CommandContext(ctx, "bash", "-c", script)
	c.Env = cleanProcEnv()
	c.Dir = dir
	b, err := c.CombinedOutput()
	return string(b), err
}

// readmeMetrics returns the metric names in the first column of the README's
// Metrics table.
func readmeMetrics(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Metrics\n")
	if !ok {
		t.Fatal("README has no Metrics section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	names := map[string]bool{}
	name := regexp.MustCompile("`(baton_[a-z_]+)`")
	for line := range strings.Lines(sec) {
		if !strings.HasPrefix(line, "| `baton_") {
			continue
		}
		first, _, _ := strings.Cut(line[1:], "|")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			names[m[1]] = true
		}
	}
	if len(names) < 20 {
		t.Fatalf("found %d metrics in the README's Metrics table", len(names))
	}
	return names
}
