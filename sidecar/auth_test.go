package sidecar_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
)

// Callers under other uids are real processes: curl run with
// SysProcAttr.Credential (so the sidecar reads their uid, gid and groups
// with SO_PEERCRED / SO_PEERGROUPS), on the unix socket only.

// needRoot skips a test that must start processes under other uids.
func needRoot(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run callers under other uids")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	return curl
}

// openSocket makes cfg's socket reachable by every uid (tests only: the
// allow-lists, not the file mode, are under test here).
func openSocket(t *testing.T, cfg *props.Config) {
	t.Helper()
	cfg.SocketMode = 0o666
	if err := os.Chmod(filepath.Dir(cfg.SocketPath), 0o755); err != nil {
		t.Fatal(err)
	}
}

// caller is a process identity: uid, primary gid, supplementary groups.
type caller struct {
	uid, gid uint32
	groups   []uint32
}

func uid(n uint32) caller { return caller{uid: n, gid: n} }

// curlCmd builds curl as c against the socket.
func (c caller) curlCmd(t *testing.T, ctx context.Context, socket, method, path, body string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	curl := needRoot(t)
	args := []string{"-sS", "--unix-socket", socket, "-X", method, "-o", "-", "-w", "\n%{http_code}", "http://sidecar" + path}
	if body != "" {
		args = append(args, "--data-binary", body)
	}
	cmd := exec.CommandContext(ctx, curl, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// call runs one request as c and returns the status and body.
func (c caller) call(t *testing.T, socket, method, path, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, out := c.curlCmd(t, ctx, socket, method, path, body)
	if err := cmd.Run(); err != nil {
		t.Fatalf("curl as uid %d: %v: %s", c.uid, err, out)
	}
	return parseCurl(t, out.Bytes())
}

func parseCurl(t *testing.T, b []byte) (int, []byte) {
	t.Helper()
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		t.Fatalf("curl output without a status: %q", b)
	}
	st, err := strconv.Atoi(string(b[i+1:]))
	if err != nil {
		t.Fatalf("curl output without a status: %q", b)
	}
	return st, b[:i]
}

// errBody decodes an error answer loosely.
func errBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return m
}

// wantRefused checks a refusal: status, kind, and the key it names (in the
// message and the key member).
func wantRefused(t *testing.T, what string, st int, b []byte, status int, kind, key string) {
	t.Helper()
	m := errBody(t, b)
	if st != status || m["error"] != kind || m["key"] != key || !strings.Contains(fmt.Sprint(m["message"]), key) {
		t.Errorf("%s: %d %s, want %d %s naming %s", what, st, b, status, kind, key)
	}
}

