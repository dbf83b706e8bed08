package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/testenv"
)

// Review of eb61a62 (a holder watch fired during the grant's own release
// waits for the release's outcome, awaitRelease, instead of reading the
// node again).
//
// Fault injection: the engine talks to ZooKeeper through a testenv proxy
// whose client->server bytes are held (HoldUpstream) while the release's
// multi is in flight, so another client can change the node (firing the
// holder watch while the release is under way) and take the WRITE
// permission off the object node (an ACL): the release's multi then fails
// with ErrNoAuth, neither a connection error nor a guard's (NoNode,
// BadVersion): the path that leaves the grant held (releaseFailed).

// wrSetup is one engine behind a proxy holding obj, and a direct client.
type wrSetup struct {
	p       *testenv.Proxy
	e       *lock.Engine
	conn    *zk.Conn
	g       *lock.Grant
	root    string
	objPath string
	plPath  string
}

func wrStart(t *testing.T, proto lock.Protocol, obj string, watchDelay time.Duration) *wrSetup {
	t.Helper()
	root := testRoot(t, zkServer)
	p := testenv.ProxyT(t, zkServer.Addr(1))
	e := newEngine(t, []string{p.Addr()}, root, func(o *lock.Options) {
		o.Protocol = proto
		o.HolderWatchDelay = watchDelay
		o.AuditInterval = -1
		o.SessionTimeout = 10 * time.Second // outlasts the holds below
	})
	name, err := lock.EscapeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := &wrSetup{p: p, e: e, conn: rawConn(t, zkServer.Servers()), root: root, objPath: root + "/" + name}
	s.plPath = s.objPath + "/privateLock"
	s.g = acquire(t, e, obj, lock.Foreground, lock.AcquireOptions{})
	return s
}

// startRelease holds the engine's requests and starts the grant's release;
// it returns once the release is under way (its multi held).
func (s *wrSetup) startRelease(t *testing.T) <-chan error {
	t.Helper()
	s.p.HoldUpstream()
	ch := make(chan error, 1)
	go func() { ch <- s.g.Release(context.Background()) }()
	waitFor(t, 10*time.Second, "the release under way", s.g.WreviewReleasing)
	return ch
}

// touch rewrites the node the holder watch follows (privateLock on the
// plugin protocol, the object node on the native one) with the same data:
// it fires the watch and takes nothing from the grant.
func (s *wrSetup) touch(t *testing.T, proto lock.Protocol) {
	t.Helper()
	p := s.plPath
	if proto == lock.Native {
		p = s.objPath
	}
	data, st, err := s.conn.Get(p)
	if err != nil {
		t.Fatalf("get %s: %v", p, err)
	}
	if _, err := s.conn.Set(p, data, st.Version); err != nil {
		t.Fatalf("set %s: %v", p, err)
	}
}

// denyWrite takes WRITE off the object node (the release's guard, plugin,
// or its rewrite of the holders, native, then fails with ErrNoAuth);
// allowWrite gives it back.
func (s *wrSetup) denyWrite(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { _, _ = s.conn.SetACL(s.objPath, zk.WorldACL(zk.PermAll), -1) }) // a failed test leaves no denied object
	if _, err := s.conn.SetACL(s.objPath, zk.WorldACL(zk.PermAll&^zk.PermWrite), -1); err != nil {
		t.Fatalf("setACL: %v", err)
	}
}

func (s *wrSetup) allowWrite(t *testing.T) {
	t.Helper()
	if _, err := s.conn.SetACL(s.objPath, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatalf("setACL: %v", err)
	}
}

// failRelease lets the held release through and checks that it failed
// with ErrNoAuth and (held) left the grant held.
func (s *wrSetup) failRelease(t *testing.T, ch <-chan error, held bool) {
	t.Helper()
	s.p.Heal()
	var err error
	select {
	case err = <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("the release did not return")
	}
	if !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("release = %v, want an error wrapping ErrNoAuth (the fault did not apply)", err)
	}
	if st := s.g.State(); held && st != lock.Held {
		t.Fatalf("after the failed release the grant is %v, want Held", st)
	}
}

