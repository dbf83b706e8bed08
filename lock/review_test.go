package lock_test

import (
	"context"
	"path"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// Review R1: the object node's data version identifies a grant only while
// the object node lives. A container emptied by e1's release is reaped and
// created again by e2, whose grant sets version 1 again — the version e1's
// grant had set on the old node. e1's release reply was lost; its retried
// release (cleanRelease: check version, delete privateLock v1, delete child;
// else deleteOwnPL) then deletes e2's privateLock, and a waiting e3 is
// granted while e2 holds.
func TestReviewLostReleaseReplyRenewedContainer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		typ2 lock.Type // e2's type: same prefix as e1's child name or not
	}{
		{"same child name", lock.Background},
		{"other child name", lock.Foreground},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := testRoot(t, zkServer)
			d := newCutDialer()
			e1 := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) { o.Dialer = d.dial })
			e2 := newEngine(t, zkServer.Servers(), root)
			e3 := newEngine(t, zkServer.Servers(), root)
			conn := rawConn(t, zkServer.Servers())
			var check overlapChecker
			obj := "RC1"
			name, _ := lock.EscapeObject(obj)
			objPath := path.Join(root, name)

			g1 := acquire(t, e1, obj, lock.Background, lock.AcquireOptions{})
			t.Logf("e1 granted: node %s token %d", g1.Node(), g1.Token())
			sess1 := e1.Health().SessionID
			cutDone := d.arm(opMulti, 1500*time.Millisecond)
			if err := g1.Release(context.Background()); err != nil {
				t.Fatalf("e1 Release: %v", err)
			}
			<-cutDone
			waitFor(t, 5*time.Second, "emptied container reaped", func() bool {
				ok, _, err := conn.Exists(objPath)
				return err == nil && !ok
			})
			g2 := acquire(t, e2, obj, tc.typ2, lock.AcquireOptions{})
			check.enter(g2.Token())
			_, ost, _ := conn.Get(objPath)
			t.Logf("e2 granted on the renewed container: node %s token %d, object version %d", g2.Node(), g2.Token(), ost.Version)
			g3ch := make(chan *lock.Grant, 1)
			go func() {
				g, err := e3.Acquire(context.Background(), obj, lock.Foreground, lock.AcquireOptions{Wait: 20 * time.Second})
				if err != nil {
					close(g3ch)
					return
				}
				check.enter(g.Token())
				g3ch <- g
			}()
			waitFor(t, 10*time.Second, "e3 queued", func() bool { return len(children(t, conn, root, obj)) == 3 })
			waitFor(t, 10*time.Second, "e1 reconnected", func() bool { return e1.Health().Connected })
			if got := e1.Health().SessionID; got != sess1 {
				t.Fatalf("e1 got a new session 0x%x; the scenario needs the old one resumed", got)
			}
			waitFor(t, 10*time.Second, "e1 cleanups done", func() bool { return e1.Health().CleanupPending == 0 })
			time.Sleep(300 * time.Millisecond)
			_, st, err := conn.Get(path.Join(objPath, "privateLock"))
			if err != nil || st.Czxid != g2.Token() {
				t.Errorf("e2's privateLock after e1's retried release: err %v, stat %+v, want czxid %d", err, st, g2.Token())
			}
			t.Logf("children now: %v; e2 state %v (%v)", children(t, conn, root, obj), g2.State(), g2.Err())
			var g3 *lock.Grant
			select {
			case g3 = <-g3ch:
				if g3 != nil {
					t.Errorf("e3 was granted (token %d) while e2 (token %d) held", g3.Token(), g2.Token())
				}
			default:
			}
			check.leave()
			_ = g2.Release(context.Background())
			if g3 == nil {
				g3 = <-g3ch
			}
			if g3 != nil {
				check.leave()
				release(t, g3)
			}
			if check.overlaps != 0 || check.badToken != 0 {
				t.Errorf("overlaps %d, non-increasing tokens %d", check.overlaps, check.badToken)
			}
		})
	}
}

// Review R3: a grant whose validity is already over when the multi returns
// ("granted with no validity left") is registered first, which wakes the
// monitor; when the monitor wins the race it fails the session and finishes
// the grant (held-1, objLeave) that grant() then also fails (objLeave again).
// A TickTime above the negotiated timeout (e.g. a server whose
// maxSessionTimeout is below TickTime + margin) makes every grant hit it.
func TestReviewNoValidityGrantAccounting(t *testing.T) {
	t.Parallel()
	root := testRoot(t, zkServer)
	e := newEngine(t, zkServer.Servers(), root, func(o *lock.Options) {
		o.SessionTimeout = 2 * time.Second
		o.TickTime = 3 * time.Second
		o.DisableFastPath = true
	})
	time.Sleep(3500 * time.Millisecond) // the handshake's base is older than the timeout
	var errs, lost int
	for i := range 60 {
		_, err := e.Acquire(context.Background(), "NV"+string(rune('a'+i%26))+time.Now().Format("150405.000"), lock.Foreground, lock.AcquireOptions{Wait: 2 * time.Second})
		if err != nil {
			errs++
		}
		if h := e.Health(); h.Held != 0 {
			t.Errorf("after acquire %d (err %v): Health.Held = %d with nothing held", i, err, h.Held)
			break
		}
		if h := e.Health(); !h.Connected {
			lost++
			waitFor(t, 10*time.Second, "reconnected", func() bool { return e.Health().Connected })
			time.Sleep(3500 * time.Millisecond)
		}
	}
	t.Logf("%d of 60 acquires failed; session replaced %d times", errs, lost)
}
