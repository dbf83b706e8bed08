package props

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeProps writes lines as dir/name and returns its path.
func writeProps(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fieldErrors returns the *FieldError leaves of a joined error.
func fieldErrors(err error) []*FieldError {
	var out []*FieldError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
	} else if fe, ok := err.(*FieldError); ok {
		out = append(out, fe)
	}
	return out
}

func TestEachKeyFromFile(t *testing.T) {
	// One non-default value per key, each on its own line, and its typed effect.
	cases := []struct {
		key, value string
		check      func(c Config) bool
	}{
		{"zookeeper.servers", "zk1:2181, zk2:2182/baton/prod", func(c Config) bool {
			return slices.Equal(c.ZKServers, []string{"zk1:2181", "zk2:2182"}) && c.ZKChroot == "/baton/prod"
		}},
		{"zookeeper.session.timeout", "6000", func(c Config) bool { return c.ZKSessionTimeout == 6*time.Second }},
		{"zookeeper.tick.time", "500", func(c Config) bool { return c.ZKTickTime == 500*time.Millisecond }},
		{"zookeeper.tls.enabled", "true", func(c Config) bool { return c.ZKTLSEnabled == "true" }},
		{"zookeeper.tls.ca.file", "/dev/null", func(c Config) bool { return c.ZKTLSCAFile == "/dev/null" }},
		{"zookeeper.tls.cert.file", "/dev/null", func(c Config) bool { return c.ZKTLSCertFile == "/dev/null" }},
		{"zookeeper.tls.key.file", "/dev/null", func(c Config) bool { return c.ZKTLSKeyFile == "/dev/null" }},
		{"zookeeper.tls.server.name", "zk.example", func(c Config) bool { return c.ZKTLSServerName == "zk.example" }},
		{"zookeeper.connection.retry", "7", func(c Config) bool { return c.ZKConnectionRetry == 7 }},
		{"zookeeper.connection.delay", "250", func(c Config) bool { return c.ZKConnectionDelay == 250*time.Millisecond }},
		{"zookeeper.foreground.lock.prefix", "FG1", func(c Config) bool { return c.ForegroundPrefix == "FG1" }},
		{"zookeeper.background.lock.prefix", "bg", func(c Config) bool { return c.BackgroundPrefix == "bg" }},
		{"zookeeper.foreground.task.timeout", "0", func(c Config) bool { return c.ForegroundTimeout == 0 }},
		{"zookeeper.background.task.timeout", "90000", func(c Config) bool { return c.BackgroundTimeout == 90*time.Second }},
		{"zookeeper.lock.delay", "15000", func(c Config) bool { return c.LockDelay == 15*time.Second }},
		{"zookeeper.background.max.wait", "60000", func(c Config) bool { return c.BackgroundMaxWait == time.Minute }},
		{"elastic.request.retry.count", "0", func(c Config) bool { return c.RetryCount == 0 }},
		{"zookeeper.lock.root", "/locks", func(c Config) bool { return c.LockRoot == "/locks" }},
		{"zookeeper.object.node", "persistent", func(c Config) bool { return c.ObjectNode == "persistent" }},
		{"zookeeper.lock.protocol", "native", func(c Config) bool { return c.LockProtocol == "native" }},
		{"zookeeper.auth.digest", "alice:s3cret", func(c Config) bool { return c.AuthDigest == "alice:s3cret" }},
		{"zookeeper.auth.digest.file", "", func(c Config) bool { return c.AuthDigestFile == "" }}, // set with the digest is an error: TestZKDigestFile
		{"sidecar.socket.path", "/tmp/b.sock", func(c Config) bool { return c.SocketPath == "/tmp/b.sock" }},
		{"sidecar.socket.mode", "600", func(c Config) bool { return c.SocketMode == 0o600 }},
		{"sidecar.node.id", "node-7.dc1", func(c Config) bool { return c.NodeID == "node-7.dc1" }},
		{"sidecar.lease.default", "1000", func(c Config) bool { return c.LeaseDefault == time.Second }},
		{"sidecar.lease.max", "2000", func(c Config) bool { return c.LeaseMax == 2*time.Second }},
		{"sidecar.max.waiters", "3", func(c Config) bool { return c.MaxWaiters == 3 }},
		{"sidecar.max.waiters.per.uid", "2", func(c Config) bool { return c.MaxWaitersPerUID == 2 }},
		{"sidecar.max.polls.per.uid", "7", func(c Config) bool { return c.MaxPollsPerUID == 7 }},
		{"sidecar.max.connections.per.uid", "9", func(c Config) bool { return c.MaxConnectionsPerUID == 9 }},
		{"sidecar.auth.admin.uids", "0, 1000 ,65534", func(c Config) bool { return slices.Equal(c.AuthAdminUIDs, []uint32{0, 1000, 65534}) }},
		{"sidecar.max.leases.per.uid", "1", func(c Config) bool { return c.MaxLeasesPerUID == 1 }},
		{"sidecar.max.lists.per.uid", "1", func(c Config) bool { return c.MaxListsPerUID == 1 }},
		{"sidecar.max.connections", "100", func(c Config) bool { return c.MaxConnections == 100 }},
		{"sidecar.auth.admin.gids", "", func(c Config) bool { return c.AuthAdminGIDs == nil }},
		{"sidecar.auth.client.uids", "1000", func(c Config) bool { return slices.Equal(c.AuthClientUIDs, []uint32{1000}) }},
		{"sidecar.auth.client.gids", "100", func(c Config) bool { return slices.Equal(c.AuthClientGIDs, []uint32{100}) }},
		{"sidecar.shutdown.grace", "0", func(c Config) bool { return c.ShutdownGrace == 0 }},
		{"sidecar.app.url", "unix:/run/app.sock:/ops", func(c Config) bool { return c.AppURL == "unix:/run/app.sock:/ops" }},
		{"sidecar.app.timeout", "1500", func(c Config) bool { return c.AppTimeout == 1500*time.Millisecond }},
		{"sidecar.app.preempt.cleanup", "0", func(c Config) bool { return c.AppPreemptCleanup == 0 }},
		{"sidecar.app.token.file", "", func(c Config) bool { return c.AppTokenFile == "" }},
		{"queue.dir", "/srv/q", func(c Config) bool { return c.QueueDir == "/srv/q" }},
		{"queue.workers", "16", func(c Config) bool { return c.QueueWorkers == 16 }},
		{"queue.max.ops", "5", func(c Config) bool { return c.QueueMaxOps == 5 }},
		{"queue.max.bytes", "1048576", func(c Config) bool { return c.QueueMaxBytes == 1<<20 }},
		{"queue.retention", "0", func(c Config) bool { return c.QueueRetention == 0 }},
		{"retry.initial.interval", "10", func(c Config) bool { return c.RetryInitial == 10*time.Millisecond }},
		{"retry.max.interval", "20", func(c Config) bool { return c.RetryMax == 20*time.Millisecond }},
		{"retry.multiplier", "1.5", func(c Config) bool { return c.RetryMultiplier == 1.5 }},
		{"retry.randomization", "0", func(c Config) bool { return c.RetryRandomization == 0 }},
		{"kafka.brokers", "k1:9092,[::1]:9093", func(c Config) bool {
			return slices.Equal(c.KafkaBrokers, []string{"k1:9092", "[::1]:9093"})
		}},
		{"kafka.dlq.topic", "dead.letters_v1-x", func(c Config) bool { return c.DLQTopic == "dead.letters_v1-x" }},
		{"kafka.tls.enabled", "true", func(c Config) bool { return c.KafkaTLSEnabled == "true" }},
		{"kafka.tls.ca.file", "/dev/null", func(c Config) bool { return c.KafkaTLSCAFile == "/dev/null" }},
		{"kafka.tls.cert.file", "/dev/null", func(c Config) bool { return c.KafkaTLSCertFile == "/dev/null" }},
		{"kafka.tls.key.file", "/dev/null", func(c Config) bool { return c.KafkaTLSKeyFile == "/dev/null" }},
		{"kafka.tls.server.name", "kafka.example", func(c Config) bool { return c.KafkaTLSServerName == "kafka.example" }},
		{"kafka.sasl.mechanism", "SCRAM-SHA-512", func(c Config) bool { return c.KafkaSASLMechanism == "SCRAM-SHA-512" }},
		{"kafka.sasl.username", "alice", func(c Config) bool { return c.KafkaSASLUsername == "alice" }},
		{"kafka.sasl.password", "pw", func(c Config) bool { return c.KafkaSASLPassword == "pw" }},
		// With kafka.sasl.password set, the file must stay empty (one source): see TestKafkaSASLChecks.
		{"kafka.sasl.password.file", "", func(c Config) bool { return c.KafkaSASLPasswordFile == "" }},
		{"log.level", "DEBUG", func(c Config) bool { return c.LogLevel == slog.LevelDebug }},
		{"log.format", "json", func(c Config) bool { return c.LogFormat == "json" }},
	}
	if len(cases) != len(defs) {
		t.Fatalf("%d cases for %d keys", len(cases), len(defs))
	}
	lines := []string{"# every key"}
	for _, tc := range cases {
		lines = append(lines, tc.key+" = "+tc.value)
	}
	path := writeProps(t, t.TempDir(), "all.properties", lines...)
	l, err := Load(LoadOptions{File: path})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for i, tc := range cases {
		if got := l.Values[tc.key]; got != tc.value {
			t.Errorf("Values[%q] = %q, want %q", tc.key, got, tc.value)
		}
		if got, want := l.Sources[tc.key].String(), fmt.Sprintf("%s:%d", path, i+2); got != want {
			t.Errorf("Sources[%q] = %q, want %q", tc.key, got, want)
		}
		if !tc.check(l.Config) {
			t.Errorf("%s = %q: Config has %+v", tc.key, tc.value, l.Config)
		}
	}
}

