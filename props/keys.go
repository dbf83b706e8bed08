package props

import (
	"os"
	"time"
)

// Class says when a changed value takes effect after a reload (SIGHUP or
// `baton reload`).
type Class int

const (
	// ClassUnknown is the class of a key that does not exist.
	ClassUnknown Class = iota
	// Live values apply at once.
	Live
	// Next values apply to waits and operations started after the reload.
	Next
	// Restart values are reported on reload and kept until the sidecar restarts.
	Restart
)

// String returns "live", "next", "restart" or "unknown".
func (c Class) String() string {
	switch c {
	case Live:
		return "live"
	case Next:
		return "next"
	case Restart:
		return "restart"
	}
	return "unknown"
}

// KeyInfo describes one property key.
type KeyInfo struct {
	Key     string // e.g. "zookeeper.session.timeout"
	Default string // raw default value; for sidecar.node.id the host name at the time of the call
	Class   Class  // reload class
	Help    string // one line, with the unit
	Secret  bool   // true for zookeeper.auth.digest and kafka.sasl.password: never printed, see [Redact]
	Env     string // environment variable that sets it, e.g. "BATON_ZOOKEEPER_SESSION_TIMEOUT"
}

// keyDef is one row of the key table: the public description plus the parser
// that stores a (trimmed) raw value into its Config field(s).
type keyDef struct {
	key    string
	def    string
	class  Class
	help   string
	secret bool
	// set parses v into c. A non-nil error's text is what was expected,
	// phrased to follow `"value" is not ` (for example "a whole number of milliseconds").
	set func(c *Config, v string) error
}

// Limits of the numeric keys. They are documented in the package doc and the README.
const (
	maxWaitMS      = 24 * 3600 * 1000       // task timeouts, lease, app timeout, retry intervals: 24 h
	maxRetentionMS = 365 * 24 * 3600 * 1000 // queue.retention: one year
)

