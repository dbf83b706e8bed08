package ops

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/queue"
)

// wakeDLQ tells the publisher loop that an op became dlq_pending.
func (d *Dispatcher) wakeDLQ() {
	select {
	case d.dlqWake <- struct{}{}:
	default:
	}
}

// dlqWarnEvery is how often a lasting dead-letter publishing failure is
// logged at WARN again (it is at DEBUG in between).
const dlqWarnEvery = 5 * time.Minute

// dlqLoop publishes dlq_pending ops to the dead-letter topic and marks them
// dead_lettered. While Kafka is unreachable the ops stay dlq_pending (they
// are durable) and the loop retries with a backoff capped at dlqBackoffMax;
// new dlq_pending ops then wait for the next try. A first round runs at
// start, for ops an earlier run left dlq_pending.
func (d *Dispatcher) dlqLoop() {
	log := d.log.With("loop", "dlq")
	var delay time.Duration // > 0 while publishing fails
	var warned time.Time    // when the failure was last logged at WARN
	var since time.Time     // when publishing started failing
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		var wake <-chan struct{}
		if delay == 0 {
			wake = d.dlqWake
		}
		select {
		case <-d.soft.Done():
			return
		case <-wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		case <-t.C:
		}
		n, err := d.publishPending()
		switch {
		case err == nil:
			if delay > 0 {
				log.Info("dead-letter topic reachable again", "published", n)
			}
			delay = 0
			t.Reset(dlqBackstop)
		case d.soft.Err() != nil:
			return
		default:
			if delay == 0 {
				since = time.Now()
			}
			if delay == 0 || time.Since(warned) >= dlqWarnEvery {
				// At WARN once, then every dlqWarnEvery while it lasts.
				log.Warn("publishing dead letters failed; the ops stay dlq_pending and are published when Kafka is back",
					"brokers", d.brokers, "error", err, "published", n, "failing_for", time.Since(since).Round(time.Second))
				warned = time.Now()
			} else {
				log.Debug("publishing dead letters still fails", "brokers", d.brokers, "error", err, "retry_in", delay)
			}
			if delay == 0 {
				delay = dlqBackoffMin
			} else {
				delay = min(2*delay, dlqBackoffMax)
			}
			t.Reset(delay)
		}
	}
}

// publishPending publishes every dlq_pending op and returns how many it
// recorded as dead_lettered. Each round lists up to dlqListLimit ops (whole
// runs of objects, each in seq order), fits each letter to the topic's
// message limit (a letter too large is sent with its payload elided, see
// dlq.Fit) and sends as many as add up to that limit in one PublishBatch
// call: kafka-go then makes one record batch per partition, which the
// broker takes or refuses whole, so an object's letters reach the topic in
// seq order. A letter that cannot be sent in any form is left dlq_pending
// (logged) without holding back other objects' letters.
//
// A letter Kafka acknowledged whose record failed (a disk fault) is
// remembered: later rounds retry only the record, they do not publish it
// again. Only a restart forgets it (it is then published once more: at
// least once).
func (d *Dispatcher) publishPending() (int, error) {
	total := 0
	for d.soft.Err() == nil {
		n, err := d.recordAcked()
		total += n
		if err != nil {
			return total, err
		}
		ops, err := d.store.ListDLQPending(d.hard, dlqListLimit)
		if err != nil {
			return total, err
		}
		if len(ops) == 0 {
			return total, nil
		}
		limit := d.pub.Limit(d.hard)
		var (
			batch   []queue.Op
			letters []dlq.Letter
			size    int
			skip    map[string]bool // objects with a letter that cannot be sent: keep their order
		)
		for _, op := range ops {
			if skip[op.Object] || d.isAcked(op.ID) {
				continue
			}
			l, m, ferr := dlq.Fit(d.letter(op), limit)
			if ferr != nil {
				if skip == nil {
					skip = map[string]bool{}
				}
				skip[op.Object] = true
				d.warnUnsendable(op, ferr)
				continue
			}
			sz := dlq.MessageSize(m)
			if len(batch) > 0 && (len(batch) >= dlqBatchLetters || size+sz > limit) {
				break
			}
			batch, letters, size = append(batch, op), append(letters, l), size+sz
		}
		if len(batch) == 0 {
			return total, errors.New("ops: no dlq_pending op can be published (see the errors logged for each)")
		}
		perr := d.pub.PublishBatch(d.hard, letters)
		ok := make([]bool, len(batch))
		if be, isBatch := errors.AsType[*dlq.BatchError](perr); isBatch {
			for i, e := range be.Errs {
				ok[i] = e == nil
			}
		} else if perr == nil {
			for i := range ok {
				ok[i] = true
			}
		}
		// Record the published ones concurrently: their commits share fsyncs.
		var (
			wg       sync.WaitGroup
			progress atomic.Int64
			recErr   atomic.Value
		)
		for i, op := range batch {
			if !ok[i] {
				continue
			}
			note := ""
			if l := letters[i]; l.Elided {
				note = fmt.Sprintf("%s (%d bytes, sha256 %s): too large for the topic's %d-byte message limit; this sidecar keeps the only whole copy, past "+
					"queue.retention, until it is replayed by id (baton ops replay %s) or discarded (baton ops discard %s)",
					queue.ElidedNotePrefix, l.PayloadBytes, l.PayloadSHA256, limit, op.ID, op.ID)
				d.m.dlqElided.Inc()
				d.log.Warn("dead letter too large for the topic: published without its payload; the op is kept until replayed or discarded", "op_id", op.ID,
					"object", op.Object, "payload_bytes", l.PayloadBytes, "payload_sha256", l.PayloadSHA256, "limit", limit)
			}
			d.setAcked(op, note)
			wg.Go(func() {
				if err := d.recordDeadLettered(op, note); err != nil {
					recErr.Store(err)
					return
				}
				progress.Add(1)
			})
		}
		wg.Wait()
		total += int(progress.Load())
		if perr != nil {
			return total, perr
		}
		if err, _ := recErr.Load().(error); err != nil {
			return total, fmt.Errorf("ops: recording published dead letters: %w", err)
		}
	}
	return total, nil
}

// ackedLetter is a letter Kafka acknowledged whose dead_lettered record is
// still to be written. A non-empty note means the letter went out without
// its payload (the op is then kept: queue.Store.DeadLetteredKept).
type ackedLetter struct {
	op   queue.Op
	note string
}

func (d *Dispatcher) isAcked(id string) bool {
	d.ackMu.Lock()
	defer d.ackMu.Unlock()
	_, ok := d.acked[id]
	return ok
}

func (d *Dispatcher) setAcked(op queue.Op, note string) {
	d.ackMu.Lock()
	defer d.ackMu.Unlock()
	if d.acked == nil {
		d.acked = map[string]ackedLetter{}
	}
	op.Payload = nil
	d.acked[op.ID] = ackedLetter{op: op, note: note}
}

// recordDeadLettered records a published letter; the op is forgotten as
// acknowledged once recorded (or once it is no longer dlq_pending).
func (d *Dispatcher) recordDeadLettered(op queue.Op, note string) error {
	ctx, cancel := d.storeCtx()
	var err error
	if note != "" {
		err = d.store.DeadLetteredKept(ctx, op.ID, note)
	} else {
		err = d.store.DeadLettered(ctx, op.ID, note)
	}
	cancel()
	if err != nil && !errors.Is(err, queue.ErrState) && !errors.Is(err, queue.ErrNotFound) {
		// Published but still dlq_pending: only the record is retried.
		d.log.Error("recording a published dead letter failed; retrying the record (the letter is not published again)",
			"op_id", op.ID, "error", err)
		return err
	}
	d.ackMu.Lock()
	delete(d.acked, op.ID)
	d.ackMu.Unlock()
	if err != nil {
		d.log.Warn("a published dead letter's op is no longer dlq_pending", "op_id", op.ID, "error", err)
		return nil
	}
	d.m.dlqPublished.Inc()
	d.m.transition(queue.DeadLettered)
	d.log.Info("op dead-lettered", "op_id", op.ID, "object", op.Object, "attempts", op.Attempts,
		"error_class", op.ErrorClass)
	return nil
}