// TestAuthAdminActionsRefused is issue 18's reproduction: an app (uid
// 1001) on node B revoked node A's lease through B's sidecar, drained B,
// and could replay and list ops. Now each is a 403 naming the action and
// sidecar.auth.admin.uids, the holder keeps its lock, B keeps serving, and
// B's audit lines name the caller's uid and gid. Without authorization the
// revoke answered 202 and the holder was told "revoked".
func TestAuthAdminActionsRefused(t *testing.T) {
	needRoot(t)
	root := testRoot(t)
	a := start(t, testConfig(t, root, "sc-a"))
	var lb logBuf
	cfgB := testConfig(t, root, "sc-b")
	openSocket(t, &cfgB)
	b := start(t, cfgB, withLog(&lb))
	held := a.acquire("victim", `{"lease_ms":60000}`) // this process: root

	app := uid(1001)
	sock := cfgB.SocketPath
	for _, tc := range []struct{ method, path, body, action string }{
		{"POST", "/v1/locks/victim/revoke", `{"reason":"mine now"}`, "revoke"},
		{"POST", "/v1/drain", ``, "drain"},
		{"GET", "/v1/ops", ``, "list ops"},
		{"POST", "/v1/ops/some-op/replay", ``, "replay ops"},
		{"POST", "/v1/locks/victim/acquire", `{"preempt":true,"forceful":true,"wait_ms":100}`, "preempt forcefully"},
	} {
		st, body := app.call(t, sock, tc.method, tc.path, tc.body)
		wantRefused(t, tc.method+" "+tc.path, st, body, 403, api.Forbidden, "sidecar.auth.admin.uids")
		if m := errBody(t, body); m["action"] != tc.action || !strings.Contains(fmt.Sprint(m["message"]), "uid=1001 gid=1001") {
			t.Errorf("%s %s: %s, want action %q and the caller uid=1001 gid=1001", tc.method, tc.path, body, tc.action)
		}
	}
	// The holder was told nothing and holds; B still serves.
	if l := decodeLease(t, a.mustCall(200, "GET", "/v1/leases/"+held.LeaseID, "")); l.State != api.StateHeld {
		t.Errorf("holder's lease after the refused revoke: %s %s, want held", l.State, l.Reason)
	}
	b.mustCall(200, "GET", "/readyz", "")

	refused := lb.lines("audit: request refused")
	if len(refused) != 5 {
		t.Errorf("%d refusal audit lines on B, want 5", len(refused))
	}
	for _, m := range refused {
		if fmt.Sprint(m["uid"]) != "1001" || fmt.Sprint(m["gid"]) != "1001" || !strings.HasPrefix(fmt.Sprint(m["caller"]), "uid=1001 gid=1001 pid=") {
			t.Errorf("audit line %v, want uid 1001, gid 1001 and the caller's pid", m)
		}
	}

	// What a client may do, it still may: inspect, acquire, release.
	if st, body := app.call(t, sock, "GET", "/v1/locks/victim", ""); st != 200 {
		t.Errorf("inspect as uid 1001: %d %s", st, body)
	}
	st, body := app.call(t, sock, "POST", "/v1/locks/app-own/acquire", `{}`)
	if st != 200 {
		t.Fatalf("acquire as uid 1001: %d %s", st, body)
	}
	own := decodeLease(t, body)
	if st, body := app.call(t, sock, "DELETE", "/v1/leases/"+own.LeaseID, ""); st != 200 {
		t.Errorf("release own lease as uid 1001: %d %s", st, body)
	}

	// Root (an admin) may revoke; its audit line names uid 0 gid 0.
	b.mustCall(202, "POST", "/v1/locks/victim/revoke", `{"reason":"operator"}`)
	req := lb.lines("audit: revocation requested")
	if len(req) != 1 || !strings.HasPrefix(fmt.Sprint(req[0]["caller"]), fmt.Sprintf("uid=0 gid=0 pid=%d", os.Getpid())) {
		t.Errorf("revocation audit lines %v, want one naming uid=0 gid=0 pid=%d", req, os.Getpid())
	}
}

// TestAuthLeaseOwner: a lease belongs to the uid that acquired it. Another
// uid's renew, release, read, long-poll and re-entry are refused 403 (with
// the lease id known); the owner and an admin may.
func TestAuthLeaseOwner(t *testing.T) {
	needRoot(t)
	cfg := testConfig(t, testRoot(t), "sc-own")
	openSocket(t, &cfg)
	s := start(t, cfg)
	sock := cfg.SocketPath
	owner, other := uid(1001), uid(1002)
	st, body := owner.call(t, sock, "POST", "/v1/locks/mine/acquire", `{"lease_ms":60000}`)
	if st != 200 {
		t.Fatalf("acquire: %d %s", st, body)
	}
	l := decodeLease(t, body)
	for _, tc := range []struct{ method, path, body, action string }{
		{"POST", "/v1/leases/" + l.LeaseID + "/renew", `{}`, "renew"},
		{"DELETE", "/v1/leases/" + l.LeaseID, ``, "release"},
		{"GET", "/v1/leases/" + l.LeaseID, ``, "inspect"},
		{"GET", "/v1/leases/" + l.LeaseID + "?wait=lost&timeout_ms=100", ``, "inspect"},
		{"POST", "/v1/locks/mine/acquire", `{"lease_id":"` + l.LeaseID + `"}`, "re-enter"},
	} {
		st, body := other.call(t, sock, tc.method, tc.path, tc.body)
		wantRefused(t, "uid 1002: "+tc.method+" "+tc.path, st, body, 403, api.Forbidden, "sidecar.auth.admin.uids")
		if m := errBody(t, body); m["action"] != tc.action || !strings.Contains(fmt.Sprint(m["message"]), "belongs to uid 1001") {
			t.Errorf("uid 1002: %s %s: %s, want action %q naming the owner uid 1001", tc.method, tc.path, body, tc.action)
		}
	}
	// Still held once, by its owner.
	if st, body := owner.call(t, sock, "POST", "/v1/leases/"+l.LeaseID+"/renew", `{}`); st != 200 || decodeLease(t, body).Holds != 1 {
		t.Errorf("owner's renew: %d %s, want 200 with 1 hold", st, body)
	}
	// An admin (root, this process) may renew it and release it.
	s.mustCall(200, "POST", "/v1/leases/"+l.LeaseID+"/renew", `{}`)
	s.release(l.LeaseID)
}

