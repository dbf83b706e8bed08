package sidecar

import (
	"strings"
	"testing"

	"github.com/batonhq/baton/props"
)

// TestAuthPolicy: the properties' allow-lists as the sidecar applies them.
func TestAuthPolicy(t *testing.T) {
	const self = 990
	def := props.Defaults()
	custom := props.Defaults()
	custom.AuthAdminUIDs, custom.AuthAdminGIDs = []uint32{1001}, []uint32{2000}
	custom.AuthClientUIDs, custom.AuthClientGIDs = []uint32{1002}, []uint32{3000}
	noRoot := props.Defaults()
	noRoot.AuthAdminUIDs = nil
	p := func(uid, gid uint32, groups ...uint32) peer {
		return peer{uid: uid, gid: gid, groups: groups, known: true, groupsKnown: true, pid: 42}
	}
	for _, tc := range []struct {
		name          string
		cfg           props.Config
		who           peer
		admin, client bool
	}{
		{"defaults: root", def, p(0, 0), true, true},
		{"defaults: the sidecar's uid", def, p(self, 5), true, true},
		{"defaults: an app", def, p(1000, 1000), false, true},
		{"defaults: unknown credentials", def, peer{}, false, true},
		{"admin.uids empty: root is not an admin", noRoot, p(0, 0), false, true},
		{"admin.uids empty: the sidecar's uid still is", noRoot, p(self, 0), true, true},
		{"custom: admin by uid", custom, p(1001, 1001), true, true},
		{"custom: admin by primary gid", custom, p(1500, 2000), true, true},
		{"custom: admin by supplementary group", custom, p(1500, 1500, 7, 2000), true, true},
		{"custom: root not listed", custom, p(0, 0), false, false},
		{"custom: client by uid", custom, p(1002, 1002), false, true},
		{"custom: client by supplementary group", custom, p(1600, 1600, 3000), false, true},
		{"custom: neither", custom, p(1700, 1700, 4000), false, false},
		{"custom: unknown credentials", custom, peer{}, false, false},
	} {
		a := authPolicyOf(&tc.cfg, self)
		if got := a.may(tc.who, actRevoke); got != tc.admin {
			t.Errorf("%s: may revoke = %v, want %v", tc.name, got, tc.admin)
		}
		if got := a.may(tc.who, actAcquire); got != tc.client {
			t.Errorf("%s: may acquire = %v, want %v", tc.name, got, tc.client)
		}
	}
}

func TestForbiddenMessage(t *testing.T) {
	e := forbidden(peer{uid: 1001, gid: 1001, pid: 7, known: true}, actDrain)
	if e.Status != 403 || e.Body.Action != "drain" || e.Body.Key != "sidecar.auth.admin.uids" ||
		e.Body.Message != "uid=1001 gid=1001 pid=7 may not drain: it is an admin action; list the uid in sidecar.auth.admin.uids or a group of it in sidecar.auth.admin.gids to allow it" {
		t.Errorf("forbidden(drain) = %d %+v", e.Status, e.Body)
	}
	e = forbidden(peer{uid: 1001, gid: 1001, known: true}, actAcquire)
	if e.Body.Key != "sidecar.auth.client.uids" || !strings.Contains(e.Body.Message, "pid=unknown (another pid namespace) may not acquire: it is a client action") {
		t.Errorf("forbidden(acquire) = %+v", e.Body)
	}
}

// TestUIDCaps: a take over the limit is refused and changes nothing; puts
// give slots back, per uid and per cap.
func TestUIDCaps(t *testing.T) {
	u := newUIDCaps(nil, nil) // take and put only: no limits read, nothing logged
	for i := range 3 {
		if n, ok := u.take(7, capLists, 3); !ok || n != i {
			t.Fatalf("take %d = %d %v", i, n, ok)
		}
	}
	if n, ok := u.take(7, capLists, 3); ok || n != 3 {
		t.Fatalf("take over the limit = %d %v, want 3 false", n, ok)
	}
	if _, ok := u.take(8, capLists, 3); !ok {
		t.Fatal("another uid refused")
	}
	if _, ok := u.take(7, capPolls, 3); !ok {
		t.Fatal("another cap refused")
	}
	u.put(7, capLists)
	if n, ok := u.take(7, capLists, 3); !ok || n != 2 {
		t.Fatalf("take after a put = %d %v", n, ok)
	}
	for range 3 {
		u.put(7, capLists)
	}
	u.put(7, capLists) // one too many: ignored
	u.put(7, capPolls)
	u.put(8, capLists)
	if len(u.use) != 0 {
		t.Errorf("counts left: %v", u.use)
	}
}