// takeAway makes the grant lost by someone else's hand, as an operator
// clearing a stuck lock would: privateLock (plugin) deleted, or the
// object's holders rewritten to name nobody (native); dropChild then
// deletes the holder's child, which would otherwise keep others queued.
func (s *wrSetup) takeAway(t *testing.T, proto lock.Protocol) {
	t.Helper()
	var err error
	if proto == lock.Native {
		_, err = s.conn.Set(s.objPath, []byte(`{"native":1}`), -1)
	} else {
		err = s.conn.Delete(s.plPath, -1)
	}
	if err != nil {
		t.Fatalf("take the grant away: %v", err)
	}
}

// clear is takeAway and dropChild: the grant taken away, its child gone.
func (s *wrSetup) clear(t *testing.T, proto lock.Protocol) {
	t.Helper()
	s.takeAway(t, proto)
	s.dropChild(t)
}

func (s *wrSetup) dropChild(t *testing.T) {
	t.Helper()
	if err := s.conn.Delete(s.objPath+"/"+s.g.Node(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("delete the holder's child: %v", err)
	}
}

// expectLost waits for the grant to be reported lost, then has another
// engine take the object. A grant still reported held then is a silent
// overlap: the other engine's grant is checked against it.
func (s *wrSetup) expectLost(t *testing.T, proto lock.Protocol, obj string) {
	t.Helper()
	var chk overlapChecker
	chk.enter(s.g.Token())
	select {
	case <-s.g.Done():
		chk.leave()
	case <-time.After(10 * time.Second):
		t.Errorf("the grant was taken away by someone else but is still reported %v after 10s", s.g.State())
	}
	e2 := newEngine(t, zkServer.Servers(), s.root, func(o *lock.Options) { o.Protocol = proto })
	g2 := acquire(t, e2, obj, lock.Foreground, lock.AcquireOptions{})
	chk.enter(g2.Token())
	if s.g.State() == lock.Held {
		t.Errorf("another engine was granted %q (token %d) while this grant (token %d) is still reported held", obj, g2.Token(), s.g.Token())
	}
	chk.verify(t, 2)
	release(t, g2)
	if err := s.g.Err(); s.g.State() != lock.Held && !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("grant ended with %v, want ErrLockLost", err)
	}
}

// A release fails and leaves the grant held after the holder watch fired
// during it (someone else's write: the watch waits in awaitRelease). The
// watch must resume: it reads the node again, and a later loss (privateLock
// deleted, the holders rewritten) is reported. Fails if releaseFailed does
// not wake the waiting watch (relFailed never closed): the grant stays
// "held" forever while another holder may take the object.
func TestReviewWatchResumesAfterFailedRelease(t *testing.T) {
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		t.Run(fmt.Sprint(proto), func(t *testing.T) {
			const obj = "wr-resume"
			s := wrStart(t, proto, obj, time.Millisecond)
			waitFor(t, 10*time.Second, "the holder watch armed", func() bool { return s.e.WatchReads() > 0 })
			ch := s.startRelease(t)
			s.touch(t, proto) // fires the watch while the release is under way
			s.denyWrite(t)
			waitFor(t, 10*time.Second, "the watch waiting for the release's outcome", s.g.WreviewAwaitingRelease)
			reads := s.e.WatchReads()
			s.failRelease(t, ch, true)
			s.allowWrite(t)
			waitFor(t, 10*time.Second, "the holder watch reading again after the failed release", func() bool {
				return s.e.WatchReads() > reads
			})
			s.clear(t, proto)
			s.expectLost(t, proto, obj)
		})
	}
}