// TestAuthAllowLists: the allow-lists let callers through. Admins by gid,
// primary or supplementary (SO_PEERGROUPS); a client list shuts out the
// uids it does not name (naming sidecar.auth.client.uids) but never admins.
func TestAuthAllowLists(t *testing.T) {
	needRoot(t)
	cfg := testConfig(t, testRoot(t), "sc-allow")
	cfg.AuthAdminUIDs = []uint32{1001}
	cfg.AuthAdminGIDs = []uint32{2000}
	cfg.AuthClientUIDs = []uint32{1002}
	openSocket(t, &cfg)
	s := start(t, cfg)
	sock := cfg.SocketPath

	held := s.acquire("x", `{"lease_ms":60000}`)
	// uid 1001 is an admin by uid: it may revoke.
	if st, body := uid(1001).call(t, sock, "POST", "/v1/locks/x/revoke", `{}`); st != 202 {
		t.Errorf("revoke by admin uid 1001: %d %s, want 202", st, body)
	}
	waitFor(t, 10*time.Second, "revoked lease lost", func() bool {
		st, _ := s.call("GET", "/v1/leases/"+held.LeaseID, "")
		return st == 410
	})
	for _, c := range []caller{
		{uid: 1003, gid: 2000},                         // primary group
		{uid: 1004, gid: 1004, groups: []uint32{2000}}, // supplementary group
	} {
		st, body := c.call(t, sock, "GET", "/v1/ops", "")
		// Past authorization: ops are disabled on this sidecar (503).
		if st != 503 || errBody(t, body)["error"] != api.OpsDisabled {
			t.Errorf("list ops as uid %d gid %d groups %v: %d %s, want past the 403 (503 OpsDisabled)", c.uid, c.gid, c.groups, st, body)
		}
	}
	if st, body := uid(1005).call(t, sock, "GET", "/v1/ops", ""); st != 403 {
		t.Errorf("list ops as uid 1005 (no admin group): %d %s, want 403", st, body)
	}
	// Clients: 1002 is listed, 1005 is not; admins always are clients.
	if st, body := uid(1002).call(t, sock, "GET", "/v1/locks/x", ""); st != 200 {
		t.Errorf("inspect as listed client 1002: %d %s", st, body)
	}
	st, body := uid(1005).call(t, sock, "POST", "/v1/locks/y/acquire", `{}`)
	wantRefused(t, "acquire as unlisted uid 1005", st, body, 403, api.Forbidden, "sidecar.auth.client.uids")
	// The fencing check is a client action.
	if st, body := uid(1002).call(t, sock, "GET", "/v1/locks/x/check?token=1", ""); st != 200 {
		t.Errorf("check as listed client 1002: %d %s", st, body)
	}
	st, body = uid(1005).call(t, sock, "GET", "/v1/locks/x/check?token=1", "")
	wantRefused(t, "check as unlisted uid 1005", st, body, 403, api.Forbidden, "sidecar.auth.client.uids")
	if st, body := (caller{uid: 1003, gid: 2000}).call(t, sock, "GET", "/v1/locks/x", ""); st != 200 {
		t.Errorf("inspect as admin (gid 2000): %d %s", st, body)
	}
}

// background starts a request as c that blocks (a wait, a long-poll); it
// is killed when the test ends.
func (c caller) background(t *testing.T, socket, method, path, body string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd, _ := c.curlCmd(t, ctx, socket, method, path, body)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
}