// recordAcked retries the records of acknowledged letters. It returns how
// many it recorded and an error if any record still fails.
func (d *Dispatcher) recordAcked() (int, error) {
	d.ackMu.Lock()
	pending := make([]ackedLetter, 0, len(d.acked))
	for _, a := range d.acked {
		pending = append(pending, a)
	}
	d.ackMu.Unlock()
	if len(pending) == 0 {
		return 0, nil
	}
	var (
		wg     sync.WaitGroup
		n      atomic.Int64
		recErr atomic.Value
	)
	for _, a := range pending {
		wg.Go(func() {
			if err := d.recordDeadLettered(a.op, a.note); err != nil {
				recErr.Store(err)
				return
			}
			n.Add(1)
		})
	}
	wg.Wait()
	if err, _ := recErr.Load().(error); err != nil {
		return int(n.Load()), fmt.Errorf("ops: recording published dead letters: %w", err)
	}
	return int(n.Load()), nil
}

// warnUnsendable logs, once per op, a letter that cannot be sent in any form.
func (d *Dispatcher) warnUnsendable(op queue.Op, err error) {
	d.ackMu.Lock()
	if d.unsendable == nil {
		d.unsendable = map[string]bool{}
	}
	seen := d.unsendable[op.ID]
	d.unsendable[op.ID] = true
	d.ackMu.Unlock()
	if !seen {
		d.log.Error("dead letter cannot be published in any form; the op stays dlq_pending (its object's later letters wait behind it)",
			"op_id", op.ID, "object", op.Object, "error", err)
	}
}

// letter is the dead letter of a dlq_pending op (api/openapi.json, schema DeadLetter).
func (d *Dispatcher) letter(op queue.Op) dlq.Letter {
	return dlq.Letter{
		ID: op.ID, Object: op.Object, Info: op.Info, Payload: op.Payload, Seq: op.Seq,
		AcceptedAt: api.NewTime(op.AcceptedAt), Attempts: op.Attempts, LastError: op.LastError,
		ErrorClass: op.ErrorClass, FirstAttemptAt: api.NewTime(op.FirstAttemptAt), Sidecar: d.nodeID,
	}
}

// purgeLoop deletes finished ops past queue.retention, at start and every
// purge interval, then lets the queue compact its file if it is mostly free
// (queue.Store.Compact).
func (d *Dispatcher) purgeLoop() {
	t := time.NewTicker(d.purgeIv)
	defer t.Stop()
	for {
		for {
			n, err := d.store.Purge(d.soft, time.Now())
			if err != nil {
				if d.soft.Err() == nil {
					d.log.Error("purging finished ops failed", "error", err)
				}
				break
			}
			if n < queue.DefaultPurgeLimit {
				break
			}
		}
		_, _ = d.store.Compact() // logs what it did or why it failed
		select {
		case <-d.soft.Done():
			return
		case <-t.C:
		}
	}
}

// DLQSecurity maps the kafka.tls.* and kafka.sasl.* properties to the
// options of the dead-letter clients' [dlq.Security]: the one place where
// they become dlq settings (the dispatcher's publisher and `baton dlq`).
func DLQSecurity(cfg props.Config) dlq.SecurityOptions {
	return dlq.SecurityOptions{
		TLS:          cfg.KafkaTLSEnabled == "true",
		CAFile:       cfg.KafkaTLSCAFile,
		CertFile:     cfg.KafkaTLSCertFile,
		KeyFile:      cfg.KafkaTLSKeyFile,
		ServerName:   cfg.KafkaTLSServerName,
		Mechanism:    cfg.KafkaSASLMechanism,
		Username:     cfg.KafkaSASLUsername,
		Password:     cfg.KafkaSASLPassword,
		PasswordFile: cfg.KafkaSASLPasswordFile,
		PasswordEnv:  props.EnvName("kafka.sasl.password"),
	}
}
