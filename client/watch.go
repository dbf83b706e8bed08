package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/batonhq/baton/api"
)

// Seen is what a watcher saw last, for [Client.WaitChange]: the Version of
// an earlier answer (of any sidecar), the token of the holder (0 = free),
// both, or neither (then the current state is answered at once).
type Seen struct {
	Version string
	Token   *int64
}

// WaitChange is one long-poll GET /v1/locks/{object}?wait=change: the
// object's holder and queue once they differ from seen, or, when timeout
// passes first (at most 10 minutes; 0 answers at once), the current state
// with Changed false. If the sidecar saw states after seen.Version, the
// answer is the one right after it: passing each answer's Version back, a
// caller sees every state the sidecar saw, in order (see [Client.Watch]).
// A bad parameter is a 400 *APIError naming it; a per-uid cap reached a 429
// (sidecar.max.polls.per.uid).
func (c *Client) WaitChange(ctx context.Context, object string, seen Seen, timeout time.Duration) (*api.LockWatch, error) {
	q := url.Values{"wait": {"change"}, "timeout_ms": {strconv.FormatInt(ceilMS(timeout), 10)}}
	if seen.Version != "" {
		q.Set("version", seen.Version)
	}
	if seen.Token != nil {
		q.Set("after", strconv.FormatInt(*seen.Token, 10))
	}
	var v api.LockWatch
	if _, err := c.send(ctx, http.MethodGet, "/v1/locks/"+url.PathEscape(object)+"?"+q.Encode(), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// watchPoll is how long each long-poll of Watch waits.
const watchPoll = 30 * time.Second

// Watch yields the object's state and then every change of its holder or
// queue (etcd's Election.Observe): with after "" the current state first,
// with the Version of an earlier answer the states after it. It long-polls
// the sidecar, passing each answer's Version back, so no state the sidecar
// saw is skipped, also between two polls; a state that lasted less than a
// ZooKeeper round trip may not have been seen. It ends when ctx ends (no
// error), the loop breaks, or a request fails: the error is yielded, and a
// caller may start again from the last Version it got.
//
//	for st, err := range c.Watch(ctx, "leader", "") {
//		if err != nil { … }
//		log.Printf("holder %v, %d waiting", st.Holder, len(st.Waiters))
//	}
func (c *Client) Watch(ctx context.Context, object, after string) iter.Seq2[*api.LockWatch, error] {
	return func(yield func(*api.LockWatch, error) bool) {
		seen := Seen{Version: after}
		for {
			timeout := watchPoll
			if seen.Version == "" {
				timeout = 0
			}
			st, err := c.WaitChange(ctx, object, seen, timeout)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !st.Changed && seen.Version != "" {
				continue
			}
			seen.Version = st.Version
			if !yield(st, nil) {
				return
			}
		}
	}
}