// TestCapsPerUID: one uid cannot starve the others. Over each per-uid cap
// a request is refused 429 TooManyRequests naming the key that raises it
// and nothing is started; another uid (and an admin) still gets through.
func TestCapsPerUID(t *testing.T) {
	needRoot(t)
	cfg := testConfig(t, testRoot(t), "sc-caps")
	cfg.MaxWaitersPerUID, cfg.MaxLeasesPerUID, cfg.MaxPollsPerUID, cfg.MaxConnectionsPerUID = 1, 2, 1, 2
	openSocket(t, &cfg)
	s := start(t, cfg)
	sock := cfg.SocketPath
	s.acquire("busy", `{"lease_ms":60000}`) // held by root and uid 1009: waits on them last
	if st, body := uid(1009).call(t, sock, "POST", "/v1/locks/busy2/acquire", `{"lease_ms":60000}`); st != 200 {
		t.Fatalf("busy2: %d %s", st, body)
	}

	t.Run("leases", func(t *testing.T) {
		app := uid(1001)
		st, body := app.call(t, sock, "POST", "/v1/locks/l1/acquire", `{}`)
		if st != 200 {
			t.Fatalf("first lease: %d %s", st, body)
		}
		l1 := decodeLease(t, body)
		if st, body := app.call(t, sock, "POST", "/v1/locks/l1b/acquire", `{}`); st != 200 {
			t.Fatalf("second lease: %d %s", st, body)
		}
		st, body = app.call(t, sock, "POST", "/v1/locks/l2/acquire", `{}`)
		wantRefused(t, "third lease of uid 1001", st, body, 429, api.TooManyRequests, "sidecar.max.leases.per.uid")
		if st, body := uid(1005).call(t, sock, "POST", "/v1/locks/l2/acquire", `{}`); st != 200 {
			t.Errorf("another uid's lease: %d %s", st, body)
		}
		// Released: the slot is back.
		if st, body := app.call(t, sock, "DELETE", "/v1/leases/"+l1.LeaseID, ""); st != 200 {
			t.Fatalf("release: %d %s", st, body)
		}
		if st, body := app.call(t, sock, "POST", "/v1/locks/l3/acquire", `{}`); st != 200 {
			t.Errorf("lease after the release: %d %s", st, body)
		}
	})
	t.Run("waiters", func(t *testing.T) {
		app := uid(1002)
		app.background(t, sock, "POST", "/v1/locks/busy/acquire", `{"wait_ms":60000}`)
		waitFor(t, 10*time.Second, "uid 1002 waiting on busy", func() bool {
			var st api.LockStatus
			_ = json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/busy", ""), &st)
			return len(st.Waiters) == 1
		})
		st, body := app.call(t, sock, "POST", "/v1/locks/w2/acquire", `{"wait_ms":0}`)
		wantRefused(t, "second wait of uid 1002", st, body, 429, api.TooManyRequests, "sidecar.max.waiters.per.uid")
	})
	t.Run("polls and connections", func(t *testing.T) {
		app := uid(1003)
		st, body := app.call(t, sock, "POST", "/v1/locks/p1/acquire", `{"lease_ms":60000}`)
		if st != 200 {
			t.Fatalf("lease: %d %s", st, body)
		}
		l := decodeLease(t, body)
		polls := s.metric("baton_lease_polls_in_flight")
		app.background(t, sock, "GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=60000", "")
		waitFor(t, 10*time.Second, "uid 1003's long-poll", func() bool { return s.metric("baton_lease_polls_in_flight") == polls+1 })
		st, body = app.call(t, sock, "GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=60000", "")
		wantRefused(t, "second long-poll of uid 1003", st, body, 429, api.TooManyRequests, "sidecar.max.polls.per.uid")
		// Two connections open (the poll, and a wait): a third is refused
		// when it connects.
		app.background(t, sock, "POST", "/v1/locks/busy2/acquire", `{"wait_ms":60000}`)
		waitFor(t, 10*time.Second, "uid 1003 waiting on busy2", func() bool {
			var st api.LockStatus
			_ = json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/busy2", ""), &st)
			return len(st.Waiters) == 1
		})
		st, body = app.call(t, sock, "GET", "/v1/locks/p1", "")
		wantRefused(t, "third connection of uid 1003", st, body, 429, api.TooManyRequests, "sidecar.max.connections.per.uid")
		// Another uid, and an admin, still connect.
		if st, body := uid(1006).call(t, sock, "GET", "/v1/locks/p1", ""); st != 200 {
			t.Errorf("another uid: %d %s", st, body)
		}
		s.mustCall(200, "GET", "/v1/locks/p1", "")
	})
}

