package props

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// expected builds the error a key's parser returns: its text is what the
// value should have been, phrased to follow `"value" is not `.
func expected(format string, args ...any) error { return fmt.Errorf(format, args...) }

// digits reports whether s is a non-empty run of ASCII digits (no sign, no spaces).
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func setMS(field func(*Config) *time.Duration, lo, hi int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		if !digits(v) {
			return expected("a whole number of milliseconds from %d to %d", lo, hi)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return expected("a whole number of milliseconds from %d to %d", lo, hi)
		}
		*field(c) = time.Duration(n) * time.Millisecond
		return nil
	}
}

func setInt(field func(*Config) *int, lo, hi int) func(*Config, string) error {
	return func(c *Config, v string) error {
		if !digits(v) {
			return expected("a whole number from %d to %d", lo, hi)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return expected("a whole number from %d to %d", lo, hi)
		}
		*field(c) = n
		return nil
	}
}

func setInt64(field func(*Config) *int64, lo, hi int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		if !digits(v) {
			return expected("a whole number from %d to %d", lo, hi)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return expected("a whole number from %d to %d", lo, hi)
		}
		*field(c) = n
		return nil
	}
}

func setFloat(field func(*Config) *float64, lo, hi float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f < lo || f > hi {
			return expected("a number from %g to %g", lo, hi)
		}
		*field(c) = f
		return nil
	}
}

func setEnum(field func(*Config) *string, allowed ...string) func(*Config, string) error {
	return func(c *Config, v string) error {
		for _, a := range allowed {
			if v == a {
				*field(c) = v
				return nil
			}
		}
		return expected("one of %s", strings.Join(allowed, ", "))
	}
}

// setFile takes a path to a file that must exist and be readable now (a
// secret's content stays in the file; only the path is kept); "" = unset.
func setFile(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v != "" {
			f, err := os.Open(v)
			if err != nil {
				return expected("a readable file (%v)", errors.Unwrap(err))
			}
			f.Close()
		}
		*field(c) = v
		return nil
	}
}

// setTokenFile takes sidecar.app.token.file: a readable file with a
// token in it, checked now (the token itself is not kept in Config).
func setTokenFile(c *Config, v string) error {
	if v != "" {
		if _, err := ReadAppToken(v); err != nil {
			return expected("a token file (%v)", err)
		}
	}
	c.AppTokenFile = v
	return nil
}

// ReadAppToken reads the token of sidecar.app.token.file: the file's
// content without surrounding white space; an unreadable or empty file is
// an error.
func ReadAppToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if u := errors.Unwrap(err); u != nil {
			err = u
		}
		return "", fmt.Errorf("cannot read it: %v", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("it is empty")
	}
	if strings.ContainsAny(tok, "\r\n\x00") {
		return "", errors.New("it holds more than one line: a header value is one line")
	}
	return tok, nil
}

func validPrefix(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func setPrefix(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if !validPrefix(v) {
			return expected("a node-name prefix of letters and digits ([A-Za-z0-9]+)")
		}
		*field(c) = v
		return nil
	}
}

// parseHostPorts parses a comma-separated host:port list. Spaces around
// entries are ignored; the port is required and must be 1..65535. On failure
// it returns what is wrong, for an error message.
func parseHostPorts(v string) ([]string, string) {
	if strings.TrimSpace(v) == "" {
		return nil, "no servers"
	}
	var out []string
	for e := range strings.SplitSeq(v, ",") {
		e = strings.TrimSpace(e)
		host, port, err := net.SplitHostPort(e)
		switch {
		case e == "":
			return nil, "empty entry"
		case err != nil:
			return nil, fmt.Sprintf("%q is not host:port", e)
		case host == "" || strings.ContainsAny(host, " \t/"):
			return nil, fmt.Sprintf("%q has no valid host", e)
		}
		if n, err := strconv.Atoi(port); err != nil || !digits(port) || n < 1 || n > 65535 {
			return nil, fmt.Sprintf("port %q of %q is not 1..65535", port, e)
		}
		out = append(out, e)
	}
	return out, ""
}

