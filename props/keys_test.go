package props

import (
	"log/slog"
	"os"
	"reflect"
	"testing"
	"time"
)

// specDefaults is the README's Properties table: key → default and reload class.
var specDefaults = []struct {
	key, def string
	class    Class
}{
	{"zookeeper.servers", "localhost:2181", Restart},
	{"zookeeper.session.timeout", "5000", Restart},
	{"zookeeper.tick.time", "2000", Restart},
	{"zookeeper.connection.retry", "5", Live},
	{"zookeeper.connection.delay", "1000", Live},
	{"zookeeper.foreground.lock.prefix", "A", Restart},
	{"zookeeper.background.lock.prefix", "B", Restart},
	{"zookeeper.foreground.task.timeout", "2000", Next},
	{"zookeeper.background.task.timeout", "2000", Next},
	{"zookeeper.lock.delay", "0", Next},
	{"zookeeper.background.max.wait", "0", Restart},
	{"elastic.request.retry.count", "5", Next},
	{"zookeeper.lock.root", "/baton/locks", Restart},
	{"zookeeper.object.node", "container", Restart},
	{"zookeeper.lock.protocol", "plugin", Restart},
	{"zookeeper.auth.digest", "", Restart},
	{"zookeeper.auth.digest.file", "", Restart},
	{"zookeeper.tls.enabled", "false", Restart},
	{"zookeeper.tls.ca.file", "", Restart},
	{"zookeeper.tls.cert.file", "", Restart},
	{"zookeeper.tls.key.file", "", Restart},
	{"zookeeper.tls.server.name", "", Restart},
	{"sidecar.socket.path", "/run/baton/baton.sock", Restart},
	{"sidecar.socket.mode", "0660", Restart},
	{"sidecar.node.id", hostname(), Restart},
	{"sidecar.lease.default", "30000", Next},
	{"sidecar.lease.max", "600000", Next},
	{"sidecar.max.waiters", "10000", Live},
	{"sidecar.max.waiters.per.uid", "5000", Live},
	{"sidecar.max.leases.per.uid", "10000", Live},
	{"sidecar.max.polls.per.uid", "5000", Live},
	{"sidecar.max.lists.per.uid", "4", Live},
	{"sidecar.max.connections", "20000", Live},
	{"sidecar.max.connections.per.uid", "10000", Live},
	{"sidecar.auth.admin.uids", "0", Live},
	{"sidecar.auth.admin.gids", "", Live},
	{"sidecar.auth.client.uids", "", Live},
	{"sidecar.auth.client.gids", "", Live},
	{"sidecar.shutdown.grace", "30000", Live},
	{"sidecar.app.url", "", Restart},
	{"sidecar.app.timeout", "30000", Next},
	{"sidecar.app.preempt.cleanup", "5000", Next},
	{"sidecar.app.token.file", "", Next},
	{"queue.dir", "/var/lib/baton/queue", Restart},
	{"queue.workers", "4", Restart},
	{"queue.max.ops", "100000", Live},
	{"queue.max.bytes", "268435456", Live},
	{"queue.retention", "604800000", Live},
	{"retry.initial.interval", "500", Next},
	{"retry.max.interval", "30000", Next},
	{"retry.multiplier", "2.0", Next},
	{"retry.randomization", "0.5", Next},
	{"kafka.brokers", "localhost:9092", Restart},
	{"kafka.dlq.topic", "MdmDeadLetterQueue", Restart},
	{"kafka.tls.enabled", "false", Restart},
	{"kafka.tls.ca.file", "", Restart},
	{"kafka.tls.cert.file", "", Restart},
	{"kafka.tls.key.file", "", Restart},
	{"kafka.tls.server.name", "", Restart},
	{"kafka.sasl.mechanism", "", Restart},
	{"kafka.sasl.username", "", Restart},
	{"kafka.sasl.password", "", Restart},
	{"kafka.sasl.password.file", "", Restart},
	{"log.level", "info", Live},
	{"log.format", "text", Live},
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		panic(err)
	}
	return h
}