// A release starts before the holder watch is due (HolderWatchDelay: most
// critical sections are short) and fails, leaving the grant held. The
// watch's arm timer fired during the release and declined (arm: "the
// grant is being released"); nothing arms it afterwards, so the grant is
// held with no watch at all: privateLock deleted, or the holders rewritten,
// by someone else is never reported, and another holder gets the object
// while this grant still reads Held. The watch must be armed once the
// release fails.
func TestReviewWatchArmedAfterFailedRelease(t *testing.T) {
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		t.Run(fmt.Sprint(proto), func(t *testing.T) {
			const obj = "wr-arm"
			const delay = time.Second
			s := wrStart(t, proto, obj, delay)
			ch := s.startRelease(t)
			if d := time.Since(s.g.AcquiredAt()); d > delay/2 {
				// the case needs the release under way before the watch
				// is due; on a machine this slow it cannot be set up
				t.Skipf("the release started %v after the grant, want < %v", d, delay/2)
			}
			if n := s.e.WatchReads(); n != 0 {
				t.Fatalf("%d watch reads before HolderWatchDelay", n)
			}
			s.denyWrite(t)
			// the arm timer fires while the release is held
			time.Sleep(time.Until(s.g.AcquiredAt().Add(delay + delay/2)))
			s.failRelease(t, ch, true)
			s.allowWrite(t)
			s.clear(t, proto)
			s.expectLost(t, proto, obj)
		})
	}
}

// The holder watch's read is in flight when the grant's release starts
// (the watch fired just before: someone else's write), and answers that the
// grant is gone (privateLock deleted, the holders rewritten). The watch
// does not lose the grant then — the release's outcome decides — but it
// must not stop watching either: the release may fail and leave the grant
// held (here: ErrNoAuth, its guard denied), and then nothing reports the
// loss; another engine gets the object while this grant reads Held.
func TestReviewWatchKeptWhenReleaseFails(t *testing.T) {
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		t.Run(fmt.Sprint(proto), func(t *testing.T) {
			const obj = "wr-kept"
			s := wrStart(t, proto, obj, time.Millisecond)
			waitFor(t, 10*time.Second, "the holder watch armed", func() bool { return s.e.WatchReads() > 0 })
			reads := s.e.WatchReads()
			s.p.HoldUpstream()
			s.touch(t, proto) // fires the watch: its next read is held
			// The watch sends its read within microseconds of the event; a
			// release started before it would make the watch wait for the
			// release's outcome instead (awaitRelease), and the case would
			// pass without being exercised, never fail.
			time.Sleep(300 * time.Millisecond)
			ch := make(chan error, 1)
			go func() { ch <- s.g.Release(context.Background()) }()
			waitFor(t, 10*time.Second, "the release under way", s.g.WreviewReleasing)
			s.takeAway(t, proto)
			s.denyWrite(t)
			s.failRelease(t, ch, false) // the watch may report the loss at once
			if got := s.e.WatchReads(); got <= reads {
				t.Logf("the watch's read was not in flight before the release (reads %d, %d before): the case was not exercised", got, reads)
			}
			s.allowWrite(t)
			s.dropChild(t)
			s.expectLost(t, proto, obj)
		})
	}
}

