package sidecar

import (
	"sync"
	"time"
)

// sessionWatch follows the engine's ZooKeeper session events (from its
// observer) for long-polls, which wake on any, and for /healthz and the
// metrics, which tell how long the sidecar has been without a session.
type sessionWatch struct {
	mu    sync.Mutex
	ch    chan struct{} // closed and replaced on every session event
	since time.Time     // when the session was last lost; zero while connected
}

func newSessionWatch(now time.Time) *sessionWatch {
	return &sessionWatch{ch: make(chan struct{}), since: now}
}

// event records a session event (a zkStateLabel: "has_session", …).
func (w *sessionWatch) event(state string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if state == "has_session" {
		w.since = time.Time{}
	} else if w.since.IsZero() {
		w.since = time.Now()
	}
	close(w.ch)
	w.ch = make(chan struct{})
}

// changed returns a channel closed at the next session event.
func (w *sessionWatch) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// disconnectedFor is how long the sidecar has been without a session; 0
// while it has one.
func (w *sessionWatch) disconnectedFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since.IsZero() {
		return 0
	}
	return time.Since(w.since)
}