// defaultConfig is the typed form of specDefaults.
func defaultConfig() Config {
	return Config{
		ZKServers: []string{"localhost:2181"}, ZKSessionTimeout: 5 * time.Second, ZKTickTime: 2 * time.Second, ZKTLSEnabled: "false",
		ZKConnectionRetry: 5, ZKConnectionDelay: time.Second,
		ForegroundPrefix: "A", BackgroundPrefix: "B",
		ForegroundTimeout: 2 * time.Second, BackgroundTimeout: 2 * time.Second,
		RetryCount: 5, LockRoot: "/baton/locks", ObjectNode: "container", LockProtocol: "plugin",
		SocketPath: "/run/baton/baton.sock", SocketMode: 0o660, NodeID: hostname(),
		LeaseDefault: 30 * time.Second, LeaseMax: 10 * time.Minute, MaxWaiters: 10000,
		MaxWaitersPerUID: 5000, MaxLeasesPerUID: 10000, MaxPollsPerUID: 5000, MaxListsPerUID: 4,
		MaxConnections: 20000, MaxConnectionsPerUID: 10000, AuthAdminUIDs: []uint32{0},
		ShutdownGrace: 30 * time.Second, AppTimeout: 30 * time.Second, AppPreemptCleanup: 5 * time.Second,
		QueueDir: "/var/lib/baton/queue", QueueWorkers: 4, QueueMaxOps: 100000, QueueMaxBytes: 256 << 20,
		QueueRetention: 7 * 24 * time.Hour,
		RetryInitial:   500 * time.Millisecond, RetryMax: 30 * time.Second,
		RetryMultiplier: 2, RetryRandomization: 0.5,
		KafkaBrokers: []string{"localhost:9092"}, DLQTopic: "MdmDeadLetterQueue", KafkaTLSEnabled: "false",
		LogLevel: slog.LevelInfo, LogFormat: "text",
	}
}

func TestKeysMatchSpec(t *testing.T) {
	keys := Keys()
	if len(keys) != len(specDefaults) {
		t.Fatalf("len(Keys()) = %d, want %d", len(keys), len(specDefaults))
	}
	for i, want := range specDefaults {
		got := keys[i]
		if got.Key != want.key || got.Default != want.def || got.Class != want.class {
			t.Errorf("Keys()[%d] = %s %q %s, want %s %q %s", i, got.Key, got.Default, got.Class, want.key, want.def, want.class)
		}
		if got.Help == "" {
			t.Errorf("Keys()[%d] (%s) has no help", i, got.Key)
		}
		if c := ReloadClass(want.key); c != want.class {
			t.Errorf("ReloadClass(%q) = %s, want %s", want.key, c, want.class)
		}
	}
	if c := ReloadClass("no.such.key"); c != ClassUnknown {
		t.Errorf("ReloadClass(unknown) = %s, want unknown", c)
	}
}

func TestDefaults(t *testing.T) {
	l, err := Load(LoadOptions{NoFile: true})
	if err != nil {
		t.Fatalf("Load(defaults): %v", err)
	}
	for _, want := range specDefaults {
		if got := l.Values[want.key]; got != want.def {
			t.Errorf("Values[%q] = %q, want default %q", want.key, got, want.def)
		}
		if got := l.Sources[want.key].String(); got != "default" {
			t.Errorf("Sources[%q] = %q, want default", want.key, got)
		}
	}
	if len(l.Values) != len(specDefaults) {
		t.Errorf("len(Values) = %d, want %d", len(l.Values), len(specDefaults))
	}
	if want := defaultConfig(); !reflect.DeepEqual(l.Config, want) {
		t.Errorf("default Config =\n%+v\nwant\n%+v", l.Config, want)
	}
	if got, want := Defaults(), defaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("Defaults() =\n%+v\nwant\n%+v", got, want)
	}
	if len(l.Warnings) != 0 || l.File != "" {
		t.Errorf("Warnings = %v, File = %q; want none", l.Warnings, l.File)
	}
}

func TestEnvName(t *testing.T) {
	for key, want := range map[string]string{
		"zookeeper.session.timeout": "BATON_ZOOKEEPER_SESSION_TIMEOUT",
		"log.level":                 "BATON_LOG_LEVEL",
		"kafka.dlq.topic":           "BATON_KAFKA_DLQ_TOPIC",
	} {
		if got := EnvName(key); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestSuggest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"zookeeper.sesion.timeout", "zookeeper.session.timeout"},
		{"zookeeper.server", "zookeeper.servers"},
		{"log.levle", "log.level"},
		{"Queue.Workers", "queue.workers"},
		{"foo", ""},
		{"elastic.search.url", ""},
	} {
		if got := suggest(tc.in, keyNames()); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
