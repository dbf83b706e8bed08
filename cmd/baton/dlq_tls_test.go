package main

import (
	"context"
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
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// tlsSASLKafka starts kfake serving TLS only with SASL PLAIN user
// baton / pw-1, and returns its address and the CA file that signed its
// certificate (generated here).
func tlsSASLKafka(t *testing.T) (addr, caFile string) {
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
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cli test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kafka"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, testenv.DefaultTopic),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser("PLAIN", "baton", "pw-1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c.ListenAddrs()[0], caFile
}

// baton dlq ls reads a TLS + SASL broker with the password from
// BATON_KAFKA_SASL_PASSWORD or kafka.sasl.password.file; a wrong password
// or a CA that did not sign the broker's certificate is exit 69 naming the
// key; config check never prints the password.
func TestDLQOverTLSAndSASL(t *testing.T) {
	cleanEnv(t)
	addr, caFile := tlsSASLKafka(t)
	cfg := props.Defaults()
	cfg.KafkaTLSEnabled, cfg.KafkaTLSCAFile = "true", caFile
	cfg.KafkaSASLMechanism, cfg.KafkaSASLUsername, cfg.KafkaSASLPassword = "PLAIN", "baton", "pw-1"
	sec, err := dlq.SecurityOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := dlq.NewPublisher(dlq.PublisherOptions{Brokers: []string{addr}, Security: sec})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(context.Background(), dlq.Letter{ID: "tls-op", Object: "o", Payload: []byte(`1`), Seq: 1, AcceptedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	otherCA := tlsSASLKafkaCA(t)
	sets := []string{"--socket", filepath.Join(dir, "none.sock"), "--set", "kafka.brokers=" + addr, "--set", "kafka.tls.enabled=true",
		"--set", "kafka.sasl.mechanism=PLAIN", "--set", "kafka.sasl.username=baton"}
	args := func(more ...string) []string { return append(append([]string(nil), sets...), more...) }

	t.Setenv("BATON_KAFKA_SASL_PASSWORD", "pw-1")
	code, out, errs := runBaton(t, args("--set", "kafka.tls.ca.file="+caFile, "dlq", "ls")...)
	if code != 0 || !strings.Contains(out, "tls-op") {
		t.Errorf("dlq ls over TLS + SASL = exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = runBaton(t, args("--set", "kafka.tls.ca.file="+caFile, "config", "check")...)
	if code != 0 || strings.Contains(out, "pw-1") || !strings.Contains(out, "kafka.sasl.password=<redacted>  # env BATON_KAFKA_SASL_PASSWORD") {
		t.Errorf("config check = exit %d:\n%s", code, out)
	}
	code, _, errs = runBaton(t, args("--set", "kafka.tls.ca.file="+otherCA, "dlq", "ls")...)
	if code != exitUnavailable || !strings.Contains(errs, "kafka.tls.ca.file: the broker's certificate is not trusted") {
		t.Errorf("dlq ls with another CA = exit %d, stderr %q; want 69 naming kafka.tls.ca.file", code, errs)
	}

	t.Setenv("BATON_KAFKA_SASL_PASSWORD", "")
	os.Unsetenv("BATON_KAFKA_SASL_PASSWORD")
	wrong := filepath.Join(dir, "pw")
	if err := os.WriteFile(wrong, []byte("pw-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runBaton(t, args("--set", "kafka.tls.ca.file="+caFile, "--set", "kafka.sasl.password.file="+wrong, "dlq", "ls")...)
	if code != exitUnavailable || !strings.Contains(errs, `kafka.sasl.password.file: the broker refused the SASL credentials of kafka.sasl.username "baton" (PLAIN)`) || strings.Contains(errs, "pw-2") {
		t.Errorf("dlq ls with a wrong password = exit %d, stderr %q; want 69 naming kafka.sasl.password.file", code, errs)
	}
}

// tlsSASLKafkaCA returns the PEM file of a CA that signed nothing the
// broker uses.
func tlsSASLKafkaCA(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(9), Subject: pkix.Name{CommonName: "unrelated CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
