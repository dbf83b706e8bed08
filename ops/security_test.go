package ops_test

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// secureKafka starts kfake serving TLS only (a certificate for 127.0.0.1
// signed by a CA the test generates) with SASL SCRAM-SHA-512 user baton /
// s3cret, and returns its address and the CA's PEM file.
func secureKafka(t *testing.T) (addr, caFile string) {
	t.Helper()
	ca := testenv.NewCA(t, "ops test")
	addr = testenv.SecureKafka(t, ca, testenv.DefaultTopic, testenv.KafkaUser{Mechanism: "SCRAM-SHA-512", Name: "baton", Password: "s3cret"})
	return addr, testenv.WriteTemp(t, "ca.pem", ca.PEM)
}

// The dispatcher publishes dead letters to a broker that takes only TLS
// and SASL (SCRAM-SHA-512) with the kafka.tls.* and kafka.sasl.* keys; with
// a wrong password the op stays dlq_pending (nothing lost) and the warning
// names kafka.sasl.password (BATON_KAFKA_SASL_PASSWORD): the broker's
// verdict comes at the first publish, not at start.
func TestDeadLettersOverTLSAndSASL(t *testing.T) {
	addr, caFile := secureKafka(t)
	for _, tc := range []struct {
		name, pass string
		want       string
	}{
		{"right password", "s3cret", api.OpDeadLettered},
		{"wrong password", "wrong", api.OpDLQPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testenv.Buffer{}
			e := newEnv(t, envOptions{
				app: opstest.Options{Respond: func(context.Context, opstest.Delivery) int { return http.StatusBadRequest }},
				config: func(c *props.Config) {
					c.KafkaBrokers = []string{addr}
					c.KafkaTLSEnabled, c.KafkaTLSCAFile = "true", caFile
					c.KafkaSASLMechanism, c.KafkaSASLUsername, c.KafkaSASLPassword = "SCRAM-SHA-512", "baton", tc.pass
				},
				deps: func(d *ops.Deps) {
					d.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
				},
			})
			id := e.submit(`{"object":"secure"}`)
			e.waitState(id, tc.want, 20*time.Second)
			if tc.want == api.OpDLQPending {
				waitFor(t, 20*time.Second, "a warning naming the key", func() bool {
					return strings.Contains(logs.String(), `kafka.sasl.password (BATON_KAFKA_SASL_PASSWORD): the broker refused the SASL credentials of kafka.sasl.username \"baton\" (SCRAM-SHA-512)`)
				})
				if strings.Contains(logs.String(), "wrong") {
					t.Errorf("the log shows the password:\n%s", logs.String())
				}
				if op := e.op(id); op.State != api.OpDLQPending {
					t.Errorf("op %s is %s, want dlq_pending", id, op.State)
				}
			}
		})
	}
}

// An unreadable password file stops ops.New (so `baton serve`) at start,
// naming the key.
func TestSecurityFilesCheckedAtStart(t *testing.T) {
	cfg := testConfig(t)
	cfg.AppURL = "http://127.0.0.1:1/x"
	cfg.KafkaSASLMechanism, cfg.KafkaSASLUsername = "PLAIN", "u"
	cfg.KafkaSASLPasswordFile = filepath.Join(t.TempDir(), "missing")
	_, err := ops.New(cfg, ops.Deps{Engine: otherEngine(t, cfg)})
	if err == nil || !strings.Contains(err.Error(), "kafka.sasl.password.file: open ") {
		t.Errorf("ops.New = %v, want an error naming kafka.sasl.password.file", err)
	}
}

// TestDLQSecurity: every kafka.tls.* and kafka.sasl.* property reaches the
// dead-letter clients' options, and errors name the password's variable.
func TestDLQSecurity(t *testing.T) {
	c := props.Defaults()
	c.KafkaTLSEnabled, c.KafkaTLSCAFile, c.KafkaTLSCertFile, c.KafkaTLSKeyFile, c.KafkaTLSServerName = "true", "ca", "cert", "key", "name"
	c.KafkaSASLMechanism, c.KafkaSASLUsername, c.KafkaSASLPassword, c.KafkaSASLPasswordFile = "PLAIN", "u", "p", "pf"
	want := dlq.SecurityOptions{
		TLS: true, CAFile: "ca", CertFile: "cert", KeyFile: "key", ServerName: "name",
		Mechanism: "PLAIN", Username: "u", Password: "p", PasswordFile: "pf", PasswordEnv: "BATON_KAFKA_SASL_PASSWORD",
	}
	if got := ops.DLQSecurity(c); got != want {
		t.Errorf("DLQSecurity = %+v, want %+v", got, want)
	}
	if got := ops.DLQSecurity(props.Defaults()); got.TLS || got.Mechanism != "" {
		t.Errorf("DLQSecurity(defaults) = %+v, want plaintext without SASL", got)
	}
}
