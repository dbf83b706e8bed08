package props

import (
	"fmt"
	"os"
	"strings"
)

// zkSecurityChecks: TLS files and names are never silently unused (as
// kafkaChecks does for kafka.tls.*), and the digest has one source whose
// content is user:password.
func zkSecurityChecks(c *Config, fail func(key, exp string)) {
	if c.ZKTLSEnabled != "true" {
		mustBeEmpty(fail, "empty while zookeeper.tls.enabled is false (set it to true)",
			tlsSettings("zookeeper", c.ZKTLSCAFile, c.ZKTLSCertFile, c.ZKTLSKeyFile, c.ZKTLSServerName)...)
	}
	const digest, digestFile = "zookeeper.auth.digest", "zookeeper.auth.digest.file"
	switch {
	case c.AuthDigest != "" && c.AuthDigestFile != "":
		fail(digestFile, "allowed together with "+digest+" ("+EnvName(digest)+"): set only one")
	case c.AuthDigestFile != "":
		if _, err := c.ZKDigest(); err != nil {
			fail(digestFile, digestFileProblem(err))
		}
	}
}

// setting is one key and its value.
type setting struct{ key, value string }

// tlsSettings are the TLS file and name settings under prefix (zookeeper
// or kafka).
func tlsSettings(prefix, ca, cert, key, serverName string) []setting {
	return []setting{
		{prefix + ".tls.ca.file", ca}, {prefix + ".tls.cert.file", cert},
		{prefix + ".tls.key.file", key}, {prefix + ".tls.server.name", serverName},
	}
}

// mustBeEmpty fails each of settings that is set with exp: they are used
// only when a feature is on, and a setting is never silently unused.
func mustBeEmpty(fail func(key, exp string), exp string, settings ...setting) {
	for _, s := range settings {
		if s.value != "" {
			fail(s.key, exp)
		}
	}
}

// digestFileError is why zookeeper.auth.digest.file cannot be used; it never
// holds the file's content.
type digestFileError struct{ why string }

func (e *digestFileError) Error() string { return "zookeeper.auth.digest.file: " + e.why }

func digestFileProblem(err error) string {
	if e, ok := err.(*digestFileError); ok {
		return "a file holding user:password (" + e.why + ")"
	}
	return "a file holding user:password"
}

// ZKDigest returns the ZooKeeper digest credentials, "user:password": the
// value of zookeeper.auth.digest, or else the content of
// zookeeper.auth.digest.file (one trailing newline, or CRLF, is not part of
// it), or "" when neither is set (world ACL). The file is read at every
// call; an error names the key and the file, never the content.
func (c Config) ZKDigest() (string, error) {
	if c.AuthDigestFile == "" {
		return c.AuthDigest, nil
	}
	b, err := os.ReadFile(c.AuthDigestFile)
	if err != nil {
		return "", &digestFileError{fmt.Sprintf("cannot read %s: %v", c.AuthDigestFile, unwrapPath(err))}
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	user, pass, ok := strings.Cut(v, ":")
	if !ok || user == "" || pass == "" || strings.ContainsAny(v, "\r\n") {
		return "", &digestFileError{fmt.Sprintf("%s does not hold one line user:password (non-empty user and password)", c.AuthDigestFile)}
	}
	return v, nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// Caution is a valid setting that weakens security, logged as a WARN when
// the sidecar starts: Key is the key to change, Msg what it means and what
// to set.
type Caution struct {
	Key string
	Msg string
}

// Cautions returns the cautions of c, in key-table order: no ZooKeeper
// digest (every node Baton creates is open to anyone who reaches
// ZooKeeper), and SASL PLAIN to Kafka without TLS (the password in clear on
// the network).
func Cautions(c Config) []Caution {
	var out []Caution
	if c.AuthDigest == "" && c.AuthDigestFile == "" {
		out = append(out, Caution{"zookeeper.auth.digest",
			"zookeeper.auth.digest is empty: every node Baton creates gets the world ACL, so any client that reaches ZooKeeper " +
				"can delete or rewrite lock nodes and break mutual exclusion; set zookeeper.auth.digest.file (or " +
				EnvName("zookeeper.auth.digest") + ") to user:password"})
	}
	if c.KafkaSASLMechanism == "PLAIN" && c.KafkaTLSEnabled != "true" {
		out = append(out, Caution{"kafka.sasl.mechanism",
			"kafka.sasl.mechanism is PLAIN while kafka.tls.enabled is false: the Kafka password crosses the network in clear text; " +
				"set kafka.tls.enabled=true (or use SCRAM-SHA-256 or SCRAM-SHA-512)"})
	}
	if c.LockDelay > 0 && c.ObjectNode != "persistent" {
		out = append(out, Caution{"zookeeper.lock.delay",
			"zookeeper.lock.delay is set while zookeeper.object.node is container: a holder that vanishes while nobody waits " +
				"leaves an empty object node, which ZooKeeper's container reaper deletes with the record the delay relies on, and " +
				"the next request is then not delayed; set zookeeper.object.node=persistent for the delay to hold in every case"})
	}
	if c.LockProtocol == "native" && c.ObjectNode != "persistent" {
		out = append(out, Caution{"zookeeper.object.node",
			"zookeeper.lock.protocol is native while zookeeper.object.node is container: the native protocol keeps its holders in " +
				"the object node's data and always creates persistent object nodes, which ZooKeeper never reaps (one small node per " +
				"object ever locked stays under zookeeper.lock.root); set zookeeper.object.node=persistent to say so"})
	}
	return out
}
