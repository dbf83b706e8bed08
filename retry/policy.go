package retry

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults of the retry properties (README, Properties).
const (
	DefaultInitialInterval = 500 * time.Millisecond // retry.initial.interval
	DefaultMaxInterval     = 30 * time.Second       // retry.max.interval
	DefaultMultiplier      = 2.0                    // retry.multiplier
	DefaultRandomization   = 0.5                    // retry.randomization
	DefaultMaxRetries      = 5                      // elastic.request.retry.count
)

// Policy is an exponential backoff schedule with a retry limit.
//
// Unlike most option structs in Baton, every field is taken literally (zero
// randomization and zero retries are meaningful values): start from
// [DefaultPolicy] and override, or fill every field from the configuration.
// [Policy.Validate] reports a bad value naming its property.
//
// A Policy is a value; its methods are safe for concurrent use as long as
// Rand is (the default is).
type Policy struct {
	// InitialInterval is the delay before the second attempt, before jitter
	// (retry.initial.interval). Must be > 0.
	InitialInterval time.Duration
	// MaxInterval caps the delay before jitter (retry.max.interval).
	// Must be ≥ InitialInterval.
	MaxInterval time.Duration
	// Multiplier is the growth of the delay per failed attempt
	// (retry.multiplier). Must be ≥ 1.
	Multiplier float64
	// Randomization is the jitter factor r (retry.randomization): a delay d
	// becomes a uniformly random value in [d(1-r), d(1+r)]. Must be in [0, 1].
	Randomization float64
	// MaxRetries is the number of retries after the first attempt
	// (elastic.request.retry.count): 5 means up to 6 attempts. Must be ≥ 0.
	MaxRetries int
	// Rand returns a uniformly random float in [0, 1) for the jitter. It must
	// be safe for concurrent use if the Policy is shared. Nil means
	// math/rand/v2's Float64.
	Rand func() float64
}

// DefaultPolicy returns the policy of the default properties: 500 ms initial,
// 30 s max, ×2.0, ±50 % jitter, 5 retries.
func DefaultPolicy() Policy {
	return Policy{
		InitialInterval: DefaultInitialInterval,
		MaxInterval:     DefaultMaxInterval,
		Multiplier:      DefaultMultiplier,
		Randomization:   DefaultRandomization,
		MaxRetries:      DefaultMaxRetries,
	}
}

// FieldError reports an invalid Policy field. Field is the property name
// (e.g. "retry.multiplier").
type FieldError struct {
	Field  string
	Value  any
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("retry: %s: %v %s", e.Field, e.Value, e.Reason)
}

// Validate reports the first invalid field as a [*FieldError].
func (p Policy) Validate() error {
	switch {
	case p.InitialInterval <= 0:
		return &FieldError{"retry.initial.interval", p.InitialInterval, "must be greater than 0"}
	case p.MaxInterval < p.InitialInterval:
		return &FieldError{"retry.max.interval", p.MaxInterval, fmt.Sprintf("must be at least retry.initial.interval (%v)", p.InitialInterval)}
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier < 1:
		return &FieldError{"retry.multiplier", p.Multiplier, "must be a number ≥ 1"}
	case math.IsNaN(p.Randomization) || p.Randomization < 0 || p.Randomization > 1:
		return &FieldError{"retry.randomization", p.Randomization, "must be between 0 and 1"}
	case p.MaxRetries < 0:
		return &FieldError{"elastic.request.retry.count", p.MaxRetries, "must be 0 or more"}
	}
	return nil
}

// BackOff returns a fresh cenkalti/backoff ExponentialBackOff with this
// policy's parameters, already Reset, for in-memory retry loops
// (backoff.Retry). Its MaxElapsedTime is 0: it never stops on its own; wrap it
// in backoff.WithMaxRetries to bound it (see [Policy.Retry]). Its jitter uses
// the backoff package's own random source, not Rand.
func (p Policy) BackOff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.InitialInterval,
		RandomizationFactor: p.Randomization,
		Multiplier:          p.Multiplier,
		MaxInterval:         p.MaxInterval,
		MaxElapsedTime:      0, // only the retry count ends retries
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	return b
}

