package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/props"
)

// TestLogKeysOnce: an attribute key given again (a library's logger adds
// "component" to one that has it) is written once, with its last value,
// in text and in JSON; groups keep their attributes.
func TestLogKeysOnce(t *testing.T) {
	var buf bytes.Buffer
	ls := newLogSetup(&buf, slog.LevelDebug, "text")
	log := ls.logger.With("component", "lock", "a", 1)
	log.Debug("dup", "component", "go-zookeeper", "b", 2)
	log.WithGroup("g").Info("grouped", "component", "x")
	ls.setFormat("json")
	log.With("component", "sidecar").Info("json")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
	if !strings.HasSuffix(lines[0], `msg=dup a=1 component=go-zookeeper b=2`) {
		t.Errorf("text line = %q", lines[0])
	}
	if !strings.HasSuffix(lines[1], `msg=grouped component=lock a=1 g.component=x`) {
		t.Errorf("grouped line = %q", lines[1])
	}
	if strings.Count(lines[2], `"component"`) != 1 || !strings.Contains(lines[2], `"component":"sidecar"`) {
		t.Errorf("json line = %q", lines[2])
	}
}

// TestServeWithoutZooKeeper: `baton serve` whose ZooKeeper refuses
// connections warns at the default level, once within a few retries,
// naming the server and the error, with each attribute key once (also at
// debug level, where go-zookeeper's own lines are logged); `baton status`
// names the servers and the last error, and no session.
func TestServeWithoutZooKeeper(t *testing.T) {
	for _, level := range []string{"info", "debug"} {
		t.Run(level, func(t *testing.T) {
			dir := cleanEnv(t)
			sock := filepath.Join(dir, "s.sock")
			opts := props.LoadOptions{NoFile: true, Set: []string{
				"zookeeper.servers=127.0.0.1:1/chroot", "sidecar.socket.path=" + sock, "log.level=" + level,
				"queue.dir=" + filepath.Join(dir, "q"),
			}}
			ready := make(chan struct{})
			logs, stop := serveInProcess(t, opts, func(string) { close(ready) })
			defer stop()
			c := client.New(sock)
			defer c.Close()
			var h *api.Health
			deadline := time.Now().Add(10 * time.Second)
			for h == nil || h.ZooKeeper.LastError == "" {
				if time.Now().After(deadline) {
					t.Fatalf("no last error in /healthz: %+v\nlogs:\n%s", h, logs.String())
				}
				time.Sleep(50 * time.Millisecond)
				h, _ = c.Health(context.Background())
			}
			time.Sleep(2500 * time.Millisecond) // go-zookeeper retries about every second
			out := logs.String()
			warn := regexp.MustCompile(`(?m)^.*level=WARN msg="cannot connect to zookeeper; retrying".*$`).FindAllString(out, -1)
			if len(warn) != 1 {
				t.Errorf("%d WARN lines about the unreachable ZooKeeper in ~3 s, want 1 (rate-limited):\n%s", len(warn), out)
			} else if !strings.Contains(warn[0], "server=127.0.0.1:1") || !strings.Contains(warn[0], "connection refused") {
				t.Errorf("WARN line does not name the server and the error: %q", warn[0])
			}
			keyRE := regexp.MustCompile(` ([a-z_.]+)=`)
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				seen := map[string]bool{}
				for _, m := range keyRE.FindAllStringSubmatch(line, -1) {
					if seen[m[1]] {
						t.Errorf("key %q twice in %q", m[1], line)
					}
					seen[m[1]] = true
				}
			}
			if level == "debug" && !strings.Contains(out, "component=go-zookeeper") {
				t.Errorf("no go-zookeeper debug line at log.level=debug:\n%s", out)
			}
			code, stdout, _ := runBaton(t, "--socket", sock, "status")
			for _, re := range []string{
				`(?m)^zookeeper\s+disconnected for [0-9.]+m?s \(servers 127\.0\.0\.1:1/chroot\)$`,
				`(?m)^session\s+none yet$`,
				`(?m)^last error\s+dial tcp 127\.0\.0\.1:1: connect: connection refused$`,
				`(?m)^ready\s+no: zookeeper .*\(servers 127\.0\.0\.1:1/chroot\); last error: dial tcp 127\.0\.0\.1:1: connect: connection refused$`,
				`(?m)^last reload\s+none since the sidecar started$`,
			} {
				if !regexp.MustCompile(re).MatchString(stdout) {
					t.Errorf("status has no match for %s:\n%s", re, stdout)
				}
			}
			if code != exitUnavailable {
				t.Errorf("status exit %d, want 69", code)
			}
			select {
			case <-ready:
				t.Errorf("onReady called without ZooKeeper")
			default:
			}
		})
	}
}