// Local handoffs with the holder watch armed (HolderWatchDelay 1ms): the
// holder's release grants the next request of its own engine in the same
// write (plugin: privateLock deleted and created again for the successor;
// native: the holders rewritten to name it). The old holder's watch fires
// on that write while the release is under way: its grant must end
// Released, not Lost; the new holder's watch must then follow the new
// grant and report it lost when someone else takes it away. Fails if the
// event of the grant's own release (privateLock deleted) loses it (mutation:
// no isReleasing guard on the EventNodeDeleted case in watch).
func TestReviewWatchHandoffs(t *testing.T) {
	for _, proto := range []lock.Protocol{lock.Plugin, lock.Native} {
		t.Run(fmt.Sprint(proto), func(t *testing.T) {
			const obj = "wr-handoff"
			s := wrStart(t, proto, obj, time.Millisecond)
			conn := s.conn
			var chk overlapChecker
			l0 := s.e.LocalHandoffs()
			var reads int64 // the engine's watch reads before the current grant (a fresh engine: none)
			for i := range 5 {
				a := s.g
				chk.enter(a.Token())
				waitFor(t, 10*time.Second, "the holder watch armed", func() bool { return s.e.WatchReads() > reads })
				ch := make(chan *lock.Grant, 1)
				go func() {
					g, err := s.e.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 30 * time.Second})
					if err != nil {
						t.Error(err)
					}
					ch <- g
				}()
				waitFor(t, 10*time.Second, "the waiter queued", func() bool { return len(children(t, conn, s.root, obj)) >= 3 })
				if proto == lock.Plugin {
					waitFor(t, 10*time.Second, "the waiter offered a handoff", func() bool { return s.e.HandoffOffers(obj) == 1 })
				}
				time.Sleep(50 * time.Millisecond) // the waiter is watching
				chk.leave()
				reads = s.e.WatchReads()
				if err := a.Release(context.Background()); err != nil {
					t.Fatalf("round %d: release: %v", i, err)
				}
				if st, err := a.State(), a.Err(); st != lock.Released || err != nil {
					t.Fatalf("round %d: the released grant is %v (%v), want Released", i, st, err)
				}
				b := <-ch
				if b == nil {
					t.FailNow()
				}
				s.g = b
			}
			t.Logf("%d local handoffs of 5", s.e.LocalHandoffs()-l0)
			chk.enter(s.g.Token())
			waitFor(t, 10*time.Second, "the last holder's watch armed", func() bool { return s.e.WatchReads() > reads })
			s.clear(t, proto)
			select {
			case <-s.g.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("the last holder's grant was taken away but is still reported %v", s.g.State())
			}
			chk.leave()
			chk.verify(t, 6)
		})
	}
}

// Someone else takes the grant away while its release is in flight and the
// holder watch, armed, fires: the watch leaves the outcome to the release
// (it does not read), so the release must report the loss itself
// (ErrLockLost, the grant Lost), never a clean release of a lock that was
// not ours any more. Variants: privateLock deleted (plugin), the holders
// rewritten to name nobody (native), the object node deleted with our
// child (native). Fails if a release that finds the grant gone ends it
// Released (mutations checked: end's gone case finishing Released;
// endNative's ErrBadVersion re-read not checking that the holders still
// name us; endNative's ErrNoNode case finishing Released).
func TestReviewWatchLossDuringRelease(t *testing.T) {
	for _, c := range []struct {
		name  string
		proto lock.Protocol
	}{{"plugin", lock.Plugin}, {"native", lock.Native}, {"native-object-deleted", lock.Native}} {
		t.Run(c.name, func(t *testing.T) {
			const obj = "wr-loss"
			s := wrStart(t, c.proto, obj, time.Millisecond)
			waitFor(t, 10*time.Second, "the holder watch armed", func() bool { return s.e.WatchReads() > 0 })
			ch := s.startRelease(t)
			if c.name == "native-object-deleted" {
				wrDeleteTree(t, s.conn, s.objPath) // our child, the native sentinel, the object node
			} else {
				s.takeAway(t, c.proto)
			}
			waitFor(t, 10*time.Second, "the watch waiting for the release's outcome", s.g.WreviewAwaitingRelease)
			s.p.Heal()
			var err error
			select {
			case err = <-ch:
			case <-time.After(20 * time.Second):
				t.Fatal("the release did not return")
			}
			if !errors.Is(err, lock.ErrLockLost) || !errors.Is(s.g.Err(), lock.ErrLockLost) || s.g.State() != lock.Lost {
				t.Fatalf("release = %v, grant %v (%v): want the loss reported (ErrLockLost, Lost)", err, s.g.State(), s.g.Err())
			}
			s.dropChild(t) // the native holders rewritten: our child is the session's cleanup's, or ours here
		})
	}
}

// wrDeleteTree deletes p and everything under it.
func wrDeleteTree(t *testing.T, conn *zk.Conn, p string) {
	t.Helper()
	kids, _, err := conn.Children(p)
	if err != nil {
		t.Fatalf("children of %s: %v", p, err)
	}
	for _, k := range kids {
		wrDeleteTree(t, conn, p+"/"+k)
	}
	if err := conn.Delete(p, -1); err != nil {
		t.Fatalf("delete %s: %v", p, err)
	}
}
