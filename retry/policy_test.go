package retry_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noJitter() retry.Policy {
	p := retry.DefaultPolicy()
	p.Randomization = 0
	return p
}

func TestDelayScheduleWithoutJitter(t *testing.T) {
	p := noJitter() // 500ms ×2 capped at 30s
	want := []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	for n, w := range want {
		if got := p.Delay(n); got != w {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w)
		}
	}
}

// Base must be exactly what a cenkalti ExponentialBackOff with the same
// parameters returns at step n (initial × mult^(n-1) capped at max).
func TestBaseMatchesExponentialBackOff(t *testing.T) {
	policies := map[string]retry.Policy{
		"default":     noJitter(),
		"x1.5":        {InitialInterval: 100 * time.Millisecond, MaxInterval: 7 * time.Second, Multiplier: 1.5},
		"x1 constant": {InitialInterval: time.Second, MaxInterval: time.Minute, Multiplier: 1},
		"init=max":    {InitialInterval: time.Second, MaxInterval: time.Second, Multiplier: 3},
		"x10":         {InitialInterval: time.Millisecond, MaxInterval: time.Hour, Multiplier: 10},
	}
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			b := p.BackOff()
			for n := 1; n <= 40; n++ {
				want := b.NextBackOff()
				if got := p.Base(n); got != want {
					t.Fatalf("Base(%d) = %v, want %v (ExponentialBackOff step %d)", n, got, want, n)
				}
				if got := p.Delay(n); got != want {
					t.Fatalf("Delay(%d) = %v with randomization 0, want %v", n, got, want)
				}
			}
		})
	}
}

func TestDelayJitterBounds(t *testing.T) {
	for _, r := range []float64{0.1, 0.5, 1} {
		p := retry.DefaultPolicy()
		p.Randomization = r
		for _, rnd := range []float64{0, 0.25, 0.5, 0.999999999} {
			p.Rand = func() float64 { return rnd }
			for n := 1; n <= 10; n++ {
				d := p.Base(n)
				lo, hi := time.Duration(float64(d)*(1-r)), time.Duration(float64(d)*(1+r))
				if got := p.Delay(n); got < lo || got > hi {
					t.Errorf("r=%v rand=%v: Delay(%d) = %v, want within [%v, %v]", r, rnd, n, got, lo, hi)
				}
			}
		}
		// The extremes of the source map to the extremes of the interval.
		p.Rand = func() float64 { return 0 }
		if got, want := p.Delay(1), time.Duration(float64(500*time.Millisecond)*(1-r)); got != want {
			t.Errorf("r=%v rand=0: Delay(1) = %v, want %v", r, got, want)
		}
	}
	// With the default source, many draws stay within bounds and spread out.
	p := retry.DefaultPolicy()
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := p.Delay(3) // base 2s, r 0.5 → [1s, 3s]
		if got < time.Second || got > 3*time.Second {
			t.Fatalf("Delay(3) = %v, want within [1s, 3s]", got)
		}
		seen[got] = true
	}
	if len(seen) < 100 {
		t.Errorf("1000 jittered delays gave only %d distinct values", len(seen))
	}
}

// The backoff package's default MaxElapsedTime (15 min) must not end
// retries: simulated hours of sleeping still yield delays.
func TestNoElapsedTimeCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retry.DefaultPolicy()
		b := p.BackOff()
		if b.MaxElapsedTime != 0 {
			t.Fatalf("BackOff().MaxElapsedTime = %v, want 0", b.MaxElapsedTime)
		}
		start := time.Now()
		steps := 0
		for time.Since(start) < 5*time.Hour {
			d := b.NextBackOff()
			if d == backoff.Stop {
				t.Fatalf("NextBackOff() = Stop after %v (%d steps), want no elapsed-time cap", time.Since(start), steps)
			}
			time.Sleep(d) // fake clock
			steps++
		}
		if b.GetElapsedTime() < 5*time.Hour {
			t.Fatalf("elapsed %v, want ≥ 5h on the fake clock", b.GetElapsedTime())
		}
	})
	// Stored attempt counts far beyond anything realistic still give a delay.
	p := noJitter()
	p.MaxRetries = 1_000_000
	if got := p.Delay(999_999); got != p.MaxInterval {
		t.Errorf("Delay(999999) = %v, want %v", got, p.MaxInterval)
	}
	if p.Exhausted(1_000_000) {
		t.Errorf("Exhausted(1000000) with MaxRetries 1000000 = true, want false")
	}
}

