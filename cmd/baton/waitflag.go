package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// foreverAttempt is what each acquire of --wait forever asks for: the
// sidecar's longest wait.
var foreverAttempt = api.MaxWaitMS * time.Millisecond

// waitValue is `baton lock --wait`: a duration, or "forever" (a leader
// election: wait for as long as it takes).
type waitValue struct {
	d       *time.Duration
	forever *bool
}

func (v waitValue) String() string {
	if v.forever != nil && *v.forever {
		return "forever"
	}
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v waitValue) Set(s string) error {
	if s == "forever" {
		*v.forever = true
		*v.d = foreverAttempt
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (30s, 2m) or \"forever\"", s)
	}
	*v.forever, *v.d = false, d
	return nil
}

func (v waitValue) Type() string { return "duration|forever" }

// acquireWaiting is Acquire, asked again after each wait the sidecar gave
// up on (its longest, wait_ms 600000) when forever is set: the request
// queues again at the end, so a "forever" waiter keeps no place in line
// across those 10 minutes (for a leader election, any order of candidates
// will do).
func acquireWaiting(ctx context.Context, forever bool, acquire func(context.Context) (*client.Lease, error)) (*client.Lease, error) {
	for {
		l, err := acquire(ctx)
		if _, ok := errors.AsType[*client.InstanceLockError](err); !ok || !forever || ctx.Err() != nil {
			return l, err
		}
	}
}
