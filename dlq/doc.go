// Package dlq publishes Baton's dead letters to Kafka and reads them back
// for `baton dlq ls` and `baton dlq replay`, with
// github.com/segmentio/kafka-go.
//
// A dead letter is an op whose retries ran out (or whose failure is
// permanent). [Publisher] writes it synchronously with acks=all: when
// [Publisher.Publish] returns nil the broker has it, and only then may the
// op become dead_lettered; an error leaves the op dlq_pending for a later
// attempt. The message (api/openapi.json, schema DeadLetter):
//
//   - key: the object; the Hash balancer puts one object's letters in one
//     partition, so they keep their order;
//   - value: the [Letter] JSON: id, object, info, payload, seq, accepted_at,
//     attempts, last_error, error_class, first_attempt_at, sidecar (times
//     RFC 3339 UTC with milliseconds), not HTML-escaped; a letter too large
//     for the topic ([Publisher.Limit]) is sent by [Fit] without its payload
//     (payload_elided, payload_bytes, payload_sha256; the sidecar keeps
//     the op, with its payload, until it is replayed or discarded);
//   - headers: baton-op-id, baton-object, baton-error-class,
//     baton-error-message, baton-attempts, baton-sidecar.
//
// Delivery to the topic is at least once: a Publish whose acknowledgement is
// lost is repeated, so a letter may appear twice; the op id identifies it.
//
// [Reader.List] reads the topic from its first offset to its end as it was
// when List started, committing nothing. [Reader.Replay] reads as a consumer
// group and commits each offset only after the callback accepted the letter,
// so a second Replay in the same group resumes at the first letter that was
// not accepted. Run one Replay per group at a time.
package dlq