// zkPathProblem returns why p is not a valid absolute ZooKeeper path, or ""
// if it is. It applies ZooKeeper's PathUtils.validatePath rules.
func zkPathProblem(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "it is not absolute"
	}
	if p == "/" {
		return "it is the root"
	}
	if strings.HasSuffix(p, "/") {
		return "it ends with /"
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		switch seg {
		case "":
			return "it has an empty segment"
		case ".", "..":
			return "it has a . or .. segment"
		}
	}
	for _, r := range p {
		if r == 0 || r < 0x20 || 0x7f <= r && r <= 0x9f || 0xd800 <= r && r <= 0xf8ff || 0xfff0 <= r && r <= 0xffff || r == utf8.RuneError {
			return fmt.Sprintf("it contains the character %U", r)
		}
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return "/zookeeper is reserved by ZooKeeper"
	}
	return ""
}

func setServers(c *Config, v string) error {
	hosts, chroot := v, ""
	if i := strings.IndexByte(v, '/'); i >= 0 {
		hosts, chroot = v[:i], v[i:]
	}
	servers, why := parseHostPorts(hosts)
	if why != "" {
		return expected("a comma-separated host:port list with an optional /chroot suffix (%s)", why)
	}
	if chroot == "/" { // ZooKeeper's client treats a bare "/" as no chroot
		chroot = ""
	}
	if chroot != "" {
		if why := zkPathProblem(chroot); why != "" {
			return expected("a host:port list with a valid chroot (chroot %q: %s)", chroot, why)
		}
	}
	c.ZKServers, c.ZKChroot = servers, chroot
	return nil
}

func setBrokers(c *Config, v string) error {
	b, why := parseHostPorts(v)
	if why != "" {
		return expected("a comma-separated host:port list (%s)", why)
	}
	c.KafkaBrokers = b
	return nil
}

func setLockRoot(c *Config, v string) error {
	if why := zkPathProblem(v); why != "" {
		return expected("an absolute ZooKeeper path below / like /baton/locks (%s)", why)
	}
	c.LockRoot = v
	return nil
}

func setDigest(c *Config, v string) error {
	if v != "" {
		user, pass, ok := strings.Cut(v, ":")
		if !ok || user == "" || pass == "" {
			return expected("user:password (non-empty user and password)")
		}
	}
	c.AuthDigest = v
	return nil
}

// maxSocketPath is the longest unix socket path: sun_path is 108 bytes with the NUL.
const maxSocketPath = 107

func setSocketPath(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" || len(v) > maxSocketPath || strings.ContainsRune(v, 0) {
			return expected("a unix socket path of 1 to %d bytes", maxSocketPath)
		}
		*field(c) = v
		return nil
	}
}

func setSocketMode(c *Config, v string) error {
	ok := len(v) >= 1 && len(v) <= 4 && strings.Trim(v, "01234567") == "" && (len(v) < 4 || v[0] == '0')
	if !ok {
		return expected("an octal file mode like 0660, at most 0777")
	}
	m, _ := strconv.ParseUint(v, 8, 32)
	if m&0o600 != 0o600 {
		return expected("a file mode that lets the owner read and write (like 0660)")
	}
	c.SocketMode = os.FileMode(m)
	return nil
}

// setIDs parses a comma-separated list of uids or gids (decimal, 0 to
// 4294967294; spaces around the commas allowed; empty = none).
func setIDs(field func(*Config) *[]uint32, what string) func(*Config, string) error {
	return func(c *Config, v string) error {
		var ids []uint32
		if strings.TrimSpace(v) != "" {
			for part := range strings.SplitSeq(v, ",") {
				p := strings.TrimSpace(part)
				n, err := strconv.ParseUint(p, 10, 32)
				if !digits(p) || err != nil || n == math.MaxUint32 {
					return expected("a comma-separated list of numeric %ss (like 0,1000; %q is not one: names are not looked up)", what, p)
				}
				ids = append(ids, uint32(n))
			}
		}
		*field(c) = ids
		return nil
	}
}

