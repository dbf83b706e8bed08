package props

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Config is the typed, validated configuration. Every field is set by
// [Load]; the zero value is not a usable configuration (see [Defaults]).
//
// AuthDigest and KafkaSASLPassword hold secrets: String, GoString, MarshalJSON and LogValue
// print [Redacted] in its place. Do not print the field on its own.
type Config struct {
	ZKServers         []string      // zookeeper.servers: host:port list, without the chroot
	ZKChroot          string        // chroot suffix of zookeeper.servers: "" or an absolute path like "/baton" (no trailing /)
	ZKSessionTimeout  time.Duration // zookeeper.session.timeout (ms in the file)
	ZKTickTime        time.Duration // zookeeper.tick.time: the servers' tickTime
	ZKTLSEnabled      string        // zookeeper.tls.enabled: "true" or "false"
	ZKTLSCAFile       string        // zookeeper.tls.ca.file
	ZKTLSCertFile     string        // zookeeper.tls.cert.file
	ZKTLSKeyFile      string        // zookeeper.tls.key.file
	ZKTLSServerName   string        // zookeeper.tls.server.name
	ZKConnectionRetry int           // zookeeper.connection.retry
	ZKConnectionDelay time.Duration // zookeeper.connection.delay

	ForegroundPrefix  string        // zookeeper.foreground.lock.prefix, [A-Za-z0-9]+
	BackgroundPrefix  string        // zookeeper.background.lock.prefix; ForegroundPrefix+"-" < BackgroundPrefix+"-"
	ForegroundTimeout time.Duration // zookeeper.foreground.task.timeout
	BackgroundTimeout time.Duration // zookeeper.background.task.timeout
	LockDelay         time.Duration // zookeeper.lock.delay: 0 = off
	BackgroundMaxWait time.Duration // zookeeper.background.max.wait: 0 = no aging
	RetryCount        int           // elastic.request.retry.count: retries after the first attempt
	LockRoot          string        // zookeeper.lock.root: absolute path inside the chroot
	ObjectNode        string        // zookeeper.object.node: "container" or "persistent"
	LockProtocol      string        // zookeeper.lock.protocol: "plugin" or "native"
	AuthDigest        string        // zookeeper.auth.digest: "" or "user:password" — secret
	AuthDigestFile    string        // zookeeper.auth.digest.file: read by [Config.ZKDigest]

	SocketPath    string        // sidecar.socket.path
	SocketMode    os.FileMode   // sidecar.socket.mode (permission bits only)
	NodeID        string        // sidecar.node.id
	LeaseDefault  time.Duration // sidecar.lease.default; ≤ LeaseMax
	LeaseMax      time.Duration // sidecar.lease.max
	MaxWaiters    int           // sidecar.max.waiters
	ShutdownGrace time.Duration // sidecar.shutdown.grace
	AppURL        string        // sidecar.app.url as written; "" = ops disabled; see [ParseAppURL]
	AppTimeout    time.Duration // sidecar.app.timeout
	// AppPreemptCleanup is sidecar.app.preempt.cleanup: how long a delivery
	// asked to yield (preemption) goes on before its request is cancelled.
	AppPreemptCleanup time.Duration
	// AppTokenFile is sidecar.app.token.file: deliveries carry its
	// content as Baton-Token (read with [ReadAppToken]); "" = none.
	AppTokenFile string

	// Per-uid caps (SO_PEERCRED): sidecar.max.{waiters,leases,polls,lists}.per.uid,
	// sidecar.max.connections and sidecar.max.connections.per.uid.
	MaxWaitersPerUID, MaxLeasesPerUID, MaxPollsPerUID, MaxListsPerUID int
	MaxConnections, MaxConnectionsPerUID                              int

	// Who may do what (SO_PEERCRED): sidecar.auth.{admin,client}.{uids,gids}.
	AuthAdminUIDs, AuthAdminGIDs, AuthClientUIDs, AuthClientGIDs []uint32

	QueueDir       string        // queue.dir
	QueueWorkers   int           // queue.workers
	QueueMaxOps    int           // queue.max.ops
	QueueMaxBytes  int64         // queue.max.bytes
	QueueRetention time.Duration // queue.retention

	RetryInitial       time.Duration // retry.initial.interval; ≤ RetryMax
	RetryMax           time.Duration // retry.max.interval
	RetryMultiplier    float64       // retry.multiplier, ≥ 1
	RetryRandomization float64       // retry.randomization, in [0,1]

	KafkaBrokers []string // kafka.brokers: host:port list
	DLQTopic     string   // kafka.dlq.topic

	KafkaTLSEnabled       string // kafka.tls.enabled: "true" or "false"
	KafkaTLSCAFile        string // kafka.tls.ca.file
	KafkaTLSCertFile      string // kafka.tls.cert.file
	KafkaTLSKeyFile       string // kafka.tls.key.file
	KafkaTLSServerName    string // kafka.tls.server.name
	KafkaSASLMechanism    string // kafka.sasl.mechanism: "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512"
	KafkaSASLUsername     string // kafka.sasl.username
	KafkaSASLPassword     string // kafka.sasl.password — secret
	KafkaSASLPasswordFile string // kafka.sasl.password.file (read when used: see dlq.NewSecurity)

	LogLevel  slog.Level // log.level
	LogFormat string     // log.format: "text" or "json"
}

// redacted returns a copy of c, of a type without methods, with the secret replaced.
func (c Config) redacted() redactedConfig {
	r := redactedConfig(c)
	r.AuthDigest = Redact("zookeeper.auth.digest", r.AuthDigest)
	r.KafkaSASLPassword = Redact("kafka.sasl.password", r.KafkaSASLPassword)
	return r
}

type redactedConfig Config

// String prints the fields with AuthDigest redacted.
func (c Config) String() string { return fmt.Sprintf("%+v", c.redacted()) }

// GoString prints the fields for %#v with AuthDigest redacted.
func (c Config) GoString() string { return fmt.Sprintf("%#v", c.redacted()) }

// MarshalJSON encodes the fields with AuthDigest redacted.
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.redacted()) }

// LogValue makes slog print the configuration with AuthDigest redacted.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }
