package dlq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/batonhq/baton/internal/tlsfiles"
)

// Security is how the dead-letter clients (publisher, reader, the topic
// limit lookup) reach the brokers: TLS and SASL, both optional. The zero
// value is plaintext without authentication.
type Security struct {
	TLS  *tls.Config    // nil: plaintext
	SASL sasl.Mechanism // nil: no SASL

	passKey string // the setting that gave the password, for errors
	user    string
	state   *saslState // nil without SASL
}

// saslState records whether the latest SASL exchange completed: a broker
// may refuse credentials by closing the connection (kfake does; Kafka
// sends SASLAuthenticationFailed first), which kafka-go reports as an EOF.
type saslState struct{ pending atomic.Bool }

// tracked wraps a mechanism to keep st up to date.
type tracked struct {
	sasl.Mechanism
	st *saslState
}

func (m tracked) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	sm, b, err := m.Mechanism.Start(ctx)
	if err != nil {
		return nil, nil, err
	}
	m.st.pending.Store(true)
	return trackedSM{sm, m.st}, b, nil
}

type trackedSM struct {
	sasl.StateMachine
	st *saslState
}

func (s trackedSM) Next(ctx context.Context, challenge []byte) (bool, []byte, error) {
	done, b, err := s.StateMachine.Next(ctx, challenge)
	if done && err == nil {
		s.st.pending.Store(false)
	}
	return done, b, err
}

// SecurityOptions are the kafka.tls.* and kafka.sasl.* settings of a
// [Security] (the edge maps the properties to them: ops.DLQSecurity).
type SecurityOptions struct {
	TLS        bool   // kafka.tls.enabled; the other TLS fields matter only when it is true
	CAFile     string // kafka.tls.ca.file; empty: the system roots
	CertFile   string // kafka.tls.cert.file (with KeyFile: a client certificate)
	KeyFile    string // kafka.tls.key.file
	ServerName string // kafka.tls.server.name; empty: each broker's host

	Mechanism    string // kafka.sasl.mechanism: "" (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Username     string // kafka.sasl.username
	Password     string // kafka.sasl.password — secret, never in an error
	PasswordFile string // kafka.sasl.password.file; when set, its content is the password
	PasswordEnv  string // the environment variable that sets kafka.sasl.password, named in errors
}

// NewSecurity builds the Security of o: it loads the PEM files and reads
// PasswordFile (one trailing newline is not part of the password). Errors
// name the key at fault and never hold the password.
func NewSecurity(o SecurityOptions) (Security, error) {
	var s Security
	if o.TLS {
		cfg, err := tlsfiles.Files{
			CA: o.CAFile, Cert: o.CertFile, Key: o.KeyFile, ServerName: o.ServerName,
			CAKey: "kafka.tls.ca.file", CertKey: "kafka.tls.cert.file", KeyKey: "kafka.tls.key.file",
			ServerNameKey: "kafka.tls.server.name",
		}.Config()
		if err != nil {
			return Security{}, fmt.Errorf("dlq: %w", err)
		}
		s.TLS = cfg
	}
	if o.Mechanism == "" {
		return s, nil
	}
	if o.Username == "" {
		return Security{}, fmt.Errorf("dlq: kafka.sasl.username is empty: kafka.sasl.mechanism %s needs a user", o.Mechanism)
	}
	pass, passKey := o.Password, "kafka.sasl.password ("+o.PasswordEnv+")"
	if o.PasswordFile != "" {
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return Security{}, fmt.Errorf("dlq: kafka.sasl.password.file: %w", err)
		}
		pass, passKey = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), "kafka.sasl.password.file"
		if pass == "" {
			return Security{}, fmt.Errorf("dlq: kafka.sasl.password.file: %s is empty", o.PasswordFile)
		}
	}
	if pass == "" {
		return Security{}, fmt.Errorf("dlq: kafka.sasl.mechanism %s needs a password: set kafka.sasl.password.file or %s",
			o.Mechanism, o.PasswordEnv)
	}
	s.passKey, s.user = passKey, o.Username
	var err error
	switch o.Mechanism {
	case "PLAIN":
		s.SASL = plain.Mechanism{Username: o.Username, Password: pass}
	case "SCRAM-SHA-256":
		s.SASL, err = scram.Mechanism(scram.SHA256, o.Username, pass)
	case "SCRAM-SHA-512":
		s.SASL, err = scram.Mechanism(scram.SHA512, o.Username, pass)
	default:
		return Security{}, fmt.Errorf("dlq: kafka.sasl.mechanism: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", o.Mechanism)
	}
	if err != nil {
		return Security{}, fmt.Errorf("dlq: kafka.sasl.username / password: %v", err) // scram's error never holds the password
	}
	s.state = &saslState{}
	s.SASL = tracked{s.SASL, s.state}
	return s, nil
}

// explain prefixes err with the setting most likely at fault when it is a
// SASL refusal or a TLS failure; other errors are returned as they are.
func (s Security) explain(err error) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		host      x509.HostnameError
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, kafka.SASLAuthenticationFailed):
		return fmt.Errorf("%s: the broker refused the SASL credentials of kafka.sasl.username %q (%s): %w", s.passKey, s.user, s.SASL.Name(), err)
	case s.state != nil && s.state.pending.Load() && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		return fmt.Errorf("%s: the broker refused the SASL credentials of kafka.sasl.username %q (%s): it closed the connection during authentication: %w",
			s.passKey, s.user, s.SASL.Name(), err)
	case errors.Is(err, kafka.UnsupportedSASLMechanism), errors.Is(err, kafka.IllegalSASLState):
		return fmt.Errorf("kafka.sasl.mechanism: the broker does not accept %s: %w", s.mechName(), err)
	case errors.As(err, &host):
		return fmt.Errorf("kafka.tls.server.name: the broker's certificate does not carry the expected name: %w", err)
	case errors.As(err, &unknownCA), errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Errorf("kafka.tls.ca.file: the broker's certificate is not trusted: %w", err)
	case errors.As(err, &header):
		return fmt.Errorf("kafka.tls.enabled: the broker did not answer TLS (is kafka.brokers its TLS listener?): %w", err)
	}
	return err
}

func (s Security) mechName() string {
	if s.SASL == nil {
		return "no SASL"
	}
	return s.SASL.Name()
}

// transport returns a kafka-go transport using s.
func (s Security) apply(t *kafka.Transport) *kafka.Transport {
	t.TLS, t.SASL = s.TLS, s.SASL
	return t
}
