package sidecar_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
)

// logBuf collects a sidecar's JSON log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the decoded log records whose msg contains substr.
func (l *logBuf) lines(substr string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, ln := range strings.Split(l.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(ln), &m) == nil && strings.Contains(fmt.Sprint(m["msg"]), substr) {
			out = append(out, m)
		}
	}
	return out
}

func withLog(lb *logBuf) func(*sidecar.Options) {
	return func(o *sidecar.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// TestRevoke: an operator revokes a holder, through its own sidecar (local)
// or through another one (the signal goes through ZooKeeper). The holder's
// long-poll returns at once with state lost, reason "revoked: …"; its
// renewals answer 410 with that reason; a waiter on another sidecar is
// granted only after the valid_until last told to the holder (never
// before); both sidecars write an audit line with the caller's uid and pid;
// baton_revocations_total counts it.
func TestRevoke(t *testing.T) {
	for _, through := range []string{"holder's sidecar", "another sidecar"} {
		t.Run(strings.ReplaceAll(through, " ", "_"), func(t *testing.T) {
			root := testRoot(t)
			conn := rawConn(t)
			var la, lb logBuf
			a := start(t, testConfig(t, root, "sc-a"), withLog(&la))
			b := start(t, testConfig(t, root, "sc-b"), withLog(&lb))
			t.Cleanup(func() { assertNoLeftovers(t, conn, root) })
			via := a
			if through == "another sidecar" {
				via = b
			}

			l := a.acquire("rv", `{"lease_ms":60000,"info":"stuck job"}`)
			time.Sleep(100 * time.Millisecond) // past the holder watch's arming delay
			told := decodeLease(t, a.mustCall(200, "POST", "/v1/leases/"+l.LeaseID+"/renew", ""))

			poll := make(chan api.Lease, 1)
			go func() {
				st, raw := a.call("GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=30000", "")
				var r api.Lease
				if st != 200 || json.Unmarshal(raw, &r) != nil {
					t.Errorf("long-poll: %d %s", st, raw)
				}
				poll <- r
			}()
			waitFor(t, 10*time.Second, "the poll in progress", func() bool { return a.metric("baton_lease_polls_in_flight") == 1 })
			type grant struct {
				l  api.Lease
				at time.Time
			}
			granted := make(chan grant, 1)
			go func() {
				st, raw := b.call("POST", "/v1/locks/rv/acquire", `{"wait_ms":30000}`)
				at := time.Now()
				var g api.Lease
				if st != 200 || json.Unmarshal(raw, &g) != nil {
					t.Errorf("waiter: %d %s", st, raw)
				}
				granted <- grant{g, at}
			}()
			waitFor(t, 10*time.Second, "the waiter queued", func() bool {
				var st api.LockStatus
				return json.Unmarshal(a.mustCall(200, "GET", "/v1/locks/rv", ""), &st) == nil && len(st.Waiters) == 1
			})

			t0 := time.Now()
			var rr api.RevokeResponse
			if err := json.Unmarshal(via.mustCall(202, "POST", "/v1/locks/rv/revoke", `{"reason":"hung since 02:00"}`), &rr); err != nil {
				t.Fatal(err)
			}
			if rr.Token != l.Token || rr.Reason != "revoked: hung since 02:00" || rr.Holder == nil || rr.Holder.Sidecar != "sc-a" || rr.Holder.Node == "" || rr.Local && via != a {
				t.Errorf("revoke answer = %+v", rr)
			}
			r := <-poll
			t.Logf("holder told %v after the revoke request", time.Since(t0).Round(time.Millisecond))
			if r.State != api.StateLost || r.Reason != "revoked: hung since 02:00" || r.ValidForMS != 0 && r.ValidUntil.After(told.ValidUntil.Time) {
				t.Errorf("long-poll = %+v, want lost, revoked: …, valid until at most %v", r, told.ValidUntil)
			}
			if e := decodeError(t, a.mustCall(410, "POST", "/v1/leases/"+l.LeaseID+"/renew", "")); e.Reason != "revoked: hung since 02:00" {
				t.Errorf("renewal after the revocation: %+v", e)
			}
			// Pending: GET /v1/locks shows the revocation until the lock is freed.
			var st api.LockStatus
			if err := json.Unmarshal(b.mustCall(200, "GET", "/v1/locks/rv", ""), &st); err == nil && st.Holder != nil && st.Holder.Token == l.Token {
				if st.Holder.Revocation != "revoked: hung since 02:00" {
					t.Errorf("inspect during the revocation: holder %+v", st.Holder)
				}
			}

			if rr.Local && (rr.FreedAfter == nil || !rr.FreedAfter.Equal(told.ValidUntil.Time)) {
				t.Errorf("freed_after = %v, want the valid_until last told, %v", rr.FreedAfter, told.ValidUntil)
			}
			g := <-granted
			t.Logf("waiter granted %v after the revoke; the holder was last told valid until %v (%v after the revoke)",
				g.at.Sub(t0).Round(time.Millisecond), told.ValidUntil, told.ValidUntil.Sub(t0).Round(time.Millisecond))
			// Wall clocks of one machine; api times are truncated to ms.
			if g.l.AcquiredAt.Before(told.ValidUntil.Time) {
				t.Errorf("granted at %v, before the validity told to the revoked holder (%v)", g.l.AcquiredAt, told.ValidUntil)
			}
			if g.l.Token <= l.Token {
				t.Errorf("token %d not above the revoked %d", g.l.Token, l.Token)
			}
			b.release(g.l.LeaseID)

			// Audit lines on both sidecars; the caller is this process.
			caller := fmt.Sprintf("uid=%d gid=%d pid=%d", os.Getuid(), os.Getgid(), os.Getpid())
			viaLog, holderLog := &la, &la
			if via == b {
				viaLog = &lb
			}
			for name, rec := range map[string][]map[string]any{
				"requested": viaLog.lines("audit: revocation requested"),
				"applied":   holderLog.lines("audit: lease revoked"),
			} {
				if len(rec) != 1 {
					t.Errorf("%s: %d audit lines, want 1", name, len(rec))
					continue
				}
				m := rec[0]
				if m["object"] != "rv" || m["caller"] != caller || fmt.Sprint(m["token"]) != fmt.Sprint(l.Token) ||
					!strings.Contains(fmt.Sprint(m["reason"]), "hung since 02:00") {
					t.Errorf("%s audit line = %v, want object rv, token %d, caller %s", name, m, l.Token, caller)
				}
			}
			if v := via.metric("baton_revocations_total", "result=requested"); v != 1 {
				t.Errorf("requested revocations on the sidecar asked = %v, want 1", v)
			}
			if v := a.metric("baton_revocations_total", "result=applied"); v != 1 {
				t.Errorf("applied revocations on the holder's sidecar = %v, want 1", v)
			}
		})
	}
}

// TestRevokeRefused: no holder is a 404; a holder that is not a Baton grant
// (a privateLock as the original plugin writes it) is a 409 that says it
// cannot be revoked safely, and its node is left untouched.
func TestRevokeRefused(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))

	if e := decodeError(t, s.mustCall(404, "POST", "/v1/locks/free/revoke", `{"reason":"x"}`)); e.Kind != api.NoNode {
		t.Errorf("free object: %+v", e)
	}
	if e := decodeError(t, s.mustCall(400, "POST", "/v1/locks/free/revoke", `{"reason":"x","bogus":1}`)); e.Kind != api.BadRequest {
		t.Errorf("unknown field: %+v", e)
	}
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		t.Fatal(err)
	}
	if _, err := conn.Create(root+"/plug", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create(root+"/plug/privateLock", []byte("plugin-holder"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	e := decodeError(t, s.mustCall(409, "POST", "/v1/locks/plug/revoke", `{"reason":"x"}`))
	if e.Kind != api.Conflict || !strings.Contains(e.Message, "cannot be revoked safely") || e.Holder == nil {
		t.Errorf("plugin holder: %+v", e)
	}
	data, st, err := conn.Get(root + "/plug/privateLock")
	if err != nil || string(data) != "plugin-holder" || st.Version != 0 {
		t.Errorf("the plugin's privateLock changed: %q version %d %v", data, st.Version, err)
	}
	_ = conn.Delete(root+"/plug/privateLock", -1)
	_ = conn.Delete(root+"/plug", -1)
	if v := s.metric("baton_revocations_total", "result=refused"); v != 2 {
		t.Errorf("refused revocations = %v, want 2", v)
	}
}