// TestListLeases: GET /v1/leases lists the caller's own leases (by uid);
// an admin's lists every lease, each with its owner's uid.
func TestListLeases(t *testing.T) {
	needRoot(t)
	cfg := testConfig(t, testRoot(t), "sc-list")
	openSocket(t, &cfg)
	s := start(t, cfg)
	sock := cfg.SocketPath
	var ids []string
	for i, c := range []caller{uid(1001), uid(1001), uid(1002)} {
		st, body := c.call(t, sock, "POST", fmt.Sprintf("/v1/locks/o%d/acquire", i), `{"lease_ms":60000}`)
		if st != 200 {
			t.Fatalf("acquire: %d %s", st, body)
		}
		ids = append(ids, decodeLease(t, body).LeaseID)
	}
	mine := s.acquire("o-root", `{"lease_ms":60000}`)
	list := func(c *caller) api.LeaseList {
		t.Helper()
		var st int
		var body []byte
		if c == nil {
			st, body = s.call("GET", "/v1/leases", "")
		} else {
			st, body = c.call(t, sock, "GET", "/v1/leases", "")
		}
		var ll api.LeaseList
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ll); st != 200 || err != nil {
			t.Fatalf("GET /v1/leases: %d %s (%v)", st, body, err)
		}
		return ll
	}
	got := func(ll api.LeaseList) []string {
		var out []string
		for _, l := range ll.Leases {
			out = append(out, fmt.Sprintf("%s:%d", l.Object, *l.UID))
		}
		return out
	}
	a := uid(1001)
	if ll := list(&a); ll.All || strings.Join(got(ll), " ") != "o0:1001 o1:1001" || ll.Leases[0].LeaseID != ids[0] {
		t.Errorf("uid 1001's leases: %+v, want o0 and o1 (its own)", got(ll))
	}
	b := uid(1003)
	if ll := list(&b); len(ll.Leases) != 0 {
		t.Errorf("uid 1003's leases: %v, want none", got(ll))
	}
	if ll := list(nil); !ll.All || strings.Join(got(ll), " ") != "o0:1001 o1:1001 o2:1002 o-root:0" {
		t.Errorf("admin's leases: %v, want all four with their uids", got(ll))
	}
	s.release(mine.LeaseID)
}

// TestConnectionCap: over sidecar.max.connections a new connection is
// answered 429 naming the key and closed; admins still connect.
func TestConnectionCap(t *testing.T) {
	needRoot(t)
	cfg := testConfig(t, testRoot(t), "sc-conns")
	cfg.MaxConnections = 1
	openSocket(t, &cfg)
	s := start(t, cfg)
	sock := cfg.SocketPath
	s.acquire("held", `{"lease_ms":60000}`)
	uid(1001).background(t, sock, "POST", "/v1/locks/held/acquire", `{"wait_ms":60000}`)
	waitFor(t, 10*time.Second, "uid 1001 waiting on held", func() bool {
		var st api.LockStatus
		_ = json.Unmarshal(s.mustCall(200, "GET", "/v1/locks/held", ""), &st)
		return len(st.Waiters) == 1
	})
	st, body := uid(1002).call(t, sock, "GET", "/v1/locks/held", "")
	wantRefused(t, "second connection (uid 1002)", st, body, 429, api.TooManyRequests, "sidecar.max.connections")
	s.mustCall(200, "GET", "/readyz", "") // root: an admin
}

// TestReadTimeout: a body trickled slower than the read timeout is cut off
// (400 naming the body; the connection is not held), while a long-poll
// longer than the read timeout runs to its end (the deadline is lifted once
// the body is read: net/http would otherwise cancel it when it passes).
func TestReadTimeout(t *testing.T) {
	cfg := testConfig(t, testRoot(t), "sc-rt")
	s := start(t, cfg, func(o *sidecar.Options) { o.ReadTimeout = 300 * time.Millisecond })
	c, err := net.Dial("unix", cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/locks/slow/acquire HTTP/1.1\r\nHost: baton\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"field":"body"`) {
		t.Errorf("stalled body: %d %s, want 400 naming the body", resp.StatusCode, b)
	}
	l := s.acquire("poll", `{"lease_ms":60000}`)
	st, body := s.call("GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=1500", "")
	if st != 200 || decodeLease(t, body).State != api.StateHeld {
		t.Errorf("long-poll of 1.5 s with a 300 ms read timeout: %d %s, want 200 held", st, body)
	}
	s.release(l.LeaseID)
}
