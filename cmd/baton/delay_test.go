package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// metricOf reads one unlabelled sample from a sidecar's /metrics (-1 if absent).
func metricOf(t *testing.T, sock, name string) float64 {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://baton/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, v)
			}
			return f
		}
	}
	return -1
}

// testLockDelayKill9: kill -9 of the holder's `baton serve`. A waiter with a
// 2 s lock-delay on another sidecar is granted no earlier than 2 s after
// the holder's privateLock vanished (its session expired), after the
// validity the dead holder was told, with a higher token; the sidecar counts
// it in baton_lock_delays_total. Then a clean release hands over at once to
// `baton lock --lock-delay 1m` (whose 20 s wait would run out if it were
// delayed), and the counter does not move.
func testLockDelayKill9(t *testing.T, e *env) {
	const delay = 2 * time.Second
	const obj = "ld-kill9"
	k9 := e.startSidecar(t, "ld-k9", map[string]string{"zookeeper.session.timeout": "2000"})
	w := e.startSidecar(t, "ld-w", nil)
	hc := client.New(k9.socket)
	t.Cleanup(func() { hc.Close() })
	h, err := hc.Acquire(context.Background(), obj, client.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	told := h.ValidUntil() // the holder never hears from its sidecar again
	zc := e.zkConn(t)
	ok, _, ev, err := zc.ExistsW(e2eRoot + "/" + obj + "/privateLock")
	if err != nil || !ok {
		t.Fatalf("privateLock: %v %v", ok, err)
	}
	wc := client.New(w.socket)
	t.Cleanup(func() { wc.Close() })
	granted := make(chan grantResult, 1)
	go func() {
		l, err := wc.Acquire(context.Background(), obj, client.WithWait(60*time.Second), client.WithLockDelay(delay))
		granted <- grantResult{l, err, time.Now(), false}
	}()
	waitCond(t, 30*time.Second, "waiter queued", func() bool { return waitersOf(t, w.socket, obj) == 1 })

	k9.kill9(t)
	<-ev
	gone := time.Now()
	g := <-granted
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	after := g.at.Sub(gone)
	t.Logf("kill -9 of the holder's sidecar: privateLock vanished; next grant %v later (lock-delay %v)", after.Round(time.Millisecond), delay)
	if after < delay-200*time.Millisecond {
		t.Errorf("granted %v after the vanish, want ≥ %v", after, delay)
	}
	if !g.at.After(told) || g.l.Token() <= h.Token() {
		t.Errorf("granted at %v (token %d), the dead holder was told valid until %v (token %d)", g.at, g.l.Token(), told, h.Token())
	}
	if n := metricOf(t, w.socket, "baton_lock_delays_total"); n != 1 {
		t.Errorf("baton_lock_delays_total = %v, want 1", n)
	}

	r := startLock(w.socket, nil, "--lock-delay", "1m", "--wait", "20s", obj, "--", "true")
	waitCond(t, 30*time.Second, "baton lock queued", func() bool { return waitersOf(t, w.socket, obj) == 1 })
	if err := g.l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _ := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("baton lock --lock-delay 1m after a clean release: exit %d, stderr %q", code, r.err.String())
	}
	if n := metricOf(t, w.socket, "baton_lock_delays_total"); n != 1 {
		t.Errorf("after a clean release baton_lock_delays_total = %v, want still 1", n)
	}
}
