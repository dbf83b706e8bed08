// Package props loads and validates Baton's configuration: a Java
// .properties file, BATON_ environment variables and --set overrides, turned
// into a typed [Config].
//
// # Recipe
//
//	l, err := props.Load(props.LoadOptions{File: path, Env: os.Environ(), Set: sets})
//	if err != nil { // every problem, joined; each line names file:line (or env VAR / --set), key, value
//		return err
//	}
//	for _, w := range l.Warnings { log.Warn(w.String()) } // unknown keys, with the closest known key
//	use(l.Config)
//	...
//	next, changes, err := props.Reload(l, sameOpts) // on SIGHUP: err → keep l, nothing changed
//
// # Sources and precedence
//
// Lowest first: the defaults of [Keys]; the file ([LoadOptions.File], else
// ./baton.properties if present, else none); environment variables named
// BATON_ + the key upper-cased with "." → "_" (BATON_ZOOKEEPER_SESSION_TIMEOUT);
// --set key=value; dedicated flags such as --socket. [Loaded.Sources] records
// where each value came from and [Source.String] prints it as "default",
// "baton.properties:7", "env BATON_X", "--set" or "--socket".
//
// # Syntax
//
// The file is read as UTF-8 by github.com/magiconair/properties (with
// ${...} expansion off), wrapped as a koanf parser ([Parser], [FileProvider]):
// `#` and `!` comments, `=`, `:` or whitespace separators, backslash
// continuation lines, \uXXXX escapes, escaped separators in keys (`a\=b`).
// CRLF line ends and a byte order mark are accepted. Rejected, because the
// parser would read them differently from Java: a key continued on the next
// line, \u escapes of UTF-16 surrogates (write the character in UTF-8), and
// a line that starts with a separator (empty key).
//
// # Validation
//
// Every value is checked before anything is used and all errors are
// reported together ([FieldError], [SyntaxError], [UnknownKeyError]).
// Surrounding whitespace of a value is ignored, except for the secret
// zookeeper.auth.digest. Durations are whole milliseconds (no unit) within
// the bounds given in each key's help: zookeeper.session.timeout
// 1000..600000, zookeeper.connection.delay 1..600000, task timeouts
// 0..86400000 (0 = try once), leases, app timeout and retry intervals
// 1..86400000, sidecar.shutdown.grace 0..3600000, queue.retention 0..one year.
// queue.max.bytes is whole bytes, 1048576 (1 MiB) to 1099511627776 (1 TiB).
// Lock prefixes are [A-Za-z0-9]+, differ, and foreground+"-" sorts before
// background+"-" byte-wise, as node names do. zookeeper.servers and
// kafka.brokers are host:port lists (port 1..65535); zookeeper.servers may end
// in a chroot like /baton ("/" alone means none). ZooKeeper paths must be
// absolute, without empty, "." or ".." segments and outside /zookeeper.
// sidecar.lease.default ≤ sidecar.lease.max, retry.initial.interval ≤
// retry.max.interval. An unknown key in the file or an unknown BATON_
// variable is a [Warning] naming the closest known one; an unknown key in
// --set is an error. BATON_OBJECT, BATON_LEASE_ID and BATON_FENCING_TOKEN
// (set by `baton lock` for its command) are not settings and never warn.
//
// # Reload
//
// Each key has a reload class ([ReloadClass]): [Live] applies at once,
// [Next] to waits and operations started afterwards, [Restart] is reported
// and kept until restart. [Reload] validates the new sources completely and
// either returns an error (the current configuration stays in force) or the
// configuration to use with the list of changes ([Change]); restart keys
// keep their old value in it.
//
// # Secret
//
// zookeeper.auth.digest is never printed: [Config] and [Loaded] print it
// as <redacted>, errors about it do not echo it, [Change] redacts it. Only
// Config.AuthDigest and Loaded.Values hold it in clear.
package props
