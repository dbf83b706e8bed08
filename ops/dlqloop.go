package ops

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/queue"
)

// wakeDLQ tells the publisher loop that an op became dlq_pending.
func (d *Dispatcher) wakeDLQ() {
	select {
	case d.dlqWake <- struct{}{}:
	default:
	}
}

// dlqLoop publishes dlq_pending ops to the dead-letter topic and marks them
// dead_lettered. While Kafka is unreachable the ops stay dlq_pending (they
// are durable) and the loop retries with a backoff capped at dlqBackoffMax;
// new dlq_pending ops then wait for the next try. A first round runs at
// start, for ops an earlier run left dlq_pending.
func (d *Dispatcher) dlqLoop() {
	log := d.log.With("loop", "dlq")
	var delay time.Duration // > 0 while publishing fails
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
				delay = dlqBackoffMin
				log.Warn("publishing dead letters failed; the ops stay dlq_pending and are published when Kafka is back",
					"error", err, "published", n)
			} else {
				log.Debug("publishing dead letters still fails", "error", err, "retry_in", delay)
				delay = min(2*delay, dlqBackoffMax)
			}
			t.Reset(delay)
		}
	}
}

// publishPending publishes every dlq_pending op, oldest per object first:
// each round sends at most one letter per object (the one with the lowest
// seq), so an object's letters reach the topic in order even when a batch
// fails in part. It returns how many it published.
func (d *Dispatcher) publishPending() (int, error) {
	total := 0
	for d.soft.Err() == nil {
		ops, err := d.store.ListDLQPending(d.hard, dlqListLimit)
		if err != nil {
			return total, err
		}
		if len(ops) == 0 {
			return total, nil
		}
		var batch []queue.Op
		size := 0
		for i, op := range ops { // sorted by object, then seq
			if i > 0 && ops[i-1].Object == op.Object {
				continue
			}
			sz := len(op.Payload) + len(op.Info) + 2*len(op.LastError) + 1024
			if len(batch) > 0 && (len(batch) >= dlqBatchLetters || size+sz > dlqBatchBytes) {
				break
			}
			batch = append(batch, op)
			size += sz
		}
		letters := make([]dlq.Letter, len(batch))
		for i, op := range batch {
			letters[i] = d.letter(op)
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
		)
		for i, op := range batch {
			if !ok[i] {
				continue
			}
			wg.Go(func() {
				ctx, cancel := d.storeCtx()
				err := d.store.DeadLettered(ctx, op.ID)
				cancel()
				if err != nil {
					// Published but still dlq_pending: published again later (at least once).
					d.log.Error("recording a published dead letter failed", "op_id", op.ID, "error", err)
					return
				}
				progress.Add(1)
				d.m.dlqPublished.Inc()
				d.m.transition(queue.DeadLettered)
				d.log.Info("op dead-lettered", "op_id", op.ID, "object", op.Object, "attempts", op.Attempts,
					"error_class", op.ErrorClass)
			})
		}
		wg.Wait()
		total += int(progress.Load())
		if perr != nil {
			return total, perr
		}
		if progress.Load() == 0 {
			return total, errors.New("ops: no published dead letter could be recorded")
		}
	}
	return total, nil
}

// letter is the dead letter of a dlq_pending op (SPEC §4).
func (d *Dispatcher) letter(op queue.Op) dlq.Letter {
	return dlq.Letter{
		ID: op.ID, Object: op.Object, Info: op.Info, Payload: op.Payload, Seq: op.Seq,
		AcceptedAt: op.AcceptedAt, Attempts: op.Attempts, LastError: op.LastError,
		ErrorClass: op.ErrorClass, FirstAttemptAt: op.FirstAttemptAt, Sidecar: d.nodeID,
	}
}

// purgeLoop deletes finished ops past queue.retention, at start and every
// purge interval.
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
		select {
		case <-d.soft.Done():
			return
		case <-t.C:
		}
	}
}
