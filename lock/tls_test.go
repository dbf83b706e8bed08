package lock_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// testCA is a CA and a server certificate for 127.0.0.1, made for one test.
type testCA struct {
	caPEM, serverPEM, serverKeyPEM []byte
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := key(), key()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "zookeeper"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	k8, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{
		caPEM:        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		serverPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		serverKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k8}),
	}
}

// ZooKeeper serving only TLS clients on its secureClientPort (Netty
// connection factory, PEM key and trust stores): an engine with the right CA
// locks and releases there; one that does not trust the server's certificate
// cannot connect, and says why (Health.LastError, a WARN log).
func TestZooKeeperTLS(t *testing.T) {
	ca := newTestCA(t, "baton-test")
	dir := t.TempDir()
	write := func(name string, b ...[]byte) string {
		p := filepath.Join(dir, name)
		var all []byte
		for _, x := range b {
			all = append(all, x...)
		}
		if err := os.WriteFile(p, all, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyStore := write("server.pem", ca.serverKeyPEM, ca.serverPEM)
	trust := write("ca.pem", ca.caPEM)
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
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.caPEM)
	e := newEngine(t, secure, root, func(o *lock.Options) { o.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12} })
	g := acquire(t, e, "TLS1", lock.Foreground, lock.AcquireOptions{})
	if g.Token() <= 0 || time.Until(g.ValidUntil()) <= 0 {
		t.Errorf("grant over TLS: token %d, valid for %v", g.Token(), time.Until(g.ValidUntil()))
	}
	release(t, g)

	// An engine that trusts another CA.
	other := newTestCA(t, "other")
	badPool := x509.NewCertPool()
	badPool.AppendCertsFromPEM(other.caPEM)
	bad, err := lock.New(lock.Options{Servers: secure, Root: root, TickTime: testenv.DefaultTickTime, Logger: testLogger(t),
		TLS: &tls.Config{RootCAs: badPool, MinVersion: tls.VersionTLS12}})
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
