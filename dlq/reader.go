package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// DefaultGroup is the consumer group of Replay when none is given.
const DefaultGroup = "baton-dlq-replay"

// ReaderOptions configures a Reader. A zero field means its documented
// default.
type ReaderOptions struct {
	// Brokers is the bootstrap list (kafka.brokers). Required.
	Brokers []string
	// Topic is the dead-letter topic. Default "MdmDeadLetterQueue".
	Topic string
	// Timeout bounds each metadata, offset and commit request. Default 10s.
	Timeout time.Duration
	// IdleTimeout bounds the wait for the next message while reading up to
	// the end the topic had at start (it includes joining the consumer
	// group). Reaching it is an error naming the offset. Default 30s.
	IdleTimeout time.Duration
	// MaxWait is the broker's wait for new data in one fetch. Default 500ms.
	MaxWait time.Duration
	// Logger receives kafka-go's messages at debug level and its errors at
	// warn level. Nil discards.
	Logger *slog.Logger
	// Security is TLS and SASL (see [NewSecurity]); zero = plaintext.
	Security Security
}

// Reader reads dead letters. Each List or Replay call uses its own
// kafka-go readers; a Reader may be used concurrently, but run at most one
// Replay per group at a time.
type Reader struct {
	opts      ReaderOptions
	client    *kafka.Client
	transport *kafka.Transport
	log       *slog.Logger
}

// NewReader returns a Reader; it does not connect until used.
func NewReader(opts ReaderOptions) (*Reader, error) {
	if len(opts.Brokers) == 0 {
		return nil, errors.New("dlq: kafka.brokers is empty")
	}
	if opts.Timeout < 0 || opts.IdleTimeout < 0 || opts.MaxWait < 0 {
		return nil, errors.New("dlq: ReaderOptions durations must not be negative")
	}
	defaultTo(&opts.Topic, DefaultTopic)
	defaultTo(&opts.Timeout, 10*time.Second)
	defaultTo(&opts.IdleTimeout, 30*time.Second)
	defaultTo(&opts.MaxWait, 500*time.Millisecond)
	defaultTo(&opts.Logger, slog.New(slog.DiscardHandler))
	t := opts.Security.apply(&kafka.Transport{
		Dial:        (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		DialTimeout: opts.Timeout,
		IdleTimeout: 30 * time.Second,
	})
	return &Reader{
		opts:      opts,
		client:    &kafka.Client{Addr: kafka.TCP(opts.Brokers...), Timeout: opts.Timeout, Transport: t},
		transport: t,
		log:       opts.Logger.With("component", "dlq", "topic", opts.Topic),
	}, nil
}

// Close releases idle connections.
func (r *Reader) Close() error {
	r.transport.CloseIdleConnections()
	return nil
}

// Message is one message of the dead-letter topic as read by List.
type Message struct {
	Letter    Letter // valid when Err is nil
	Err       error  // a *DecodeError if the message is not a valid dead letter
	Partition int
	Offset    int64
	Time      time.Time
	Raw       kafka.Message
}

// span is a partition's [first, end) offsets.
type span struct{ first, end int64 }

// spans returns the partitions of the topic with their first offset and end
// (high watermark) now.
func (r *Reader) spans(ctx context.Context) (map[int]span, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	md, err := r.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{r.opts.Topic}})
	if err != nil {
		return nil, fmt.Errorf("dlq: metadata of %s: %w", r.opts.Topic, err)
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != r.opts.Topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("dlq: topic %s: %w", r.opts.Topic, t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("dlq: topic %s: %w", r.opts.Topic, kafka.UnknownTopicOrPartition)
	}
	lo, err := r.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{r.opts.Topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("dlq: offsets of %s: %w", r.opts.Topic, err)
	}
	out := map[int]span{}
	for _, po := range lo.Topics[r.opts.Topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("dlq: offsets of %s/%d: %w", r.opts.Topic, po.Partition, po.Error)
		}
		out[po.Partition] = span{first: po.FirstOffset, end: po.LastOffset}
	}
	return out, nil
}

// fetch reads the next message, failing after IdleTimeout without one.
func (r *Reader) fetch(ctx context.Context, rd *kafka.Reader, wait string) (kafka.Message, error) {
	fctx, cancel := context.WithTimeout(ctx, r.opts.IdleTimeout)
	defer cancel()
	m, err := rd.FetchMessage(fctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return m, fmt.Errorf("dlq: no message within %v while waiting for %s", r.opts.IdleTimeout, wait)
	}
	return m, err
}

