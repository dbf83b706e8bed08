package sidecar

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
)

// holding is what a lease holds: one grant (*lock.Grant: a lock, or a
// semaphore's permit) or the grants of a set of objects acquired all or
// nothing (*grantSet). It is the part of *lock.Grant the lease machinery
// uses, so a set is a lease like any other.
type holding interface {
	Object() string
	Token() int64
	Node() string
	Type() lock.Type
	Info() string
	Shared() bool
	AcquiredAt() time.Time
	Waited() time.Duration
	State() lock.State
	ValidUntil() time.Time
	Err() error
	Done() <-chan struct{}
	Context() context.Context
	Release(ctx context.Context) error
	// Abandon ends it without the holder's release: lock-delay applies
	// (lock.Grant.Abandon).
	Abandon(ctx context.Context) error
	LastSignal() (lock.Signal, bool)
	Standing(sig lock.Signal) bool
	LiveAsks(ctx context.Context) []lock.Signal
	Asks() []lock.Signal
}

var (
	_ holding = (*lock.Grant)(nil)
	_ holding = (*grantSet)(nil)
)

// grantSet is the grants of a set of objects (lock.Engine.AcquireAll), in
// canonical order, held as one: the loss of any member is the loss of the
// set. Its Object, Token and Node are the first member's (each member's
// token fences the writes to its own object: members); its State is the
// worst member's, its ValidUntil the earliest; it ends (Done, Context,
// Err) when its first member ends, with that member's cause. Release
// releases every member. Its methods are safe for concurrent use.
type grantSet struct {
	gs      []*lock.Grant
	ctx     context.Context
	cancel  context.CancelCauseFunc
	left    atomic.Int32
	allGone chan struct{} // closed when every member has ended
	mu      sync.Mutex
	first   error // the Err of the first member lost (nil: none lost)
}

// newGrantSet holds gs (non-empty) as one.
func newGrantSet(gs []*lock.Grant) *grantSet {
	s := &grantSet{gs: gs, allGone: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.left.Store(int32(len(gs)))
	for _, g := range gs {
		context.AfterFunc(g.Context(), func() {
			if err := g.Err(); err != nil {
				s.mu.Lock()
				if s.first == nil {
					s.first = err
				}
				s.mu.Unlock()
			}
			s.cancel(context.Cause(g.Context()))
			if s.left.Add(-1) == 0 {
				close(s.allGone)
			}
		})
	}
	return s
}

func (s *grantSet) Object() string           { return s.gs[0].Object() }
func (s *grantSet) Token() int64             { return s.gs[0].Token() }
func (s *grantSet) Node() string             { return s.gs[0].Node() }
func (s *grantSet) Type() lock.Type          { return s.gs[0].Type() }
func (s *grantSet) Info() string             { return s.gs[0].Info() }
func (s *grantSet) Shared() bool             { return s.gs[0].Shared() } // every member was asked alike
func (s *grantSet) Done() <-chan struct{}    { return s.ctx.Done() }
func (s *grantSet) Context() context.Context { return s.ctx }

// AcquiredAt is when the last member was granted: when the set was.
func (s *grantSet) AcquiredAt() time.Time { return s.gs[len(s.gs)-1].AcquiredAt() }

// Waited is the set's wait, from the AcquireAll call (the first member's
// Waited counts from it, also in a later attempt) to the last member's
// grant.
func (s *grantSet) Waited() time.Duration {
	first := s.gs[0]
	return first.Waited() + s.AcquiredAt().Sub(first.AcquiredAt())
}

// Err is nil while every member lasts (and after Release), else the Err
// of the first member lost.
func (s *grantSet) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first != nil {
		return s.first
	}
	for _, g := range s.gs { // a loss whose callback has not run yet
		if err := g.Err(); err != nil {
			return err
		}
	}
	return nil
}

// State is the worst member's: Lost before Released before Suspect before
// Held.
func (s *grantSet) State() lock.State {
	worst := lock.Held
	for _, g := range s.gs {
		switch st := g.State(); {
		case st == lock.Lost:
			return lock.Lost
		case st > worst:
			worst = st
		}
	}
	return worst
}

// ValidUntil is the earliest member's; zero once any member has ended.
func (s *grantSet) ValidUntil() time.Time {
	var vu time.Time
	for _, g := range s.gs {
		v := g.ValidUntil()
		if v.IsZero() {
			return time.Time{}
		}
		if vu.IsZero() || v.Before(vu) {
			vu = v
		}
	}
	return vu
}

