package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// CA is a certificate authority made for one test, with a server
// certificate it signed for 127.0.0.1 and localhost (valid for an hour).
type CA struct {
	PEM       []byte          // the CA's certificate
	ServerPEM []byte          // the server's PKCS#8 key, then its certificate: one PEM file, as ZooKeeper's PEM key store reads it
	Server    tls.Certificate // the same, for a Go server (e.g. kfake.TLS)
}

// NewCA makes a CA named name and its server certificate (ECDSA P-256).
func NewCA(t TB, name string) CA {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatalf("testenv: key: %v", err)
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
		t.Fatalf("testenv: CA certificate: %v", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testenv: server certificate: %v", err)
	}
	k8, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatalf("testenv: server key: %v", err)
	}
	return CA{
		PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		ServerPEM: append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k8}),
			pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})...),
		Server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey},
	}
}

// Pool returns a certificate pool holding the CA.
func (c CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(c.PEM)
	return p
}

// WriteTemp writes b to a file named name in a new temporary directory of
// t (0600) and returns its path.
func WriteTemp(t TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// KafkaUser is a SASL user of SecureKafka: Mechanism is PLAIN,
// SCRAM-SHA-256 or SCRAM-SHA-512.
type KafkaUser struct{ Mechanism, Name, Password string }

// SecureKafka starts an in-process broker that serves TLS only, with ca's
// server certificate, and SASL with users; topic is created with one
// partition. It stops when the test ends and returns its address.
func SecureKafka(t TB, ca CA, topic string, users ...KafkaUser) string {
	t.Helper()
	opts := []kfake.Opt{kfake.Ports(0), kfake.SeedTopics(1, topic),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12})}
	if len(users) > 0 {
		opts = append(opts, kfake.EnableSASL())
	}
	for _, u := range users {
		opts = append(opts, kfake.Superuser(u.Mechanism, u.Name, u.Password))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv: kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}
