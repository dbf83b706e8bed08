package lock

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"regexp"
	"strings"
	"time"
)

// Options configures an Engine. A zero field means its documented default.
type Options struct {
	// Servers is the ZooKeeper ensemble, "host:port" each. Required.
	Servers []string
	// Chroot is prefixed to every path (go-zookeeper has no chroot of its
	// own); "" or an absolute path such as "/baton".
	Chroot string
	// Root is the parent of all object nodes; default "/baton/locks".
	Root string
	// ObjectNode says how object nodes are created; default Container.
	// The native protocol always creates persistent object nodes (see
	// "Native protocol").
	ObjectNode ObjectNode
	// Protocol is the layout under Root: Plugin (default) or Native.
	Protocol Protocol
	// SessionTimeout is the requested session timeout; default 5s. The
	// negotiated one is used for validity.
	SessionTimeout time.Duration
	// TickTime is the ZooKeeper servers' tickTime (zoo.cfg); default 2s, as
	// in ZooKeeper's sample configuration. Validity is counted from requests
	// acknowledged at least TickTime before one answered through the leader
	// (see the package doc): a TickTime lower than the servers' is unsafe
	// on an ensemble, a higher one only shortens validity.
	TickTime time.Duration
	// SafetyMargin is subtracted from the session timeout for validity; it is
	// never less than 2% of the negotiated timeout + 50 ms (the default).
	SafetyMargin time.Duration
	// ForegroundPrefix and BackgroundPrefix name the sequential children;
	// default "A" and "B". ForegroundPrefix+"-" must sort before
	// BackgroundPrefix+"-".
	ForegroundPrefix, BackgroundPrefix string
	// ForegroundWait and BackgroundWait bound an acquire that names no wait;
	// default 2s each.
	ForegroundWait, BackgroundWait time.Duration
	// AuthDigest, "user:password", authenticates the session and puts a
	// digest ACL (all permissions for that user only) on every node created.
	AuthDigest string
	// NodeID is recorded in every node created; default the hostname.
	NodeID string
	// HolderWatchDelay postpones arming a holder's watch on privateLock, so
	// that short critical sections do not pay a request for it; default
	// 25ms, negative arms it at once. The watch reports a privateLock
	// deleted by someone else (an operator, a misbehaving client); session
	// loss is reported independently of it. On the native protocol an
	// uncontended grant also starts following arrivals then (one listing),
	// so that its release can name a waiter that queued behind it.
	HolderWatchDelay time.Duration
	// DisableFastPath turns the one-multi acquires off (with a prediction,
	// and create-then-verify without one): every acquire follows the
	// plugin's create-child, list, create-privateLock steps.
	DisableFastPath bool
	// DisableParking makes every native request queue with a child of its
	// own, even behind a holder of this engine (see "Local waiters park"
	// in the package doc).
	DisableParking bool
	// AuditInterval is how often the engine audits the ephemeral nodes its
	// session owns under the objects it has touched, and deletes those no
	// acquire in progress or grant owns (an orphan left by a bug would
	// block the object for everyone while the session lives); it also
	// audits after every reconnect. Default 30s; negative turns the audit
	// off. Each audit costs a listing per object touched since the last
	// one (or still held) and a read per child there.
	AuditInterval time.Duration
	// LockDelay: after a holder vanished without releasing (its session
	// ended, its privateLock was deleted by anyone but its release), the
	// object is granted again no earlier than LockDelay after a waiter saw
	// it gone; default 0 (off), at most MaxLockDelay. See "Lock-delay".
	LockDelay time.Duration
	// BackgroundMaxWait: a background request waiting longer than this is
	// ordered before foreground requests that arrive after that (aging);
	// default 0 (off). Recorded in the request's node: see "Aging".
	BackgroundMaxWait time.Duration
	// Dialer opens TCP connections; default net.DialTimeout.
	Dialer func(network, addr string, timeout time.Duration) (net.Conn, error)
	// TLS, when set, runs every connection over TLS (the servers'
	// secureClientPort, Netty connection factory). An empty ServerName
	// verifies each server's certificate against its host.
	TLS *tls.Config
	// Logger receives structured logs; nil discards.
	Logger *slog.Logger
	// Observer receives events for metrics; nil ignores them.
	Observer Observer
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9]+$`)

func (o *Options) setDefaults() error {
	if len(o.Servers) == 0 {
		return fmt.Errorf("lock: Options.Servers: empty")
	}
	for _, s := range o.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("lock: Options.Servers: %q is not host:port: %w", s, err)
		}
	}
	if o.Root == "" {
		o.Root = "/baton/locks"
	}
	if o.Chroot != "" && (o.Chroot[0] != '/' || path.Clean(o.Chroot) != o.Chroot || o.Chroot == "/") {
		return fmt.Errorf("lock: Options.Chroot: %q is not an absolute path without a trailing slash", o.Chroot)
	}
	if o.Root[0] != '/' || path.Clean(o.Root) != o.Root || o.Root == "/" {
		return fmt.Errorf("lock: Options.Root: %q is not an absolute path below /", o.Root)
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 5 * time.Second
	}
	if o.SessionTimeout < 0 {
		return fmt.Errorf("lock: Options.SessionTimeout: %v is negative", o.SessionTimeout)
	}
	if o.TickTime == 0 {
		o.TickTime = 2 * time.Second
	}
	if o.TickTime < 0 {
		return fmt.Errorf("lock: Options.TickTime: %v is negative", o.TickTime)
	}
	if o.SafetyMargin < 0 {
		return fmt.Errorf("lock: Options.SafetyMargin: %v is negative", o.SafetyMargin)
	}
	if o.ForegroundPrefix == "" {
		o.ForegroundPrefix = "A"
	}
	if o.BackgroundPrefix == "" {
		o.BackgroundPrefix = "B"
	}
	for name, p := range map[string]string{"ForegroundPrefix": o.ForegroundPrefix, "BackgroundPrefix": o.BackgroundPrefix} {
		if !prefixRE.MatchString(p) {
			return fmt.Errorf("lock: Options.%s: %q is not [A-Za-z0-9]+", name, p)
		}
	}
	if !(o.ForegroundPrefix+"-" < o.BackgroundPrefix+"-") {
		return fmt.Errorf("lock: Options.ForegroundPrefix %q must sort before BackgroundPrefix %q", o.ForegroundPrefix, o.BackgroundPrefix)
	}
	if o.ForegroundWait == 0 {
		o.ForegroundWait = 2 * time.Second
	}
	if o.BackgroundWait == 0 {
		o.BackgroundWait = 2 * time.Second
	}
	if o.ForegroundWait < 0 || o.BackgroundWait < 0 {
		return fmt.Errorf("lock: Options.ForegroundWait/BackgroundWait: negative")
	}
	if o.LockDelay < 0 || o.LockDelay > MaxLockDelay {
		return fmt.Errorf("lock: Options.LockDelay: %v is not within 0..%v", o.LockDelay, MaxLockDelay)
	}
	if o.BackgroundMaxWait < 0 {
		return fmt.Errorf("lock: Options.BackgroundMaxWait: %v is negative", o.BackgroundMaxWait)
	}
	if o.AuthDigest != "" && !strings.Contains(o.AuthDigest, ":") {
		return fmt.Errorf("lock: Options.AuthDigest: not user:password")
	}
	if o.NodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			h = "unknown"
		}
		o.NodeID = h
	}
	if o.HolderWatchDelay == 0 {
		o.HolderWatchDelay = 25 * time.Millisecond
	}
	if o.AuditInterval == 0 {
		o.AuditInterval = 30 * time.Second
	}
	if o.Dialer == nil {
		o.Dialer = net.DialTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Observer receives engine events, e.g. for Prometheus metrics. Methods must
// not block.
type Observer interface {
	// SessionState is called on every ZooKeeper session event.
	SessionState(state string)
	// FastPath is called after each fast-path attempt: hit is false when
	// another participant was detected and the engine fell back.
	FastPath(hit bool)
}