func setNodeID(c *Config, v string) error {
	ok := v != "" && len(v) <= 128
	for i := 0; ok && i < len(v); i++ {
		b := v[i]
		ok = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-'
	}
	if !ok {
		return expected("a node id of 1 to 128 characters [A-Za-z0-9._-]")
	}
	c.NodeID = v
	return nil
}

func setQueueDir(c *Config, v string) error {
	if v == "" || strings.ContainsRune(v, 0) {
		return expected("a directory path")
	}
	c.QueueDir = v
	return nil
}

func setAppURL(c *Config, v string) error {
	if _, err := ParseAppURL(v); err != nil {
		return expected("%s", err.Error())
	}
	c.AppURL = v
	return nil
}

func setTopic(c *Config, v string) error {
	ok := v != "" && len(v) <= 249 && v != "." && v != ".."
	for i := 0; ok && i < len(v); i++ {
		b := v[i]
		ok = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-'
	}
	if !ok {
		return expected("a Kafka topic name of 1 to 249 characters [a-zA-Z0-9._-]")
	}
	c.DLQTopic = v
	return nil
}

func setLogLevel(c *Config, v string) error {
	switch strings.ToLower(v) {
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "info":
		c.LogLevel = slog.LevelInfo
	case "warn":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		return expected("one of debug, info, warn, error")
	}
	return nil
}

// AppEndpoint is the parsed form of sidecar.app.url.
type AppEndpoint struct {
	// Socket is the unix socket to dial, "" for TCP.
	Socket string
	// URL is the URL to request: the configured one for http(s), or
	// "http://localhost" + path for a unix socket.
	URL string
}

// ParseAppURL parses sidecar.app.url: "" (ops disabled, zero AppEndpoint),
// "http://host[:port]/path" (https also accepted; no user info or fragment),
// or "unix:/path.sock:/path", split at the first ":/" after the socket path.
func ParseAppURL(s string) (AppEndpoint, error) {
	const what = "http://host:port/path or unix:/path.sock:/path"
	if s == "" {
		return AppEndpoint{}, nil
	}
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		i := strings.Index(rest, ":/")
		if !strings.HasPrefix(rest, "/") || i < 0 {
			return AppEndpoint{}, fmt.Errorf("%s (unix: needs an absolute socket path, a colon and an absolute request path)", what)
		}
		sock, path := rest[:i], rest[i+1:]
		if len(sock) > maxSocketPath || strings.ContainsRune(sock, 0) {
			return AppEndpoint{}, fmt.Errorf("%s (socket path longer than %d bytes)", what, maxSocketPath)
		}
		u, err := url.Parse("http://localhost" + path)
		if err != nil || u.Fragment != "" {
			return AppEndpoint{}, fmt.Errorf("%s (bad request path %q)", what, path)
		}
		return AppEndpoint{Socket: sock, URL: u.String()}, nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return AppEndpoint{}, fmt.Errorf("%s", what)
	case u.Scheme != "http" && u.Scheme != "https":
		return AppEndpoint{}, fmt.Errorf("%s (scheme must be http, https or unix)", what)
	case u.Host == "" || u.Hostname() == "":
		return AppEndpoint{}, fmt.Errorf("%s (no host)", what)
	case u.User != nil:
		return AppEndpoint{}, fmt.Errorf("%s (no user info: it would be printed)", what)
	case u.Fragment != "" || u.Opaque != "":
		return AppEndpoint{}, fmt.Errorf("%s (no fragment)", what)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return AppEndpoint{}, fmt.Errorf("%s (port %q is not 1..65535)", what, p)
		}
	}
	return AppEndpoint{URL: s}, nil
}

