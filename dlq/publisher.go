package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// DefaultTopic is kafka.dlq.topic's default.
const DefaultTopic = "MdmDeadLetterQueue"

// PublisherOptions configures a Publisher. A zero field means its
// documented default.
type PublisherOptions struct {
	// Brokers is the bootstrap list (kafka.brokers). Required.
	Brokers []string
	// Topic is the dead-letter topic (kafka.dlq.topic). Default
	// "MdmDeadLetterQueue". It must exist: Baton does not create it.
	Topic string
	// BatchTimeout is how long a write waits for others to share its
	// produce request. Default 5ms (kafka-go's 1s default would make every
	// synchronous publish take a second).
	BatchTimeout time.Duration
	// Timeout bounds one Publish or PublishBatch call, retries included.
	// Default 10s.
	Timeout time.Duration
	// DialTimeout bounds connecting to a broker. Default 5s.
	DialTimeout time.Duration
	// MaxAttempts is how many times kafka-go tries one produce before
	// giving up. Default 3 (the op stays dlq_pending and is published
	// later anyway).
	MaxAttempts int
	// MaxMessageBytes bounds one message (and one produce batch per
	// partition) from our side; the topic's max.message.bytes, read from
	// the broker, lowers it. Default 1048576 (kafka-go's BatchBytes
	// default and Kafka's message.max.bytes default less the batch header).
	MaxMessageBytes int
	// Logger receives kafka-go's messages at debug level and its errors at
	// warn level. Nil discards.
	Logger *slog.Logger
	// Security is TLS and SASL (see [NewSecurity]); zero = plaintext.
	Security Security
}

// Publisher writes dead letters. It is safe for concurrent use; concurrent
// Publish calls share produce requests.
type Publisher struct {
	w       *kafka.Writer
	t       *kafka.Transport
	client  *kafka.Client
	timeout time.Duration
	topic   string
	max     int
	log     *slog.Logger
	sec     Security

	mu      sync.Mutex
	limit   int       // last limit learnt from the broker (0: none yet)
	limitAt time.Time // when it was learnt
}

// limitTTL is how long a topic limit read from the broker is used before it
// is read again.
const limitTTL = time.Minute

// NewPublisher returns a Publisher; it does not connect until the first
// Publish.
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("dlq: kafka.brokers is empty")
	}
	for _, n := range []struct {
		name string
		v    time.Duration
	}{{"BatchTimeout", opts.BatchTimeout}, {"Timeout", opts.Timeout}, {"DialTimeout", opts.DialTimeout}} {
		if n.v < 0 {
			return nil, fmt.Errorf("dlq: PublisherOptions.%s must not be negative", n.name)
		}
	}
	if opts.MaxAttempts < 0 {
		return nil, errors.New("dlq: PublisherOptions.MaxAttempts must not be negative")
	}
	if opts.MaxMessageBytes < 0 {
		return nil, errors.New("dlq: PublisherOptions.MaxMessageBytes must not be negative")
	}
	defaultTo(&opts.MaxMessageBytes, DefaultMaxMessageBytes)
	defaultTo(&opts.Topic, DefaultTopic)
	defaultTo(&opts.BatchTimeout, 5*time.Millisecond)
	defaultTo(&opts.Timeout, 10*time.Second)
	defaultTo(&opts.DialTimeout, 5*time.Second)
	defaultTo(&opts.MaxAttempts, 3)
	defaultTo(&opts.Logger, slog.New(slog.DiscardHandler))
	log := opts.Logger.With("component", "dlq", "topic", opts.Topic)
	t := opts.Security.apply(&kafka.Transport{
		Dial:        (&net.Dialer{Timeout: opts.DialTimeout}).DialContext,
		DialTimeout: opts.DialTimeout,
		IdleTimeout: 30 * time.Second,
		MetadataTTL: 6 * time.Second,
	})
	w := &kafka.Writer{
		Addr:            kafka.TCP(opts.Brokers...),
		Topic:           opts.Topic,
		Balancer:        &kafka.Hash{}, // key = object: one object's letters stay in one partition, in order
		RequiredAcks:    kafka.RequireAll,
		Async:           false,
		BatchTimeout:    opts.BatchTimeout,
		WriteTimeout:    opts.Timeout,
		ReadTimeout:     opts.Timeout,
		MaxAttempts:     opts.MaxAttempts,
		BatchBytes:      int64(opts.MaxMessageBytes),
		WriteBackoffMin: 100 * time.Millisecond,
		WriteBackoffMax: time.Second,
		Transport:       t,
		Logger:          slogPrintf(log, slog.LevelDebug),
		ErrorLogger:     slogPrintf(log, slog.LevelWarn),
	}
	return &Publisher{
		w: w, t: t, timeout: opts.Timeout, topic: opts.Topic, max: opts.MaxMessageBytes, log: log, sec: opts.Security,
		client: &kafka.Client{Addr: kafka.TCP(opts.Brokers...), Timeout: opts.DialTimeout, Transport: t},
	}, nil
}

// DefaultMaxMessageBytes is PublisherOptions.MaxMessageBytes' default.
const DefaultMaxMessageBytes = 1 << 20