func TestBadValues(t *testing.T) {
	cases := []struct {
		key, value string
		want       string // the message after `file:3: key: `
	}{
		{"zookeeper.session.timeout", "5s", `"5s" is not a whole number of milliseconds`},
		{"zookeeper.tick.time", "3000", `"3000" is not at most half of zookeeper.session.timeout (2500 ms)`},
		{"zookeeper.tick.time", "50", `from 100 to 60000`},
		{"zookeeper.tls.ca.file", "/nonexistent/ca.pem", `"/nonexistent/ca.pem" is not a readable file (no such file or directory)`},
		{"zookeeper.tls.enabled", "yes", `"yes" is not one of true, false`},
		{"zookeeper.session.timeout", "999", `"999" is not a whole number of milliseconds from 1000 to 600000`},
		{"zookeeper.session.timeout", "-5", `"-5" is not a whole number of milliseconds from 1000 to 600000`},
		{"zookeeper.session.timeout", "-1", `"-1" is not a whole number of milliseconds from 1000 to 600000`},
		{"zookeeper.session.timeout", "99999999999999999999", `from 1000 to 600000`},
		{"zookeeper.connection.delay", "0", `from 1 to 600000`},
		{"zookeeper.connection.retry", "1.5", `"1.5" is not a whole number`},
		{"zookeeper.servers", "zk1", `"zk1" is not host:port`},
		{"zookeeper.servers", "zk1:70000", `port "70000" of "zk1:70000" is not 1..65535`},
		{"zookeeper.servers", "zk1:2181,,zk2:2181", `empty entry`},
		{"zookeeper.servers", "zk1:2181/baton/", `chroot "/baton/": it ends with /`},
		{"zookeeper.servers", "zk1:2181/a//b", `it has an empty segment`},
		{"zookeeper.servers", "zk1:2181/a/../b", `it has a . or .. segment`},
		{"zookeeper.foreground.lock.prefix", "A-1", `is not a node-name prefix of letters and digits`},
		{"zookeeper.background.lock.prefix", "", `"" is not a node-name prefix`},
		{"zookeeper.background.lock.prefix", "A", `is not a prefix different from the other lock prefix`},
		{"zookeeper.background.lock.prefix", "0", `foreground nodes must sort first, but "A-" sorts after "0-"`},
		{"zookeeper.lock.root", "baton/locks", `it is not absolute`},
		{"zookeeper.lock.root", "/", `it is the root`},
		{"zookeeper.lock.root", "/zookeeper/x", `/zookeeper is reserved`},
		{"zookeeper.object.node", "ephemeral", `"ephemeral" is not one of container, persistent`},
		{"zookeeper.lock.protocol", "curator", `"curator" is not one of plugin, native`},
		{"zookeeper.lock.protocol", "Native", `"Native" is not one of plugin, native`},
		{"zookeeper.auth.digest", "nocolon", `<redacted> is not user:password`},
		{"sidecar.socket.path", "/" + strings.Repeat("s", 107), `is not a unix socket path of 1 to 107 bytes`},
		{"sidecar.socket.mode", "0999", `"0999" is not an octal file mode like 0660, at most 0777`},
		{"sidecar.socket.mode", "1777", `is not an octal file mode`},
		{"sidecar.socket.mode", "0440", `lets the owner read and write`},
		{"sidecar.node.id", "a/b", `is not a node id of 1 to 128 characters`},
		{"sidecar.lease.default", "700000", `"700000" is not at most sidecar.lease.max (600000 ms)`},
		{"sidecar.lease.max", "1000", `"1000" is not at least sidecar.lease.default (30000 ms)`},
		{"sidecar.max.waiters", "0", `is not a whole number from 1 to 10000000`},
		{"sidecar.max.leases.per.uid", "0", `is not a whole number from 1 to 10000000`},
		{"sidecar.auth.admin.uids", "root", `sidecar.auth.admin.uids: "root" is not a comma-separated list of numeric uids (like 0,1000; "root" is not one: names are not looked up)`},
		{"sidecar.auth.admin.gids", "0,,1", `sidecar.auth.admin.gids: "0,,1" is not a comma-separated list of numeric gids (like 0,1000; "" is not one`},
		{"sidecar.auth.client.uids", "1000,-1", `"-1" is not one`},
		{"sidecar.auth.client.gids", "4294967295", `"4294967295" is not one`},
		{"sidecar.app.url", "ftp://x/y", `scheme must be http, https or unix`},
		{"sidecar.app.url", "http://u:p@h:1/x", `no user info`},
		{"sidecar.app.url", "unix:relative.sock:/x", `unix: needs an absolute socket path`},
		{"sidecar.app.url", "http://h:0/x", `port "0" is not 1..65535`},
		{"queue.workers", "0", `from 1 to 1024`},
		{"queue.max.bytes", "1000", `"1000" is not a whole number from 1048576 to 1099511627776`},
		{"queue.max.bytes", "1GiB", `is not a whole number from 1048576`},
		{"retry.multiplier", "0.5", `"0.5" is not a number from 1 to 100`},
		{"retry.multiplier", "NaN", `is not a number from 1 to 100`},
		{"retry.randomization", "1.5", `is not a number from 0 to 1`},
		{"retry.initial.interval", "60000", `is not at most retry.max.interval (30000 ms)`},
		{"kafka.brokers", "", `is not a comma-separated host:port list (no servers)`},
		{"kafka.brokers", "k:x", `port "x" of "k:x" is not 1..65535`},
		{"kafka.dlq.topic", "dead letters", `is not a Kafka topic name`},
		{"kafka.dlq.topic", "..", `is not a Kafka topic name`},
		{"kafka.tls.enabled", "on", `"on" is not one of true, false`},
		{"kafka.tls.ca.file", "/dev/null", `"/dev/null" is not empty while kafka.tls.enabled is false (set it to true)`},
		{"kafka.tls.key.file", "/nonexistent/k.pem", `is not a readable file (no such file or directory)`},
		{"kafka.sasl.mechanism", "GSSAPI", `"GSSAPI" is not one of , PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{"kafka.sasl.username", "alice", `"alice" is not empty while kafka.sasl.mechanism is empty`},
		{"kafka.sasl.password", "pw", `<redacted> is not empty while kafka.sasl.mechanism is empty`},
		{"kafka.sasl.password.file", "/nonexistent/pw", `is not a readable file`},
		{"log.level", "verbose", `"verbose" is not one of debug, info, warn, error`},
		{"log.format", "xml", `"xml" is not one of text, json`},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%02d_%s", i, tc.key), func(t *testing.T) {
			path := writeProps(t, dir, fmt.Sprintf("bad%d.properties", i), "# comment", "log.level = info", tc.key+" = "+tc.value, "queue.dir = /tmp/q")
			l, err := Load(LoadOptions{File: path})
			if err == nil {
				t.Fatalf("Load(%s = %q) = %v, want an error", tc.key, tc.value, l.Config)
			}
			fes := fieldErrors(err)
			if len(fes) != 1 {
				t.Fatalf("Load(%s = %q): %d field errors, want 1: %v", tc.key, tc.value, len(fes), err)
			}
			fe := fes[0]
			if fe.Key != tc.key || fe.Source.File != path || fe.Source.Line != 3 {
				t.Errorf("FieldError = %s at %s, want %s at %s:3", fe.Key, fe.Source, tc.key, path)
			}
			prefix := fmt.Sprintf("%s:3: %s: ", path, tc.key)
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.want) {
				t.Errorf("error = %q, want %q…%q", msg, prefix, tc.want)
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	path := writeProps(t, t.TempDir(), "baton.properties",
		"zookeeper.session.timeout = 5s", // 1
		"log.level = info",               // 2
		"queue.workers = many",           // 3
		"kafka.brokers = nope",           // 4
		"log.format = yaml",              // 5
	)
	_, err := Load(LoadOptions{File: path, Set: []string{"retry.multiplier=0"}, Env: []string{"BATON_SIDECAR_MAX_WAITERS=-1"}})
	var got []string
	for _, fe := range fieldErrors(err) {
		got = append(got, fmt.Sprintf("%s %s", fe.Source, fe.Key))
	}
	want := []string{
		path + ":1 zookeeper.session.timeout",
		path + ":3 queue.workers",
		path + ":4 kafka.brokers",
		path + ":5 log.format",
		"env BATON_SIDECAR_MAX_WAITERS sidecar.max.waiters",
		"--set retry.multiplier",
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors at %q, want %q (err: %v)", got, want, err)
	}
	wantMsg := path + `:1: zookeeper.session.timeout: "5s" is not a whole number of milliseconds from 1000 to 600000`
	if first := strings.SplitN(err.Error(), "\n", 2)[0]; first != wantMsg {
		t.Errorf("first line %q, want %q", first, wantMsg)
	}
}

func TestSyntaxErrorNamesFile(t *testing.T) {
	path := writeProps(t, t.TempDir(), "baton.properties", "a=1", "b=\\uZZZZ")
	_, err := Load(LoadOptions{File: path})
	if want := path + `:2: \u is not followed by 4 hex digits`; err == nil || err.Error() != want {
		t.Errorf("Load error = %v, want %q", err, want)
	}
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("errors.Is(%v, ErrSyntax) = false", err)
	}
}

func TestPrecedence(t *testing.T) {
	path := writeProps(t, t.TempDir(), "p.properties",
		"zookeeper.session.timeout = 6000", // file only
		"log.level = debug",                // file < env
		"queue.workers = 2",                // file < env < set
		"sidecar.socket.path = /file.sock", // file < set < flag
	)
	l, err := Load(LoadOptions{
		File: path,
		Env: []string{
			"PATH=/bin", "BATON_LOG_LEVEL=warn", "BATON_QUEUE_WORKERS=3", "BATON_LOG_FORMAT=json",
			"BATON_OBJECT=x", "BATON_LEASE_ID=y", "BATON_FENCING_TOKEN=z", // set by `baton lock`: ignored
		},
		Set:   []string{"queue.workers=4", "queue.workers=5", "sidecar.socket.path=/set.sock", "kafka.brokers=k:1,k:2"},
		Flags: []Flag{{Name: "--socket", Key: "sidecar.socket.path", Value: "/flag.sock"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, value, source string }{
		{"zookeeper.session.timeout", "6000", path + ":1"},
		{"log.level", "warn", "env BATON_LOG_LEVEL"},
		{"log.format", "json", "env BATON_LOG_FORMAT"},
		{"queue.workers", "5", "--set"}, // the last --set wins
		{"kafka.brokers", "k:1,k:2", "--set"},
		{"sidecar.socket.path", "/flag.sock", "--socket"},
		{"queue.dir", "/var/lib/baton/queue", "default"},
	} {
		if v, s := l.Values[tc.key], l.Sources[tc.key].String(); v != tc.value || s != tc.source {
			t.Errorf("%s = %q from %s, want %q from %s", tc.key, v, s, tc.value, tc.source)
		}
	}
	if l.Config.QueueWorkers != 5 || l.Config.LogLevel != slog.LevelWarn || l.Config.SocketPath != "/flag.sock" {
		t.Errorf("Config = %+v", l.Config)
	}
	if len(l.Warnings) != 0 {
		t.Errorf("Warnings = %v, want none", l.Warnings)
	}
}

func TestSourceLabelsInErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts LoadOptions
		want string
	}{
		{"env", LoadOptions{NoFile: true, Env: []string{"BATON_ZOOKEEPER_SESSION_TIMEOUT=5s"}},
			`env BATON_ZOOKEEPER_SESSION_TIMEOUT: zookeeper.session.timeout: "5s" is not a whole number of milliseconds from 1000 to 600000`},
		{"set", LoadOptions{NoFile: true, Set: []string{"zookeeper.session.timeout=5s"}},
			`--set zookeeper.session.timeout: "5s" is not a whole number of milliseconds from 1000 to 600000`},
		{"flag", LoadOptions{NoFile: true, Flags: []Flag{{"--socket", "sidecar.socket.path", ""}}},
			`--socket sidecar.socket.path: "" is not a unix socket path of 1 to 107 bytes`},
		{"set without =", LoadOptions{NoFile: true, Set: []string{"log.level"}},
			`--set: "log.level" is not key=value`},
		{"set unknown key", LoadOptions{NoFile: true, Set: []string{"zookeeper.sesion.timeout=1"}},
			`--set: unknown key "zookeeper.sesion.timeout" (did you mean "zookeeper.session.timeout"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.opts)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Load error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestUnknownKeysWarn(t *testing.T) {
	path := writeProps(t, t.TempDir(), "baton.properties",
		"log.level = info",
		"# typo below",
		"zookeeper.sesion.timeout = 1000",
		"something.else = x",
		"zookeeper.sesion.timeout = 2000", // warned once
		"log.level = debug",               // duplicate
	)
	l, err := Load(LoadOptions{File: path, Env: []string{"BATON_ZOOKEEPER_SESION_TIMEOUT=1", "BATON_QQQ=1"}})
	if err != nil {
		t.Fatalf("Load: %v (unknown keys must only warn)", err)
	}
	var got []string
	for _, w := range l.Warnings {
		got = append(got, w.String())
	}
	want := []string{
		path + `:3: unknown key "zookeeper.sesion.timeout" (did you mean "zookeeper.session.timeout"?)`,
		path + `:4: unknown key "something.else"`,
		path + `:5: duplicate key "zookeeper.sesion.timeout": this definition wins over line 3`,
		path + `:6: duplicate key "log.level": this definition wins over line 1`,
		`env BATON_ZOOKEEPER_SESION_TIMEOUT: unknown variable "BATON_ZOOKEEPER_SESION_TIMEOUT" (did you mean "BATON_ZOOKEEPER_SESSION_TIMEOUT"?)`,
		`env BATON_QQQ: unknown variable "BATON_QQQ"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l.Warnings[0].Suggestion != "zookeeper.session.timeout" {
		t.Errorf("Suggestion = %q", l.Warnings[0].Suggestion)
	}
	if l.Config.ZKSessionTimeout != 5*time.Second || l.Config.LogLevel != slog.LevelDebug {
		t.Errorf("Config = %+v, want default session timeout and the last log.level", l.Config)
	}
}

func TestFileChoice(t *testing.T) {
	dir := t.TempDir()
	empty := t.TempDir()
	writeProps(t, dir, DefaultFile, "log.level = error")
	for _, tc := range []struct {
		name      string
		opts      LoadOptions
		wantFile  string
		wantLevel slog.Level
	}{
		{"implicit present", LoadOptions{Dir: dir}, filepath.Join(dir, DefaultFile), slog.LevelError},
		{"implicit absent", LoadOptions{Dir: empty}, "", slog.LevelInfo},
		{"NoFile", LoadOptions{Dir: dir, NoFile: true}, "", slog.LevelInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Load(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if l.File != tc.wantFile || l.Config.LogLevel != tc.wantLevel {
				t.Errorf("File %q level %v, want %q %v", l.File, l.Config.LogLevel, tc.wantFile, tc.wantLevel)
			}
		})
	}
	t.Run("implicit in cwd", func(t *testing.T) {
		t.Chdir(dir)
		l, err := Load(LoadOptions{})
		if err != nil || l.File != DefaultFile || l.Sources["log.level"].String() != "baton.properties:1" {
			t.Errorf("Load() = %v, %v; want baton.properties read", l, err)
		}
	})
	t.Run("explicit missing", func(t *testing.T) {
		_, err := Load(LoadOptions{File: filepath.Join(empty, "nope.properties")})
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nope.properties") {
			t.Errorf("Load(missing) = %v, want a not-exist error naming the file", err)
		}
	})
}

func TestSecretNeverPrinted(t *testing.T) {
	const secret = "s3cr3t-pw"
	path := writeProps(t, t.TempDir(), "baton.properties", "zookeeper.auth.digest = alice:"+secret)
	l, err := Load(LoadOptions{File: path})
	if err != nil {
		t.Fatal(err)
	}
	if l.Config.AuthDigest != "alice:"+secret {
		t.Fatalf("AuthDigest = %q", l.Config.AuthDigest)
	}
	js, _ := json.Marshal(l.Config)
	var text, jsonLog bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("cfg", "config", l.Config)
	slog.New(slog.NewJSONHandler(&jsonLog, nil)).Info("cfg", "config", l.Config)
	outputs := map[string]string{
		"String":     l.Config.String(),
		"%v":         fmt.Sprintf("%v", l.Config),
		"%+v":        fmt.Sprintf("%+v", l.Config),
		"%#v":        fmt.Sprintf("%#v", l.Config),
		"%v ptr":     fmt.Sprintf("%v", &l.Config),
		"Loaded %v":  fmt.Sprintf("%v", l),
		"Loaded %+v": fmt.Sprintf("%+v", l),
		"Loaded %#v": fmt.Sprintf("%#v", l),
		"Lines":      strings.Join(l.Lines(), "\n"),
		"JSON":       strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(string(js)),
		"slog text":  text.String(),
		"slog json":  jsonLog.String(),
	}
	for name, out := range outputs {
		if strings.Contains(out, secret) {
			t.Errorf("%s prints the secret: %s", name, out)
		}
		if !strings.Contains(out, Redacted) {
			t.Errorf("%s does not show %s: %s", name, Redacted, out)
		}
	}
	// An invalid digest: the error does not echo it.
	_, err = Load(LoadOptions{NoFile: true, Set: []string{"zookeeper.auth.digest=" + secret}})
	if err == nil || strings.Contains(err.Error(), secret) || fieldErrors(err)[0].Value != Redacted {
		t.Errorf("bad digest error = %v, want one without the secret", err)
	}
	// A reload changing it: the change does not show it.
	writeProps(t, filepath.Dir(path), "baton.properties", "zookeeper.auth.digest = bob:other-"+secret)
	_, changes, err := Reload(l, LoadOptions{File: path})
	if err != nil || len(changes) != 1 || strings.Contains(fmt.Sprint(changes), secret) {
		t.Errorf("Reload changes = %v, %v; want one redacted change", changes, err)
	}
}

func TestReloadFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := writeProps(t, dir, "baton.properties", "log.level = info", "queue.max.ops = 10")
	opts := LoadOptions{File: path}
	cur, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	before := *cur
	beforeValues := maps2(cur.Values)
	writeProps(t, dir, "baton.properties", "log.level = debug", "queue.max.ops = lots")
	next, changes, err := Reload(cur, opts)
	if err == nil || next != nil || changes != nil {
		t.Fatalf("Reload = %v, %v, %v; want only an error", next, changes, err)
	}
	if want := path + `:2: queue.max.ops: "lots" is not a whole number from 1 to 100000000`; err.Error() != want {
		t.Errorf("Reload error = %q, want %q", err, want)
	}
	if !reflect.DeepEqual(cur.Config, before.Config) || !reflect.DeepEqual(cur.Values, beforeValues) {
		t.Errorf("Reload changed the current configuration")
	}
	if cur.Config.LogLevel != slog.LevelInfo {
		t.Errorf("log.level = %v, want info kept", cur.Config.LogLevel)
	}
}

func maps2(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestReloadClasses(t *testing.T) {
	dir := t.TempDir()
	path := writeProps(t, dir, "baton.properties",
		"log.level = info",                 // live
		"sidecar.lease.default = 30000",    // next
		"zookeeper.session.timeout = 5000", // restart
		"queue.workers = 4",                // restart
		"sidecar.socket.mode = 0660",       // restart, rewritten as an equal value
		"zookeeper.connection.retry = 5",   // live, unchanged
	)
	opts := LoadOptions{File: path}
	cur, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	writeProps(t, dir, "baton.properties",
		"log.level = debug",
		"sidecar.lease.default = 1000",
		"zookeeper.session.timeout = 9000",
		"",
		"sidecar.socket.mode = 660",
		"zookeeper.connection.retry = 5",
		"queue.workers = 8",
	)
	next, changes, err := Reload(cur, opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.String())
	}
	want := []string{
		`zookeeper.session.timeout: "5000" -> "9000" (restart: kept until restart)`,
		`sidecar.lease.default: "30000" -> "1000" (next)`,
		`queue.workers: "4" -> "8" (restart: kept until restart)`,
		`log.level: "info" -> "debug" (live)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Live and next keys change; restart keys keep their value and source.
	if next.Config.LogLevel != slog.LevelDebug || next.Config.LeaseDefault != time.Second {
		t.Errorf("live/next not applied: %+v", next.Config)
	}
	if next.Config.ZKSessionTimeout != 5*time.Second || next.Config.QueueWorkers != 4 {
		t.Errorf("restart keys changed: session %v workers %d", next.Config.ZKSessionTimeout, next.Config.QueueWorkers)
	}
	if next.Values["queue.workers"] != "4" || next.Sources["queue.workers"].Line != 4 {
		t.Errorf("queue.workers = %q from %s, want the old 4 from line 4", next.Values["queue.workers"], next.Sources["queue.workers"])
	}
	if next.Sources["log.level"].Line != 1 || next.Sources["sidecar.lease.default"].Line != 2 {
		t.Errorf("sources not updated: %v", next.Sources)
	}
	// A second reload still reports the pending restart change.
	_, again, err := Reload(next, opts)
	if err != nil || len(again) != 2 || again[0].Key != "zookeeper.session.timeout" || again[1].Key != "queue.workers" {
		t.Errorf("second Reload changes = %v, %v; want the two pending restart keys", again, err)
	}
	if _, _, err := Reload(nil, opts); err == nil {
		t.Error("Reload(nil) succeeded")
	}
}

func TestParseAppURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want AppEndpoint
		ok   bool
	}{
		{"", AppEndpoint{}, true},
		{"http://app:8080/ops", AppEndpoint{URL: "http://app:8080/ops"}, true},
		{"https://app/ops?x=1", AppEndpoint{URL: "https://app/ops?x=1"}, true},
		{"http://[::1]:9/x", AppEndpoint{URL: "http://[::1]:9/x"}, true},
		{"unix:/run/app.sock:/v1/ops", AppEndpoint{Socket: "/run/app.sock", URL: "http://localhost/v1/ops"}, true},
		{"unix:/run/app.sock:/", AppEndpoint{Socket: "/run/app.sock", URL: "http://localhost/"}, true},
		{"unix:/run/app.sock", AppEndpoint{}, false},
		{"unix:app.sock:/x", AppEndpoint{}, false},
		{"http:///nohost", AppEndpoint{}, false},
		{"app:8080/ops", AppEndpoint{}, false},
		{"http://h/x#frag", AppEndpoint{}, false},
	} {
		got, err := ParseAppURL(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseAppURL(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestChroot(t *testing.T) {
	for _, tc := range []struct{ in, chroot string }{
		{"h:1", ""},
		{"h:1/", ""}, // ZooKeeper treats a bare "/" as no chroot
		{"h:1,h2:2/a/b", "/a/b"},
	} {
		l, err := Load(LoadOptions{NoFile: true, Set: []string{"zookeeper.servers=" + tc.in}})
		if err != nil || l.Config.ZKChroot != tc.chroot {
			t.Errorf("zookeeper.servers=%q: chroot %q, %v; want %q", tc.in, l.Config.ZKChroot, err, tc.chroot)
		}
	}
}

func TestKafkaSASLChecks(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  []string
		want []string // one FieldError per entry: "key: message part"
	}{
		{"mechanism alone", []string{"kafka.sasl.mechanism=PLAIN"}, []string{
			`kafka.sasl.username: "" is not a user name: kafka.sasl.mechanism PLAIN needs one`,
			`kafka.sasl.password.file: "" is not a password file: kafka.sasl.mechanism PLAIN needs kafka.sasl.password.file or BATON_KAFKA_SASL_PASSWORD`,
		}},
		{"two password sources", []string{"kafka.sasl.mechanism=SCRAM-SHA-256", "kafka.sasl.username=u", "kafka.sasl.password=pw", "kafka.sasl.password.file=" + pwFile}, []string{
			`kafka.sasl.password.file: "` + pwFile + `" is not allowed together with kafka.sasl.password (BATON_KAFKA_SASL_PASSWORD): set only one`,
		}},
		{"file", []string{"kafka.sasl.mechanism=SCRAM-SHA-256", "kafka.sasl.username=u", "kafka.sasl.password.file=" + pwFile}, nil},
	} {
		_, err := Load(LoadOptions{NoFile: true, Set: tc.set})
		fes := fieldErrors(err)
		if len(fes) != len(tc.want) {
			t.Errorf("%s: %v, want %d errors", tc.name, err, len(tc.want))
			continue
		}
		for i, fe := range fes {
			if !strings.Contains(fe.Error(), tc.want[i]) {
				t.Errorf("%s: error %q, want %q", tc.name, fe.Error(), tc.want[i])
			}
		}
	}
}

func TestKafkaPasswordFromEnvNeverPrinted(t *testing.T) {
	const secret = "k4fka-s3cret"
	l, err := Load(LoadOptions{NoFile: true, Env: []string{"BATON_KAFKA_SASL_PASSWORD=" + secret}, Set: []string{"kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Config.KafkaSASLPassword != secret || !IsSecret("kafka.sasl.password") {
		t.Fatalf("KafkaSASLPassword = %q, secret %v", l.Config.KafkaSASLPassword, IsSecret("kafka.sasl.password"))
	}
	js, _ := json.Marshal(l.Config)
	for name, out := range map[string]string{
		"String": l.Config.String(), "%#v": fmt.Sprintf("%#v", l.Config), "JSON": string(js),
		"Lines": strings.Join(l.Lines(), "\n"),
	} {
		if strings.Contains(out, secret) {
			t.Errorf("%s prints the secret: %s", name, out)
		}
	}
	if !strings.Contains(strings.Join(l.Lines(), "\n"), "kafka.sasl.password=<redacted>  # env BATON_KAFKA_SASL_PASSWORD") {
		t.Errorf("Lines: %q, want the password redacted with its source", l.Lines())
	}
}

// TestAppTokenFile: sidecar.app.token.file must name a readable file with
// a one-line token in it; the error names the key; the token is its
// trimmed content and is never part of the printed configuration.
func TestAppTokenFile(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("tok", "  s3cret-token\n")
	for _, tc := range []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "nope"), "is not a token file (cannot read it: no such file or directory)"},
		{"empty", file("empty", " \n\t\n"), "is not a token file (it is empty)"},
		{"two lines", file("two", "a\nb\n"), "is not a token file (it holds more than one line"},
		{"directory", dir, "is not a token file (cannot read it"},
	} {
		path := writeProps(t, dir, tc.name+".properties", "sidecar.app.token.file = "+tc.path)
		_, err := Load(LoadOptions{File: path})
		if err == nil || !strings.Contains(err.Error(), "sidecar.app.token.file: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Load = %v, want an error naming sidecar.app.token.file: %q", tc.name, err, tc.want)
		}
	}
	l, err := Load(LoadOptions{File: writeProps(t, dir, "good.properties", "sidecar.app.token.file = "+good)})
	if err != nil {
		t.Fatal(err)
	}
	if l.Config.AppTokenFile != good || strings.Contains(l.Config.String(), "s3cret") {
		t.Errorf("config = %s, want the path and never the token", l.Config)
	}
	if tok, err := ReadAppToken(good); tok != "s3cret-token" || err != nil {
		t.Errorf("ReadAppToken = %q, %v, want the trimmed content", tok, err)
	}
}
