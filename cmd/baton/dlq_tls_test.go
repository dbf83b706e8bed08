package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// tlsSASLKafka starts kfake serving TLS only with SASL PLAIN user
// baton / pw-1, and returns its address and the CA file that signed its
// certificate (generated here).
func tlsSASLKafka(t *testing.T) (addr, caFile string) {
	t.Helper()
	ca := testenv.NewCA(t, "cli test")
	addr = testenv.SecureKafka(t, ca, testenv.DefaultTopic, testenv.KafkaUser{Mechanism: "PLAIN", Name: "baton", Password: "pw-1"})
	return addr, testenv.WriteTemp(t, "ca.pem", ca.PEM)
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
	sec, err := dlq.NewSecurity(ops.DLQSecurity(cfg))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := dlq.NewPublisher(dlq.PublisherOptions{Brokers: []string{addr}, Security: sec})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(context.Background(), dlq.Letter{ID: "tls-op", Object: "o", Payload: []byte(`1`), Seq: 1, AcceptedAt: api.NewTime(time.Now())}); err != nil {
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
	return testenv.WriteTemp(t, "other-ca.pem", testenv.NewCA(t, "unrelated").PEM)
}