// defs is the key table, in the order of the README's Properties table; keep
// the two in sync.
var defs = []keyDef{
	{"zookeeper.servers", "localhost:2181", Restart,
		"ZooKeeper host:port list with an optional chroot suffix, e.g. h1:2181,h2:2181/baton", false, setServers},
	{"zookeeper.session.timeout", "5000", Restart,
		"ms session timeout requested (1000..600000); the negotiated value is logged and used", false,
		setMS(func(c *Config) *time.Duration { return &c.ZKSessionTimeout }, 1000, 600000)},
	{"zookeeper.tick.time", "2000", Restart,
		"ms: the ZooKeeper servers' tickTime (zoo.cfg); validity is counted from requests acknowledged a tickTime " +
			"before one the leader answered, so set it to at least the servers' value (100..60000)", false,
		setMS(func(c *Config) *time.Duration { return &c.ZKTickTime }, 100, 60000)},
	{"zookeeper.connection.retry", "5", Live,
		"with zookeeper.connection.delay: after retry × delay ms without a connection /readyz turns 503 (0..10000)", false,
		setInt(func(c *Config) *int { return &c.ZKConnectionRetry }, 0, 10000)},
	{"zookeeper.connection.delay", "1000", Live,
		"ms (1..600000)", false,
		setMS(func(c *Config) *time.Duration { return &c.ZKConnectionDelay }, 1, 600000)},
	{"zookeeper.foreground.lock.prefix", "A", Restart,
		"node-name prefix of foreground locks, [A-Za-z0-9]+, sorts before the background one", false,
		setPrefix(func(c *Config) *string { return &c.ForegroundPrefix })},
	{"zookeeper.background.lock.prefix", "B", Restart,
		"node-name prefix of background locks, [A-Za-z0-9]+, sorts after the foreground one", false,
		setPrefix(func(c *Config) *string { return &c.BackgroundPrefix })},
	{"zookeeper.foreground.task.timeout", "2000", Next,
		"ms a foreground acquire waits by default (0..86400000; 0 = try once)", false,
		setMS(func(c *Config) *time.Duration { return &c.ForegroundTimeout }, 0, maxWaitMS)},
	{"zookeeper.background.task.timeout", "2000", Next,
		"ms a background acquire waits by default (0..86400000; 0 = try once)", false,
		setMS(func(c *Config) *time.Duration { return &c.BackgroundTimeout }, 0, maxWaitMS)},
	{"zookeeper.lock.delay", "0", Next,
		"ms lock-delay: after a holder vanished without releasing (session expired, sidecar killed) its object is granted again no earlier than this; 0 = off (0..600000); an acquire's lock_delay_ms overrides it", false,
		setMS(func(c *Config) *time.Duration { return &c.LockDelay }, 0, 600000)},
	{"zookeeper.background.max.wait", "0", Restart,
		"ms aging: a background request that has waited longer than this goes before foreground requests arriving later; 0 = off (0..86400000)", false,
		setMS(func(c *Config) *time.Duration { return &c.BackgroundMaxWait }, 0, maxWaitMS)},
	{"elastic.request.retry.count", "5", Next,
		"retries after the first delivery attempt before dead-lettering (0..1000; 5 = up to 6 attempts)", false,
		setInt(func(c *Config) *int { return &c.RetryCount }, 0, 1000)},
	{"zookeeper.lock.root", "/baton/locks", Restart,
		"parent of all object nodes: an absolute ZooKeeper path below / (inside the chroot)", false, setLockRoot},
	{"zookeeper.object.node", "container", Restart,
		"object node type: container, or persistent while the original plugin shares the tree", false,
		setEnum(func(c *Config) *string { return &c.ObjectNode }, "container", "persistent")},
	{"zookeeper.lock.protocol", "plugin", Restart,
		"layout under zookeeper.lock.root: plugin (the original plugin's, mixes with its writers) or native (Baton only: one write " +
			"per handoff, shared locks; a plugin node under it is an error naming the root). Native always creates persistent " +
			"object nodes, whatever zookeeper.object.node says. Switch a root only once no plugin writer is left (README, Native protocol)", false,
		setEnum(func(c *Config) *string { return &c.LockProtocol }, "plugin", "native")},
	{"zookeeper.auth.digest", "", Restart,
		"user:password: authenticate and create nodes with a digest ACL; empty = open ACL; never printed", true, setDigest},
	{"zookeeper.auth.digest.file", "", Restart,
		"file holding zookeeper.auth.digest's user:password (one trailing newline ignored); its content is never printed", false,
		setFile(func(c *Config) *string { return &c.AuthDigestFile })},
	{"zookeeper.tls.enabled", "false", Restart,
		"true: connect to the servers' secureClientPort over TLS (zookeeper.servers then lists those ports)", false,
		setEnum(func(c *Config) *string { return &c.ZKTLSEnabled }, "true", "false")},
	{"zookeeper.tls.ca.file", "", Restart,
		"PEM file of the CA(s) that sign the servers' certificates; empty = the system roots", false,
		setFile(func(c *Config) *string { return &c.ZKTLSCAFile })},
	{"zookeeper.tls.cert.file", "", Restart,
		"PEM client certificate, when the servers require one (with zookeeper.tls.key.file)", false,
		setFile(func(c *Config) *string { return &c.ZKTLSCertFile })},
	{"zookeeper.tls.key.file", "", Restart,
		"PEM private key of the client certificate; the file is read, its content never printed", false,
		setFile(func(c *Config) *string { return &c.ZKTLSKeyFile })},
	{"zookeeper.tls.server.name", "", Restart,
		"name the servers' certificates must carry; empty = each server's host", false,
		func(c *Config, v string) error { c.ZKTLSServerName = v; return nil }},
	{"sidecar.socket.path", "/run/baton/baton.sock", Restart,
		"unix socket of the HTTP API (at most 107 bytes)", false,
		setSocketPath(func(c *Config) *string { return &c.SocketPath })},
	{"sidecar.socket.mode", "0660", Restart,
		"octal file mode of the socket (≤ 0777, owner read+write required)", false, setSocketMode},
	{"sidecar.node.id", "", Restart,
		"recorded in every node Baton creates, [A-Za-z0-9._-]{1,128}; default: the host name", false, setNodeID},
	{"sidecar.lease.default", "30000", Next,
		"ms lease when a request names none (1..86400000, ≤ sidecar.lease.max)", false,
		setMS(func(c *Config) *time.Duration { return &c.LeaseDefault }, 1, maxWaitMS)},
	{"sidecar.lease.max", "600000", Next,
		"ms longest lease a request may ask for; longer is a 400 (1..86400000)", false,
		setMS(func(c *Config) *time.Duration { return &c.LeaseMax }, 1, maxWaitMS)},
	{"sidecar.max.waiters", "10000", Live,
		"waiting acquires per sidecar; beyond → 503 TooManyWaiters (1..10000000)", false,
		setInt(func(c *Config) *int { return &c.MaxWaiters }, 1, 10_000_000)},
	{"sidecar.max.waiters.per.uid", "5000", Live,
		"waiting acquires of one caller uid (SO_PEERCRED); beyond → 429 TooManyRequests (1..10000000)", false,
		setInt(func(c *Config) *int { return &c.MaxWaitersPerUID }, 1, 10_000_000)},
	{"sidecar.max.leases.per.uid", "10000", Live,
		"leases held by one caller uid; beyond, an acquire → 429 TooManyRequests (1..10000000)", false,
		setInt(func(c *Config) *int { return &c.MaxLeasesPerUID }, 1, 10_000_000)},
	{"sidecar.max.polls.per.uid", "5000", Live,
		"long-polls (GET /v1/leases/{id}?wait=lost, GET /v1/locks/{object}?wait=change) of one caller uid; beyond → 429 TooManyRequests (1..10000000)", false,
		setInt(func(c *Config) *int { return &c.MaxPollsPerUID }, 1, 10_000_000)},
	{"sidecar.max.lists.per.uid", "4", Live,
		"GET /v1/locks listings of one caller uid at a time (each reads the lock root and up to limit objects); beyond → 429 TooManyRequests (1..10000)", false,
		setInt(func(c *Config) *int { return &c.MaxListsPerUID }, 1, 10_000)},
	{"sidecar.max.connections", "20000", Live,
		"open connections to the socket; beyond, a new one is answered 429 TooManyRequests and closed; admins are exempt (1..10000000)", false,
		setInt(func(c *Config) *int { return &c.MaxConnections }, 1, 10_000_000)},
	{"sidecar.max.connections.per.uid", "10000", Live,
		"open connections of one caller uid; beyond → 429 TooManyRequests; admins are exempt (1..10000000)", false,
		setInt(func(c *Config) *int { return &c.MaxConnectionsPerUID }, 1, 10_000_000)},
	{"sidecar.auth.admin.uids", "0", Live,
		"comma-separated uids that may revoke, drain, replay and list ops and preempt forcefully (the sidecar's " +
			"own uid always may); empty = only the sidecar's uid", false,
		setIDs(func(c *Config) *[]uint32 { return &c.AuthAdminUIDs }, "uid")},
	{"sidecar.auth.admin.gids", "", Live,
		"comma-separated gids whose members (primary or supplementary group) are admins too", false,
		setIDs(func(c *Config) *[]uint32 { return &c.AuthAdminGIDs }, "gid")},
	{"sidecar.auth.client.uids", "", Live,
		"comma-separated uids that may acquire, renew, release, inspect, submit and get ops; empty (with .gids " +
			"empty) = anyone who can open the socket; admins always may", false,
		setIDs(func(c *Config) *[]uint32 { return &c.AuthClientUIDs }, "uid")},
	{"sidecar.auth.client.gids", "", Live,
		"comma-separated gids whose members are clients too", false,
		setIDs(func(c *Config) *[]uint32 { return &c.AuthClientGIDs }, "gid")},
	{"sidecar.shutdown.grace", "30000", Live,
		"ms SIGTERM waits for holders to release (0..3600000)", false,
		setMS(func(c *Config) *time.Duration { return &c.ShutdownGrace }, 0, 3600000)},
	{"sidecar.app.url", "", Restart,
		"where background ops go: http://host:port/path or unix:/path.sock:/path; empty = ops disabled", false, setAppURL},
	{"sidecar.app.timeout", "30000", Next,
		"ms one delivery may take; past it the attempt fails, retryably (1..86400000)", false,
		setMS(func(c *Config) *time.Duration { return &c.AppTimeout }, 1, maxWaitMS)},
	{"sidecar.app.preempt.cleanup", "5000", Next,
		"ms a background delivery asked to yield by a preempting foreground acquire may go on before its request " +
			"is cancelled (then retried, not counted) (0..86400000)", false,
		setMS(func(c *Config) *time.Duration { return &c.AppPreemptCleanup }, 0, maxWaitMS)},
	{"sidecar.app.token.file", "", Next,
		"file whose content (trimmed) deliveries carry as the Baton-Token header, for the app to check; re-read " +
			"on reload; its content is never printed", false,
		setTokenFile},
	{"queue.dir", "/var/lib/baton/queue", Restart,
		"durable queue directory, created 0700 if missing; one sidecar per directory", false, setQueueDir},
	{"queue.workers", "4", Restart,
		"concurrent deliveries (1..1024)", false,
		setInt(func(c *Config) *int { return &c.QueueWorkers }, 1, 1024)},
	{"queue.max.ops", "100000", Live,
		"accepted, unfinished ops; beyond → 503 QueueFull (1..100000000)", false,
		setInt(func(c *Config) *int { return &c.QueueMaxOps }, 1, 100_000_000)},
	{"queue.max.bytes", "268435456", Live,
		"payload bytes the queue keeps (unfinished and dead-lettered ops); a submit past it → 507 QueueFull (1048576..1099511627776)", false,
		setInt64(func(c *Config) *int64 { return &c.QueueMaxBytes }, 1<<20, 1<<40)},
	{"queue.retention", "604800000", Live,
		"ms finished ops stay queryable and idempotent (0..31536000000)", false,
		setMS(func(c *Config) *time.Duration { return &c.QueueRetention }, 0, maxRetentionMS)},
	{"retry.initial.interval", "500", Next,
		"ms first backoff interval (1..86400000, ≤ retry.max.interval)", false,
		setMS(func(c *Config) *time.Duration { return &c.RetryInitial }, 1, maxWaitMS)},
	{"retry.max.interval", "30000", Next,
		"ms longest backoff interval (1..86400000)", false,
		setMS(func(c *Config) *time.Duration { return &c.RetryMax }, 1, maxWaitMS)},
	{"retry.multiplier", "2.0", Next,
		"backoff growth factor (1..100)", false,
		setFloat(func(c *Config) *float64 { return &c.RetryMultiplier }, 1, 100)},
	{"retry.randomization", "0.5", Next,
		"backoff jitter factor (0..1)", false,
		setFloat(func(c *Config) *float64 { return &c.RetryRandomization }, 0, 1)},
	{"kafka.brokers", "localhost:9092", Restart,
		"Kafka bootstrap host:port list", false, setBrokers},
	{"kafka.dlq.topic", "MdmDeadLetterQueue", Restart,
		"dead-letter topic, [a-zA-Z0-9._-]{1,249}", false, setTopic},
	{"kafka.tls.enabled", "false", Restart,
		"true: talk to the brokers over TLS (kafka.brokers then lists their TLS listeners)", false,
		setEnum(func(c *Config) *string { return &c.KafkaTLSEnabled }, "true", "false")},
	{"kafka.tls.ca.file", "", Restart,
		"PEM file of the CA(s) that sign the brokers' certificates; empty = the system roots", false,
		setFile(func(c *Config) *string { return &c.KafkaTLSCAFile })},
	{"kafka.tls.cert.file", "", Restart,
		"PEM client certificate, when the brokers require one (with kafka.tls.key.file)", false,
		setFile(func(c *Config) *string { return &c.KafkaTLSCertFile })},
	{"kafka.tls.key.file", "", Restart,
		"PEM private key of the client certificate; the file is read, its content never printed", false,
		setFile(func(c *Config) *string { return &c.KafkaTLSKeyFile })},
	{"kafka.tls.server.name", "", Restart,
		"name the brokers' certificates must carry; empty = each broker's host", false,
		func(c *Config, v string) error { c.KafkaTLSServerName = v; return nil }},
	{"kafka.sasl.mechanism", "", Restart,
		"SASL mechanism: empty (none), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (PLAIN sends the password as is: use it with TLS)", false,
		setEnum(func(c *Config) *string { return &c.KafkaSASLMechanism }, "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")},
	{"kafka.sasl.username", "", Restart,
		"SASL user name (with kafka.sasl.mechanism)", false,
		func(c *Config, v string) error { c.KafkaSASLUsername = v; return nil }},
	{"kafka.sasl.password", "", Restart,
		"SASL password; best set through BATON_KAFKA_SASL_PASSWORD or kafka.sasl.password.file; never printed", true,
		func(c *Config, v string) error { c.KafkaSASLPassword = v; return nil }},
	{"kafka.sasl.password.file", "", Restart,
		"file holding the SASL password (one trailing newline ignored); its content is never printed", false,
		setFile(func(c *Config) *string { return &c.KafkaSASLPasswordFile })},
	{"log.level", "info", Live,
		"debug, info, warn or error", false, setLogLevel},
	{"log.format", "text", Live,
		"text or json", false,
		setEnum(func(c *Config) *string { return &c.LogFormat }, "text", "json")},
}