// crossCheck validates constraints between keys of a fully-parsed c and
// returns one *FieldError per violation, attributed to the key most likely
// changed by the user (see blame).
func crossCheck(c *Config, values map[string]string, sources map[string]Source) []error {
	var errs []error
	fail := func(key, exp string) {
		errs = append(errs, newFieldError(sources[key], key, values[key], exp))
	}
	// Node names sort as prefix + "-" + ...: foreground must sort first.
	const fg, bg = "zookeeper.foreground.lock.prefix", "zookeeper.background.lock.prefix"
	if c.ForegroundPrefix != "" && c.BackgroundPrefix != "" {
		k := blame(sources, bg, fg)
		switch {
		case c.ForegroundPrefix == c.BackgroundPrefix:
			fail(k, "a prefix different from the other lock prefix")
		case c.ForegroundPrefix+"-" > c.BackgroundPrefix+"-":
			fail(k, fmt.Sprintf("a valid prefix: foreground nodes must sort first, but %q sorts after %q",
				c.ForegroundPrefix+"-", c.BackgroundPrefix+"-"))
		}
	}
	ordered := func(lowKey, highKey string, low, high time.Duration) {
		if low == 0 || high == 0 || low <= high {
			return
		}
		if blame(sources, lowKey, highKey) == lowKey {
			fail(lowKey, fmt.Sprintf("at most %s (%d ms)", highKey, high.Milliseconds()))
		} else {
			fail(highKey, fmt.Sprintf("at least %s (%d ms)", lowKey, low.Milliseconds()))
		}
	}
	// ZooKeeper never negotiates a session shorter than 2 ticks, and Baton
	// counts validity a tickTime back: a shorter session would grant
	// nothing.
	if c.ZKTickTime > 0 && c.ZKSessionTimeout > 0 && c.ZKSessionTimeout < 2*c.ZKTickTime {
		const st, tt = "zookeeper.session.timeout", "zookeeper.tick.time"
		if blame(sources, st, tt) == st {
			fail(st, fmt.Sprintf("at least 2 × zookeeper.tick.time (%d ms)", 2*c.ZKTickTime.Milliseconds()))
		} else {
			fail(tt, fmt.Sprintf("at most half of zookeeper.session.timeout (%d ms)", c.ZKSessionTimeout.Milliseconds()/2))
		}
	}
	kafkaChecks(c, fail)
	zkSecurityChecks(c, fail)
	ordered("sidecar.lease.default", "sidecar.lease.max", c.LeaseDefault, c.LeaseMax)
	ordered("retry.initial.interval", "retry.max.interval", c.RetryInitial, c.RetryMax)
	return errs
}

// blame picks which of two related keys an error is reported against: the one
// set with the higher precedence (a default is never to blame when the other
// key was set), prim on a tie.
func blame(sources map[string]Source, prim, other string) string {
	if sources[other].Kind > sources[prim].Kind {
		return other
	}
	return prim
}

// kafkaChecks: SASL needs a user and exactly one password source, and
// credentials or TLS files are never silently unused.
func kafkaChecks(c *Config, fail func(key, exp string)) {
	const mech, user, pass, passFile = "kafka.sasl.mechanism", "kafka.sasl.username", "kafka.sasl.password", "kafka.sasl.password.file"
	if c.KafkaSASLPassword != "" && c.KafkaSASLPasswordFile != "" {
		fail(passFile, "allowed together with kafka.sasl.password (BATON_KAFKA_SASL_PASSWORD): set only one")
	}
	if c.KafkaSASLMechanism != "" {
		if c.KafkaSASLUsername == "" {
			fail(user, "a user name: kafka.sasl.mechanism "+c.KafkaSASLMechanism+" needs one")
		}
		if c.KafkaSASLPassword == "" && c.KafkaSASLPasswordFile == "" {
			fail(passFile, "a password file: kafka.sasl.mechanism "+c.KafkaSASLMechanism+" needs kafka.sasl.password.file or BATON_KAFKA_SASL_PASSWORD")
		}
	} else {
		mustBeEmpty(fail, "empty while kafka.sasl.mechanism is empty (set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)",
			setting{user, c.KafkaSASLUsername}, setting{pass, c.KafkaSASLPassword}, setting{passFile, c.KafkaSASLPasswordFile})
	}
	if c.KafkaTLSEnabled != "true" {
		mustBeEmpty(fail, "empty while kafka.tls.enabled is false (set it to true)",
			tlsSettings("kafka", c.KafkaTLSCAFile, c.KafkaTLSCertFile, c.KafkaTLSKeyFile, c.KafkaTLSServerName)...)
	}
}