// Release releases every member. Its error is the first member's that
// was lost (ErrLockLost: the set was lost before the release), else the
// first other failure, else ErrNoNode if every member was already
// released; a member released by an earlier call (a retry after a
// failure) is no error.
func (s *grantSet) Release(ctx context.Context) error {
	return s.end(ctx, (*lock.Grant).Release)
}

// Abandon abandons every member (lock.Grant.Abandon), with Release's errors.
func (s *grantSet) Abandon(ctx context.Context) error {
	return s.end(ctx, (*lock.Grant).Abandon)
}

// end ends every member with f; see Release for the error.
func (s *grantSet) end(ctx context.Context, f func(*lock.Grant, context.Context) error) error {
	var lost, failed error
	released := 0
	for _, g := range s.gs {
		switch err := f(g, ctx); {
		case err == nil:
		case errors.Is(err, lock.ErrNoNode):
			released++
		case errors.Is(err, lock.ErrLockLost):
			lost = cmp.Or(lost, err)
		default:
			failed = cmp.Or(failed, err)
		}
	}
	switch {
	case lost != nil:
		return lost
	case failed != nil:
		return failed
	case released == len(s.gs):
		return lock.ErrNoNode
	}
	return nil
}

// LastSignal is the last signal written to any member (the first found).
func (s *grantSet) LastSignal() (lock.Signal, bool) {
	for _, g := range s.gs {
		if sig, ok := g.LastSignal(); ok {
			return sig, true
		}
	}
	return lock.Signal{}, false
}

// Standing reports whether sig stands on any member.
func (s *grantSet) Standing(sig lock.Signal) bool {
	for _, g := range s.gs {
		if g.Standing(sig) {
			return true
		}
	}
	return false
}

// Asks are the members' standing asks.
func (s *grantSet) Asks() []lock.Signal {
	var out []lock.Signal
	for _, g := range s.gs {
		out = append(out, g.Asks()...)
	}
	return out
}

// LiveAsks are the members' live asks.
func (s *grantSet) LiveAsks(ctx context.Context) []lock.Signal {
	var out []lock.Signal
	for _, g := range s.gs {
		out = append(out, g.LiveAsks(ctx)...)
	}
	return out
}

// holdsToken reports whether h holds object with token (a set: any member).
func holdsToken(h holding, object string, token int64) bool {
	if s, ok := h.(*grantSet); ok {
		for _, g := range s.gs {
			if g.Token() == token && g.Object() == object {
				return true
			}
		}
		return false
	}
	return h.Token() == token && h.Object() == object
}

// nothingToFree returns a channel closed when none of h's grants is left
// to release: a grant's Done; a set's, once every member has ended (a
// set ends at its first member's loss, its others still held).
func nothingToFree(h holding) <-chan struct{} {
	if s, ok := h.(*grantSet); ok {
		return s.allGone
	}
	return h.Done()
}

// endLost ends l, whose grant (a set: one of its members) was lost with
// err. A set's other members are still held: they are freed after the
// validity told, like a revoked lease's (take).
func (t *leaseTable) endLost(l *lease, err error) {
	if _, set := l.g.(*grantSet); set {
		t.take(l, lostReason(err), err.Error())
		return
	}
	t.finish(l, api.StateLost, lostReason(err), err.Error(), nil)
}

// recipeView adds to a lease's view what a set or a semaphore's permit
// holds: a set's objects with their tokens, a permit's semaphore and index.
func recipeView(out *api.Lease, h holding) {
	if s, ok := h.(*grantSet); ok {
		for _, g := range s.gs {
			out.Objects = append(out.Objects, api.LeaseObject{Object: g.Object(), Token: g.Token(), Node: g.Node()})
		}
		return
	}
	if name, i, ok := permitOf(h.Object()); ok {
		out.Semaphore, out.Permit = name, &i
	}
}

// modeOf is the API's mode of a grant or a node.
func modeOf(shared bool) string {
	if shared {
		return api.ModeShared
	}
	return api.ModeExclusive
}

// permitOf returns the semaphore and the permit whose lock object obj is.
func permitOf(obj string) (name string, permit int, ok bool) {
	i, ok := lock.PermitIndex(obj)
	if !ok {
		return "", 0, false
	}
	rest := strings.TrimPrefix(obj, lock.SemaphorePrefix)
	name, _, _ = strings.Cut(rest, "/")
	return name, i, name != ""
}