// byKey indexes defs by key; byEnv by environment variable name.
var (
	byKey = map[string]*keyDef{}
	byEnv = map[string]*keyDef{}
)

func init() {
	for i := range defs {
		d := &defs[i]
		byKey[d.key] = d
		byEnv[EnvName(d.key)] = d
	}
}

// EnvPrefix starts every environment variable that sets a key.
const EnvPrefix = "BATON_"

// EnvName returns the environment variable for key: [EnvPrefix] + key
// upper-cased with "." replaced by "_" ("zookeeper.session.timeout" →
// "BATON_ZOOKEEPER_SESSION_TIMEOUT").
func EnvName(key string) string {
	b := []byte(EnvPrefix + key)
	for i := len(EnvPrefix); i < len(b); i++ {
		switch c := b[i]; {
		case c == '.':
			b[i] = '_'
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// reservedEnv are BATON_ variables that are not settings: `baton lock` sets
// them for the command it runs, which may itself run baton. They never warn.
var reservedEnv = map[string]bool{
	"BATON_OBJECT":        true,
	"BATON_LEASE_ID":      true,
	"BATON_FENCING_TOKEN": true,
}

// Keys returns every key in key-table order, with its default, reload class and help.
func Keys() []KeyInfo {
	out := make([]KeyInfo, len(defs))
	for i := range defs {
		d := &defs[i]
		out[i] = KeyInfo{Key: d.key, Default: defaultValue(d), Class: d.class, Help: d.help, Secret: d.secret, Env: EnvName(d.key)}
	}
	return out
}

// ReloadClass returns the reload class of key, or [ClassUnknown] if there is no such key.
func ReloadClass(key string) Class {
	if d, ok := byKey[key]; ok {
		return d.class
	}
	return ClassUnknown
}

// IsSecret reports whether the value of key must never be printed or logged.
func IsSecret(key string) bool {
	d, ok := byKey[key]
	return ok && d.secret
}

// Redacted replaces a secret value in output.
const Redacted = "<redacted>"

// Redact returns value, or [Redacted] if key is secret and value is not empty.
func Redact(key, value string) string {
	if value != "" && IsSecret(key) {
		return Redacted
	}
	return value
}

// defaultValue returns the raw default of d; sidecar.node.id defaults to the host name.
func defaultValue(d *keyDef) string {
	if d.key == "sidecar.node.id" {
		h, err := os.Hostname()
		if err != nil {
			return "" // fails validation, asking the user to set the key
		}
		return h
	}
	return d.def
}

// Defaults returns the configuration made of the defaults alone (no file,
// environment or --set). sidecar.node.id is the host name; if that is not a
// valid node id, NodeID is left empty.
func Defaults() Config {
	var c Config
	for i := range defs {
		if err := defs[i].set(&c, defaultValue(&defs[i])); err != nil && defs[i].key != "sidecar.node.id" {
			panic("props: bad default for " + defs[i].key + ": " + err.Error()) // a bug in the table, caught by tests
		}
	}
	return c
}
