package lock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// ZooKeeper serving only TLS clients on its secureClientPort (Netty
// connection factory, PEM key and trust stores): an engine with the right CA
// locks and releases there; one that does not trust the server's certificate
// cannot connect, and says why (Health.LastError, a WARN log).
func TestZooKeeperTLS(t *testing.T) {
	ca := testenv.NewCA(t, "baton-test")
	keyStore := testenv.WriteTemp(t, "server.pem", ca.ServerPEM)
	trust := testenv.WriteTemp(t, "ca.pem", ca.PEM)
	ports, err := testenv.ReservePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ports[0].Release() })
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{
		ExtraJars: testenv.NettyJars,
		ExtraConfig: []string{
			"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
			fmt.Sprintf("secureClientPort=%d", ports[0].Port()),
			"ssl.keyStore.location=" + keyStore, "ssl.keyStore.type=PEM",
			"ssl.trustStore.location=" + trust, "ssl.trustStore.type=PEM",
			"ssl.clientAuth=none",
		},
	})
	secure := []string{ports[0].Addr()}
	root := testRoot(t, z)
	e := newEngine(t, secure, root, func(o *lock.Options) { o.TLS = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12} })
	g := acquire(t, e, "TLS1", lock.Foreground, lock.AcquireOptions{})
	if g.Token() <= 0 || time.Until(g.ValidUntil()) <= 0 {
		t.Errorf("grant over TLS: token %d, valid for %v", g.Token(), time.Until(g.ValidUntil()))
	}
	release(t, g)

	// An engine that trusts another CA.
	other := testenv.NewCA(t, "other")
	bad, err := lock.New(lock.Options{Servers: secure, Root: root, TickTime: testenv.DefaultTickTime, Logger: testLogger(t),
		TLS: &tls.Config{RootCAs: other.Pool(), MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.Acquire(context.Background(), "TLS1", lock.Foreground, lock.AcquireOptions{Wait: 1500 * time.Millisecond})
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Acquire with an untrusted server certificate = %v, want ErrUnavailable", err)
	}
	if le := bad.Health().LastError; !strings.Contains(le, "certificate") || !strings.Contains(le, secure[0]) {
		t.Errorf("Health.LastError = %q, want the server and the certificate error", le)
	} else {
		t.Logf("untrusted: %s", le)
	}
}