func (r *Reader) config() kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers:     r.opts.Brokers,
		Topic:       r.opts.Topic,
		MinBytes:    1,
		MaxBytes:    16 << 20,
		MaxWait:     r.opts.MaxWait,
		Dialer:      &kafka.Dialer{Timeout: r.opts.Timeout, TLS: r.opts.Security.TLS, SASLMechanism: r.opts.Security.SASL},
		Logger:      slogPrintf(r.log, slog.LevelDebug),
		ErrorLogger: slogPrintf(r.log, slog.LevelWarn),
	}
}

// List calls fn for every message from the first offset of each partition
// to the end the partition had when List started (partitions in order),
// at most max messages (all if max ≤ 0). It commits nothing and joins no
// consumer group. It stops at fn's first error and returns it. It returns
// how many messages fn was called for.
func (r *Reader) List(ctx context.Context, max int, fn func(Message) error) (int, error) {
	n, err := r.list(ctx, max, fn)
	return n, r.opts.Security.explain(err)
}

func (r *Reader) list(ctx context.Context, max int, fn func(Message) error) (int, error) {
	spans, err := r.spans(ctx)
	if err != nil {
		return 0, err
	}
	parts := slices.Sorted(func(yield func(int) bool) {
		for p := range spans {
			if !yield(p) {
				return
			}
		}
	})
	n := 0
	for _, p := range parts {
		sp := spans[p]
		if sp.first >= sp.end {
			continue
		}
		cfg := r.config()
		cfg.Partition = p
		rd := kafka.NewReader(cfg)
		err := func() error {
			defer rd.Close()
			if err := rd.SetOffset(sp.first); err != nil {
				return err
			}
			for off := sp.first; off < sp.end; {
				if max > 0 && n >= max {
					return nil
				}
				m, err := r.fetch(ctx, rd, fmt.Sprintf("%s/%d offset %d (end %d)", r.opts.Topic, p, off, sp.end))
				if err != nil {
					return err
				}
				off = m.Offset + 1
				if m.Offset >= sp.end {
					return nil
				}
				msg := Message{Partition: m.Partition, Offset: m.Offset, Time: m.Time, Raw: m}
				msg.Letter, msg.Err = Decode(m)
				n++
				if err := fn(msg); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			return n, err
		}
		if max > 0 && n >= max {
			break
		}
	}
	return n, nil
}

// ReplayOptions selects what Replay does.
type ReplayOptions struct {
	// Group is the consumer group whose committed offsets mark what was
	// replayed. Default "baton-dlq-replay".
	Group string
	// Object, if set, passes only this object's letters to fn and commits
	// nothing (a later unfiltered replay still sees every letter).
	Object string
	// DryRun passes letters to fn but commits nothing.
	DryRun bool
	// Follow keeps reading new letters until ctx ends; otherwise Replay
	// stops at the end the topic had when it started.
	Follow bool
}

// Counts says what a Replay did.
type Counts struct {
	Read      int // messages read
	Replayed  int // letters fn accepted
	Skipped   int // letters of other objects (ReplayOptions.Object)
	Committed int // offsets committed
	Failed    int // 1 if Replay stopped at a letter (refused or invalid), else 0
}

// Replay reads the topic as consumer group ro.Group, from the group's
// committed offsets (the first offset for a new group), and calls fn for
// each letter in partition order. After fn returns nil it commits that
// letter's offset (unless DryRun or Object is set); at fn's first error it
// stops without committing that letter, so the next Replay in the group
// resumes there. A message that is not a valid dead letter also stops it
// (a *DecodeError). Without Follow it returns once every partition reached
// the end it had at start; with Follow it returns nil when ctx ends.
func (r *Reader) Replay(ctx context.Context, ro ReplayOptions, fn func(Letter) error) (Counts, error) {
	c, err := r.replay(ctx, ro, fn)
	return c, r.opts.Security.explain(err)
}

// replay is Replay without the explanation of a TLS or SASL error: it reads
// the partitions' spans and the group's committed offsets, then each
// partition's letters from there, calling fn and committing as Replay says.
func (r *Reader) replay(ctx context.Context, ro ReplayOptions, fn func(Letter) error) (Counts, error) {
	var c Counts
	if ro.Group == "" {
		ro.Group = DefaultGroup
	}
	spans, err := r.spans(ctx)
	if err != nil {
		return c, err
	}
	// Partitions still to read up to their end (not used with Follow).
	remaining := map[int]span{}
	if !ro.Follow {
		committed, err := r.committed(ctx, ro.Group, spans)
		if err != nil {
			return c, err
		}
		for p, sp := range spans {
			if max(committed[p], sp.first) < sp.end {
				remaining[p] = sp
			}
		}
		if len(remaining) == 0 {
			return c, nil
		}
	}
	cfg := r.config()
	cfg.GroupID = ro.Group
	cfg.StartOffset = kafka.FirstOffset
	cfg.CommitInterval = 0 // CommitMessages commits synchronously
	cfg.HeartbeatInterval = time.Second
	cfg.SessionTimeout = 10 * time.Second
	cfg.RebalanceTimeout = 10 * time.Second
	cfg.JoinGroupBackoff = time.Second
	rd := kafka.NewReader(cfg)
	defer rd.Close()
	for ro.Follow || len(remaining) > 0 {
		var m kafka.Message
		if ro.Follow {
			m, err = rd.FetchMessage(ctx)
			if err != nil && ctx.Err() != nil {
				return c, nil
			}
		} else {
			m, err = r.fetch(ctx, rd, fmt.Sprintf("the end of %s for group %s", r.opts.Topic, ro.Group))
		}
		if err != nil {
			return c, fmt.Errorf("dlq: replay from %s: %w", r.opts.Topic, err)
		}
		sp, open := remaining[m.Partition]
		if !ro.Follow && (!open || m.Offset >= sp.end) {
			delete(remaining, m.Partition) // past the end it had at start: leave for the next run
			continue
		}
		c.Read++
		l, err := Decode(m)
		if err != nil {
			c.Failed++
			return c, err
		}
		if ro.Object != "" && l.Object != ro.Object {
			c.Skipped++
		} else {
			if err := fn(l); err != nil {
				c.Failed++
				return c, fmt.Errorf("dlq: letter %q at %s/%d@%d not replayed: %w", l.ID, m.Topic, m.Partition, m.Offset, err)
			}
			c.Replayed++
			if !ro.DryRun && ro.Object == "" {
				// The letter was replayed: record it even if ctx just ended.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.Timeout)
				err := rd.CommitMessages(cctx, m)
				cancel()
				if err != nil {
					return c, fmt.Errorf("dlq: commit %s/%d@%d for group %s: %w", m.Topic, m.Partition, m.Offset, ro.Group, err)
				}
				c.Committed++
			}
		}
		if !ro.Follow && m.Offset >= sp.end-1 {
			delete(remaining, m.Partition)
		}
	}
	return c, nil
}

// Committed returns the group's committed offset per partition of the
// topic (-1 if none): the next offset a Replay in that group reads, so a
// message at a lower offset was handled by it.
func (r *Reader) Committed(ctx context.Context, group string) (map[int]int64, error) {
	spans, err := r.spans(ctx)
	if err != nil {
		return nil, r.opts.Security.explain(err)
	}
	m, err := r.committed(ctx, group, spans)
	return m, r.opts.Security.explain(err)
}

// committed returns the group's committed offset per partition (-1 if
// none).
func (r *Reader) committed(ctx context.Context, group string, spans map[int]span) (map[int]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	parts := make([]int, 0, len(spans))
	for p := range spans {
		parts = append(parts, p)
	}
	res, err := r.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{r.opts.Topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("dlq: committed offsets of group %s: %w", group, err)
	}
	out := map[int]int64{}
	for _, p := range parts {
		out[p] = -1
	}
	if errors.Is(res.Error, kafka.GroupIdNotFound) {
		return out, nil // a new group: nothing committed
	}
	if res.Error != nil {
		return nil, fmt.Errorf("dlq: committed offsets of group %s: %w", group, res.Error)
	}
	for _, po := range res.Topics[r.opts.Topic] {
		if errors.Is(po.Error, kafka.GroupIdNotFound) {
			continue
		}
		if po.Error != nil {
			return nil, fmt.Errorf("dlq: committed offset of group %s on %s/%d: %w", group, r.opts.Topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.CommittedOffset
	}
	return out, nil
}
