package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// TestServeWarnsInsecureSettings: `baton serve` logs a WARN at start for an
// empty zookeeper.auth.digest (world ACL) and for SASL PLAIN without TLS,
// each naming the key, what it means and what to set; none once they are
// set safely (the digest from zookeeper.auth.digest.file, never printed).
// The native protocol with container object nodes warns that native
// creates persistent ones.
func TestServeWarnsInsecureSettings(t *testing.T) {
	dir := cleanEnv(t)
	pw := writeFile(t, filepath.Join(dir, "pw"), "kafka-pw")
	digest := filepath.Join(dir, "digest")
	if err := os.WriteFile(digest, []byte("baton:zk-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := []string{"kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=u", "kafka.sasl.password.file=" + pw}
	for _, tc := range []struct {
		name string
		set  []string
		want []string // regexps, one WARN line each
	}{
		{"insecure", plain, []string{
			`level=WARN msg="insecure setting" key=zookeeper.auth.digest warning="zookeeper.auth.digest is empty: every node Baton creates gets the world ACL.*set zookeeper.auth.digest.file .*to user:password"`,
			`level=WARN msg="insecure setting" key=kafka.sasl.mechanism warning="kafka.sasl.mechanism is PLAIN while kafka.tls.enabled is false: the Kafka password crosses the network in clear text; set kafka.tls.enabled=true`,
		}},
		{"secure", append([]string{"zookeeper.auth.digest.file=" + digest, "kafka.tls.enabled=true"}, plain...), nil},
		{"native with container object nodes", []string{"zookeeper.auth.digest.file=" + digest, "zookeeper.lock.protocol=native"}, []string{
			`level=WARN msg="insecure setting" key=zookeeper.object.node warning="zookeeper.lock.protocol is native while zookeeper.object.node is container: .*always creates persistent object nodes.*set zookeeper.object.node=persistent`,
		}},
		{"native with persistent object nodes", []string{"zookeeper.auth.digest.file=" + digest, "zookeeper.lock.protocol=native", "zookeeper.object.node=persistent"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			opts := props.LoadOptions{NoFile: true, Set: append([]string{
				"zookeeper.servers=127.0.0.1:1", "sidecar.socket.path=" + filepath.Join(sub, "s.sock"),
				"queue.dir=" + filepath.Join(sub, "q"),
			}, tc.set...)}
			out := serveStartLogs(t, opts)
			if got := strings.Count(out, `msg="insecure setting"`); got != len(tc.want) {
				t.Errorf("%d insecure-setting WARN lines, want %d:\n%s", got, len(tc.want), out)
			}
			for _, re := range tc.want {
				if !regexp.MustCompile(`(?m)^.*` + re).MatchString(out) {
					t.Errorf("no line matching %s:\n%s", re, out)
				}
			}
			if strings.Contains(out, "zk-s3cret") || strings.Contains(out, "kafka-pw") {
				t.Errorf("a secret is in the logs:\n%s", out)
			}
		})
	}
}

// serveInProcess runs serveLoaded with opts in the background, its log in
// logs; stop ends it and checks that it returned no error.
func serveInProcess(t *testing.T, opts props.LoadOptions, onReady func(socket string)) (logs *testenv.Buffer, stop func()) {
	t.Helper()
	loaded, err := props.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	logs = &testenv.Buffer{}
	g := &globals{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: logs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveLoaded(ctx, g, loaded, opts, onReady) }()
	return logs, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
}

// serveStartLogs is the log of serveInProcess with opts up to its start
// line (it is stopped then).
func serveStartLogs(t *testing.T, opts props.LoadOptions) string {
	t.Helper()
	logs, stop := serveInProcess(t, opts, nil)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), `msg="baton serve starting"`) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	out := logs.String()
	if !strings.Contains(out, `msg="baton serve starting"`) {
		t.Fatalf("serve did not start:\n%s", out)
	}
	return out
}