func TestExhausted(t *testing.T) {
	tests := []struct {
		retries, attempts int
		want              bool
	}{
		{5, 0, false}, {5, 1, false}, {5, 5, false}, {5, 6, true}, {5, 7, true},
		{0, 0, false}, {0, 1, true},
		{1, 1, false}, {1, 2, true},
	}
	for _, tt := range tests {
		p := retry.DefaultPolicy()
		p.MaxRetries = tt.retries
		if got := p.Exhausted(tt.attempts); got != tt.want {
			t.Errorf("MaxRetries %d: Exhausted(%d) = %v, want %v", tt.retries, tt.attempts, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(*retry.Policy)
		wantField string // "" = valid
	}{
		{"default", func(*retry.Policy) {}, ""},
		{"zero retries", func(p *retry.Policy) { p.MaxRetries = 0 }, ""},
		{"no jitter", func(p *retry.Policy) { p.Randomization = 0 }, ""},
		{"initial zero", func(p *retry.Policy) { p.InitialInterval = 0 }, "retry.initial.interval"},
		{"max below initial", func(p *retry.Policy) { p.MaxInterval = p.InitialInterval - 1 }, "retry.max.interval"},
		{"multiplier below 1", func(p *retry.Policy) { p.Multiplier = 0.5 }, "retry.multiplier"},
		{"randomization above 1", func(p *retry.Policy) { p.Randomization = 1.5 }, "retry.randomization"},
		{"randomization negative", func(p *retry.Policy) { p.Randomization = -0.1 }, "retry.randomization"},
		{"negative retries", func(p *retry.Policy) { p.MaxRetries = -1 }, "elastic.request.retry.count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := retry.DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			fe, ok := errors.AsType[*retry.FieldError](err)
			if !ok || fe.Field != tt.wantField {
				t.Fatalf("Validate() = %v, want *FieldError for %s", err, tt.wantField)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	p := noJitter()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name          string
		attempts      int
		err           error
		wantRetry     bool
		wantExhausted bool
		wantAt        time.Time
		wantName      string
	}{
		{"first failure", 1, &retry.StatusError{Code: 503}, true, false, now.Add(500 * time.Millisecond), "HTTP503"},
		{"fifth failure", 5, &retry.StatusError{Code: 503}, true, false, now.Add(8 * time.Second), "HTTP503"},
		{"sixth failure exhausts", 6, &retry.StatusError{Code: 503}, false, true, time.Time{}, "HTTP503"},
		{"permanent at once", 1, &retry.StatusError{Code: 400}, false, false, time.Time{}, "HTTP400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.attempts, tt.err, now)
			if d.Retry != tt.wantRetry || d.Exhausted != tt.wantExhausted || !d.At.Equal(tt.wantAt) || d.Err.Name != tt.wantName {
				t.Errorf("Decide(%d, %v) = {Retry:%v Exhausted:%v At:%v Name:%s}, want {%v %v %v %s}",
					tt.attempts, tt.err, d.Retry, d.Exhausted, d.At, d.Err.Name, tt.wantRetry, tt.wantExhausted, tt.wantAt, tt.wantName)
			}
		})
	}
}

func TestPolicyRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := retry.DefaultPolicy()
		p.MaxRetries = 3
		tests := []struct {
			name      string
			fail      error
			wantCalls int
		}{
			{"retryable uses all attempts", &retry.StatusError{Code: 503}, 4},
			{"permanent stops at once", &retry.StatusError{Code: 400}, 1},
			{"success", nil, 1},
		}
		for _, tt := range tests {
			calls := 0
			start := time.Now()
			err := p.Retry(t.Context(), func(context.Context) error { calls++; return tt.fail }, nil)
			if calls != tt.wantCalls {
				t.Errorf("%s: op called %d times, want %d", tt.name, calls, tt.wantCalls)
			}
			if tt.fail == nil && err != nil || tt.fail != nil && !errors.Is(err, tt.fail) {
				t.Errorf("%s: Retry() = %v, want %v", tt.name, err, tt.fail)
			}
			if tt.wantCalls == 4 {
				// Three jittered sleeps of 0.5s, 1s, 2s: between 1.75s and 5.25s.
				if el := time.Since(start); el < 1750*time.Millisecond || el > 5250*time.Millisecond {
					t.Errorf("%s: slept %v, want within [1.75s, 5.25s]", tt.name, el)
				}
			}
		}
		// A cancelled context ends the loop with its error.
		ctx, cancel := context.WithCancel(t.Context())
		err := p.Retry(ctx, func(context.Context) error { cancel(); return &retry.StatusError{Code: 503} }, nil)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Retry() after cancel = %v, want context.Canceled", err)
		}
	})
}

// FuzzDelay: for any valid policy, Base never exceeds MaxInterval, never
// shrinks as attempts grow, and Delay stays within the jitter interval.
func FuzzDelay(f *testing.F) {
	f.Add(int64(500), int64(30000), 2.0, 0.5, 7, 0.3)
	f.Add(int64(1), int64(1), 1.0, 0.0, 1000000, 0.999)
	f.Add(int64(3), int64(1<<40), 13.7, 1.0, 90, 0.0)
	f.Fuzz(func(t *testing.T, initMs, maxMs int64, mult, r float64, attempts int, rnd float64) {
		p := retry.Policy{
			InitialInterval: time.Duration(initMs) * time.Millisecond,
			MaxInterval:     time.Duration(maxMs) * time.Millisecond,
			Multiplier:      mult, Randomization: r,
			Rand: func() float64 { return rnd },
		}
		if p.Validate() != nil || initMs > 1<<40 || maxMs > 1<<40 || rnd < 0 || rnd >= 1 || attempts < 0 || attempts > 1<<20 {
			t.Skip()
		}
		d := p.Base(attempts)
		if d > p.MaxInterval {
			t.Fatalf("Base(%d) = %v > max %v", attempts, d, p.MaxInterval)
		}
		if attempts > 0 && p.Base(attempts-1) > d {
			t.Fatalf("Base(%d) = %v < Base(%d) = %v", attempts, d, attempts-1, p.Base(attempts-1))
		}
		got := p.Delay(attempts)
		slack := 1 + float64(d)*1e-12 // float64 rounding on huge durations
		lo, hi := float64(d)*(1-r)-slack, float64(d)*(1+r)+slack
		if float64(got) < lo || float64(got) > hi {
			t.Fatalf("Delay(%d) = %v, want within [%v, %v]", attempts, got, time.Duration(lo), time.Duration(hi))
		}
	})
}