// Limit returns the largest message ([MessageSize]) the publisher sends
// now: MaxMessageBytes, lowered to the topic's max.message.bytes as the
// broker describes it (read at most once a minute; when the broker cannot
// be asked, the last value read, else MaxMessageBytes). A produce batch per
// partition stays within it too when the letters of one PublishBatch call
// add up to no more than it.
func (p *Publisher) Limit(ctx context.Context) int {
	p.mu.Lock()
	limit, at := p.limit, p.limitAt
	p.mu.Unlock()
	if limit > 0 && time.Since(at) < limitTTL {
		return limit
	}
	n, err := p.topicLimit(ctx)
	if err != nil {
		p.log.Debug("reading the topic's max.message.bytes failed", "error", err)
		if limit > 0 {
			return limit
		}
		return p.max
	}
	limit = min(p.max, n)
	p.mu.Lock()
	p.limit, p.limitAt = limit, time.Now()
	p.mu.Unlock()
	return limit
}

// minLimit is the lowest limit lower ever sets.
const minLimit = 4 << 10

// lower records that the broker refused a produce of total bytes as too
// large: the limit is taken below it for limitTTL, whatever the broker
// describes (it may not describe the topic at all: no DescribeConfigs
// permission). Rounds then get smaller and a letter larger than the real
// limit gets elided (see Fit) instead of being refused again.
func (p *Publisher) lower(total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.limit
	if cur == 0 || time.Since(p.limitAt) >= limitTTL {
		cur = p.max
	}
	p.limit, p.limitAt = max(min(cur, total-1), minLimit), time.Now()
	p.log.Warn("the broker refused dead letters as too large; sending smaller rounds", "refused_bytes", total, "limit", p.limit)
}

// topicLimit asks the broker for the topic's max.message.bytes (the
// broker's message.max.bytes unless the topic overrides it).
func (p *Publisher) topicLimit(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, min(p.timeout, 5*time.Second))
	defer cancel()
	res, err := p.client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{
		Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: p.topic, ConfigNames: []string{"max.message.bytes"},
		}},
	})
	if err != nil {
		return 0, p.sec.explain(err)
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			return 0, r.Error
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "max.message.bytes" {
				n, err := strconv.Atoi(e.ConfigValue)
				if err != nil || n <= 0 {
					return 0, fmt.Errorf("max.message.bytes of %s is %q", p.topic, e.ConfigValue)
				}
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("the broker did not describe max.message.bytes of %s", p.topic)
}

// Publish writes one letter and returns once all in-sync replicas have it
// (nil), or an error within Timeout. After an error the letter may or may
// not have been written: publish it again later (at least once).
func (p *Publisher) Publish(ctx context.Context, l Letter) error {
	m, err := l.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := p.w.WriteMessages(ctx, m); err != nil {
		var we kafka.WriteErrors
		if errors.As(err, &we) && len(we) == 1 && we[0] != nil {
			err = we[0]
		}
		return fmt.Errorf("dlq: publish %q to %s: %w", l.ID, p.topic, p.sec.explain(err))
	}
	return nil
}

// BatchError reports which letters of a PublishBatch failed: Errs[i] is the
// error of letters[i], nil if it was written.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("dlq: %d of %d letters not published: %v", n, len(e.Errs), first)
}

func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// PublishBatch writes letters in one call (for a backlog of dlq_pending
// ops, in per-object order). It returns nil when all were written; a
// *BatchError says which were not; any other error means none may be
// assumed written.
func (p *Publisher) PublishBatch(ctx context.Context, letters []Letter) error {
	msgs := make([]kafka.Message, len(letters))
	for i, l := range letters {
		m, err := l.Encode()
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	total := 0
	for _, m := range msgs {
		total += MessageSize(m)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	err := p.w.WriteMessages(ctx, msgs...)
	var we kafka.WriteErrors
	if errors.As(err, &we) && len(we) == len(letters) {
		for _, e := range we {
			if errors.Is(e, kafka.MessageSizeTooLarge) {
				p.lower(total)
				break
			}
		}
		for i, e := range we {
			we[i] = p.sec.explain(e)
		}
		return &BatchError{Errs: we}
	}
	if errors.Is(err, kafka.MessageSizeTooLarge) {
		p.lower(total)
	}
	var tl kafka.MessageTooLargeError
	if errors.As(err, &tl) {
		// kafka-go refused one message before sending anything.
		p.lower(MessageSize(tl.Message) + 1)
		errs := make([]error, len(letters))
		for i, m := range msgs {
			errs[i] = fmt.Errorf("dlq: not sent: letter %q is too large (%d bytes, limit %d)", letters[i].ID, MessageSize(m), p.max)
			if MessageSize(m) <= p.max {
				errs[i] = fmt.Errorf("dlq: not sent: another letter of the batch was too large: %w", err)
			}
		}
		return &BatchError{Errs: errs}
	}
	if err != nil {
		return fmt.Errorf("dlq: publish %d letters to %s: %w", len(letters), p.topic, p.sec.explain(err))
	}
	return nil
}

// Close flushes and closes the writer and its connections; it waits for
// writes in progress (each bounded by MaxAttempts × Timeout).
func (p *Publisher) Close() error {
	err := p.w.Close()
	p.t.CloseIdleConnections()
	return err
}

// slogPrintf adapts kafka-go's Printf logger to slog.
func slogPrintf(log *slog.Logger, level slog.Level) kafka.LoggerFunc {
	return func(format string, args ...any) {
		if log.Enabled(context.Background(), level) {
			log.Log(context.Background(), level, fmt.Sprintf(format, args...))
		}
	}
}

// defaultTo sets *v to def when it is the zero value: an option's
// documented default.
func defaultTo[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