// Base returns the delay before attempt attempts+1 without jitter:
// InitialInterval × Multiplier^(attempts-1), capped at MaxInterval. It is 0
// for attempts ≤ 0 (the first attempt starts at once).
//
// It steps a backoff.ExponentialBackOff (jitter 0) exactly as a backoff.Retry
// loop would, stopping early once the cap is reached, so it costs at most
// O(log(Max/Initial)) steps whatever attempts is.
func (p Policy) Base(attempts int) time.Duration {
	if attempts <= 0 {
		return 0
	}
	b := p.BackOff()
	b.RandomizationFactor = 0
	var d time.Duration
	for i := 0; i < attempts; i++ {
		d = b.NextBackOff()
		if d >= p.MaxInterval || b.Multiplier == 1 {
			// Capped or constant: every later step returns the same value.
			break
		}
	}
	return d
}

// Delay returns the delay before attempt attempts+1, given that attempts
// attempts have failed: [Policy.Base] with jitter, uniformly random in
// [d(1-r), d(1+r)]. It is 0 for attempts ≤ 0. It does not check
// [Policy.Exhausted].
func (p Policy) Delay(attempts int) time.Duration {
	d := p.Base(attempts)
	if d == 0 || p.Randomization == 0 {
		return d
	}
	rnd := p.Rand
	if rnd == nil {
		rnd = rand.Float64
	}
	delta := p.Randomization * float64(d)
	lo, hi := float64(d)-delta, float64(d)+delta
	return time.Duration(lo + rnd()*(hi-lo))
}

// Exhausted reports whether an op whose attempts attempts have all failed has
// used up its retries: attempts > MaxRetries (with MaxRetries 5, the 6th
// failure exhausts the op).
func (p Policy) Exhausted(attempts int) bool {
	return attempts > p.MaxRetries
}

// Decision is what to do with an op after a failed attempt.
type Decision struct {
	// Retry is true when the op should be attempted again at At; false when
	// it should be dead-lettered.
	Retry bool
	// At is when the next attempt may start (zero unless Retry).
	At time.Time
	// Err is the classified failure; its Name is the op's error_class.
	Err *Error
	// Exhausted is true when a retryable failure was refused only because
	// the retries are used up.
	Exhausted bool
}

// Decide classifies err (see [Classify]) for an op whose attempts attempts
// (including the one that produced err) have failed, and returns whether and
// when to retry. A permanent failure is never retried.
func (p Policy) Decide(attempts int, err error, now time.Time) Decision {
	e := Classify(err)
	if e == nil {
		e = &Error{Class: Retryable, Name: NameUnknown, Err: fmt.Errorf("retry: attempt failed without an error")}
	}
	if e.Class == Permanent {
		return Decision{Err: e}
	}
	if p.Exhausted(attempts) {
		return Decision{Err: e, Exhausted: true}
	}
	return Decision{Retry: true, At: now.Add(p.Delay(attempts)), Err: e}
}

// Retry runs op until it succeeds, fails permanently (per [Classify]), the
// retries are used up or ctx ends, sleeping [Policy.BackOff] delays in
// between. It returns nil, ctx's error, or op's last error (a permanent one
// unwrapped from backoff.Permanent). notify, if not nil, is called before
// each sleep. Retry is for in-memory loops (e.g. a CLI talking to the
// sidecar); durable ops use [Policy.Decide] with their stored attempt count.
func (p Policy) Retry(ctx context.Context, op func(context.Context) error, notify func(err error, next time.Duration)) error {
	var b backoff.BackOff = p.BackOff()
	b = backoff.WithMaxRetries(b, uint64(max(p.MaxRetries, 0)))
	b = backoff.WithContext(b, ctx)
	return backoff.RetryNotify(func() error { return Backoff(op(ctx)) }, b, notify)
}
