package dlq_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/testenv"
)

// startSecureKafka starts kfake serving TLS only (ca's server certificate),
// with SASL users alice (PLAIN), bob (SCRAM-SHA-256) and carol
// (SCRAM-SHA-512).
func startSecureKafka(t *testing.T, ca testenv.CA) string {
	return testenv.SecureKafka(t, ca, topic,
		testenv.KafkaUser{Mechanism: "PLAIN", Name: "alice", Password: "alice-pw"},
		testenv.KafkaUser{Mechanism: "SCRAM-SHA-256", Name: "bob", Password: "bob-pw"},
		testenv.KafkaUser{Mechanism: "SCRAM-SHA-512", Name: "carol", Password: "carol-pw"})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// secureConfig is the configuration of a client of startSecureKafka.
func secureConfig(caFile, mech, user, passFile string) dlq.SecurityOptions {
	return dlq.SecurityOptions{
		TLS: true, CAFile: caFile,
		Mechanism: mech, Username: user, PasswordFile: passFile, PasswordEnv: "BATON_KAFKA_SASL_PASSWORD",
	}
}

// Dead letters go over TLS with each SASL mechanism, through kafka-go's own
// TLS transport and sasl/plain, sasl/scram mechanisms: publish, list and
// replay all work against a broker that accepts nothing else.
func TestTLSAndSASL(t *testing.T) {
	ca := testenv.NewCA(t, "baton-kafka")
	addr := startSecureKafka(t, ca)
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.pem", ca.PEM)
	for i, tc := range []struct{ mech, user, pass string }{
		{"PLAIN", "alice", "alice-pw"},
		{"SCRAM-SHA-256", "bob", "bob-pw"},
		{"SCRAM-SHA-512", "carol", "carol-pw"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			sec, err := dlq.NewSecurity(secureConfig(caFile, tc.mech, tc.user, writeFile(t, dir, tc.user, []byte(tc.pass+"\n"))))
			if err != nil {
				t.Fatal(err)
			}
			p := newPublisher(t, addr, dlq.PublisherOptions{Security: sec, Timeout: 10 * time.Second})
			l := sampleLetter(tc.user+"-letter", "obj-"+tc.user)
			if err := p.Publish(t.Context(), l); err != nil {
				t.Fatalf("Publish over TLS + %s: %v", tc.mech, err)
			}
			r, err := dlq.NewReader(dlq.ReaderOptions{Brokers: []string{addr}, Security: sec, IdleTimeout: 20 * time.Second, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var got []string
			if _, err := r.List(t.Context(), 0, func(m dlq.Message) error { got = append(got, m.Letter.ID); return m.Err }); err != nil {
				t.Fatalf("List: %v", err)
			}
			if len(got) != i+1 || got[i] != l.ID {
				t.Errorf("List = %v, want %d letters ending with %s", got, i+1, l.ID)
			}
			c, err := r.Replay(t.Context(), dlq.ReplayOptions{Group: "g-" + tc.user}, func(dlq.Letter) error { return nil })
			if err != nil || c.Committed != i+1 {
				t.Errorf("Replay = %+v, %v; want %d committed", c, err, i+1)
			}
		})
	}
}

// A refused password, an untrusted certificate or a plaintext client give
// errors naming the key to fix, at the first publish and in dlq ls.
func TestSecurityErrorsNameTheKey(t *testing.T) {
	ca := testenv.NewCA(t, "baton-kafka")
	addr := startSecureKafka(t, ca)
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.pem", ca.PEM)
	otherCA := writeFile(t, dir, "other.pem", testenv.NewCA(t, "other").PEM)
	wrong := writeFile(t, dir, "wrong", []byte("not-the-password\n"))
	right := writeFile(t, dir, "right", []byte("bob-pw"))
	for _, tc := range []struct {
		name string
		cfg  dlq.SecurityOptions
		want string
	}{
		{"wrong password", secureConfig(caFile, "SCRAM-SHA-256", "bob", wrong),
			`kafka.sasl.password.file: the broker refused the SASL credentials of kafka.sasl.username "bob" (SCRAM-SHA-256)`},
		{"wrong password, PLAIN", secureConfig(caFile, "PLAIN", "alice", wrong),
			`kafka.sasl.password.file: the broker refused the SASL credentials of kafka.sasl.username "alice" (PLAIN)`},
		{"untrusted certificate", secureConfig(otherCA, "SCRAM-SHA-256", "bob", right),
			`kafka.tls.ca.file: the broker's certificate is not trusted`},
		{"wrong server name", func() dlq.SecurityOptions {
			c := secureConfig(caFile, "SCRAM-SHA-256", "bob", right)
			c.ServerName = "kafka.example"
			return c
		}(), `kafka.tls.server.name: the broker's certificate does not carry the expected name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec, err := dlq.NewSecurity(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			p := newPublisher(t, addr, dlq.PublisherOptions{Security: sec, Timeout: 5 * time.Second, MaxAttempts: 1})
			err = p.Publish(t.Context(), sampleLetter("x", "obj"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Publish: %v\nwant an error containing %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "not-the-password") {
				t.Errorf("Publish error shows the password: %v", err)
			}
			r, err := dlq.NewReader(dlq.ReaderOptions{Brokers: []string{addr}, Security: sec, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			_, err = r.List(t.Context(), 0, func(dlq.Message) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("List: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

// Files named by the keys are read by NewSecurity: a missing, empty or
// non-PEM file is an error naming its key, before any connection.
func TestNewSecurityFiles(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, dir, "empty", []byte("\n"))
	notPEM := writeFile(t, dir, "ca.pem", []byte("hello"))
	for _, tc := range []struct {
		name string
		cfg  dlq.SecurityOptions
		want string
	}{
		{"empty password file", secureConfig("", "PLAIN", "u", empty), "dlq: kafka.sasl.password.file: " + empty + " is empty"},
		{"missing password file", secureConfig("", "PLAIN", "u", filepath.Join(dir, "nope")), "dlq: kafka.sasl.password.file: open "},
		{"CA not PEM", secureConfig(notPEM, "", "", ""), "dlq: kafka.tls.ca.file: " + notPEM + " holds no PEM certificate"},
		{"no password", secureConfig("", "SCRAM-SHA-512", "u", ""), "dlq: kafka.sasl.mechanism SCRAM-SHA-512 needs a password: set kafka.sasl.password.file or BATON_KAFKA_SASL_PASSWORD"},
	} {
		if _, err := dlq.NewSecurity(tc.cfg); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want prefix %q", tc.name, err, tc.want)
		}
	}
	var c dlq.SecurityOptions
	if s, err := dlq.NewSecurity(c); err != nil || s.TLS != nil || s.SASL != nil {
		t.Errorf("defaults: %+v, %v; want plaintext without SASL", s, err)
	}
	c.Mechanism, c.Username, c.Password = "PLAIN", "u", "from-env"
	if s, err := dlq.NewSecurity(c); err != nil || s.SASL == nil || s.SASL.Name() != "PLAIN" {
		t.Errorf("password from kafka.sasl.password: %+v, %v", s, err)
	}
}
