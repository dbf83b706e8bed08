package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/props"
)

// Who may do what (SPEC §7). Every connection to the socket carries its
// caller's credentials, read once when it is accepted: SO_PEERCRED gives the
// pid, uid and primary gid the caller had when it connected, SO_PEERGROUPS
// (Linux ≥ 4.13) its supplementary groups at that moment. Nothing is read
// from /proc: a pid can be reused, a socket's credentials cannot change.
// Actions come in two classes, each with an allow-list of uids and gids:
//
//   - admin (sidecar.auth.admin.uids/.gids; the sidecar's own uid always):
//     revoke, drain, replay ops, list ops, preempt forcefully;
//   - client (sidecar.auth.client.uids/.gids; both empty = anyone who can
//     open the socket; admins always): everything else but the probes.
//
// On top of that a lease belongs to the uid that acquired it: renewing,
// releasing, reading, long-polling or re-entering it from another uid is
// refused (admins excepted).

// peer is the caller at the other end of a connection.
type peer struct {
	pid         int32    // 0 when not visible (another pid namespace)
	uid, gid    uint32   // valid when known
	groups      []uint32 // supplementary groups, when groupsKnown
	known       bool     // credentials read (SO_PEERCRED)
	groupsKnown bool     // supplementary groups read (SO_PEERGROUPS)
	inProcess   bool     // a request through Server.Handler, not the socket
}

// peerKey carries the caller (peer) in a connection's context.
type peerKey struct{}

// selfPeer is the caller of requests that do not come through the socket
// (Server.Handler used in process): the sidecar's own process, with its
// credentials, but no pid, so that its leases rely on expiry alone.
var selfPeer = peer{uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), known: true, inProcess: true}

func peerFrom(ctx context.Context) peer {
	if p, ok := ctx.Value(peerKey{}).(peer); ok {
		return p
	}
	return selfPeer
}

func pidFrom(ctx context.Context) int32 { return peerFrom(ctx).pid }

// String names the caller for logs and messages: "uid=1000 gid=1000
// pid=4242" (pid=unknown when not visible).
func (p peer) String() string {
	if !p.known {
		return "uid=unknown gid=unknown (credentials not readable on this platform)"
	}
	s := "uid=" + strconv.FormatUint(uint64(p.uid), 10) + " gid=" + strconv.FormatUint(uint64(p.gid), 10)
	switch {
	case p.inProcess:
		return s + " (in process)"
	case p.pid > 0:
		return s + " pid=" + strconv.Itoa(int(p.pid))
	}
	return s + " pid=unknown (another pid namespace)"
}

// who names the caller of a request for the audit log.
func who(ctx context.Context) string { return peerFrom(ctx).String() }

// action is something a caller asks for, and its class.
type action struct {
	name  string
	admin bool
}

var (
	actAcquire    = action{"acquire", false}
	actRenew      = action{"renew", false}
	actRelease    = action{"release", false}
	actInspect    = action{"inspect", false}
	actCheck      = action{"check", false}
	actListLeases = action{"list leases", false}
	actSubmit     = action{"submit ops", false}
	actGetOp      = action{"get ops", false}
	actRevoke     = action{"revoke", true}
	actDrain      = action{"drain", true}
	actReplay     = action{"replay ops", true}
	actDiscard    = action{"discard ops", true}
	actListOps    = action{"list ops", true}
	actForceful   = action{"preempt forcefully", true}
)

// Keys of the allow-lists.
const (
	keyAdminUIDs  = "sidecar.auth.admin.uids"
	keyAdminGIDs  = "sidecar.auth.admin.gids"
	keyClientUIDs = "sidecar.auth.client.uids"
	keyClientGIDs = "sidecar.auth.client.gids"
)

// authPolicy is who may do what: the properties' allow-lists and the
// sidecar's own uid (always an admin: a process with its uid can stop it
// or read its credentials anyway).
type authPolicy struct {
	self                                         uint32
	adminUIDs, adminGIDs, clientUIDs, clientGIDs []uint32
}

// authPolicyOf maps the properties to the policy (the one place the
// sidecar.auth.* keys are read). self is the sidecar's own uid.
func authPolicyOf(cfg *props.Config, self uint32) authPolicy {
	return authPolicy{self: self, adminUIDs: cfg.AuthAdminUIDs, adminGIDs: cfg.AuthAdminGIDs,
		clientUIDs: cfg.AuthClientUIDs, clientGIDs: cfg.AuthClientGIDs}
}

// authz decides, for the handlers, who may do what with the current
// configuration's allow-lists, and audit-logs each refusal.
type authz struct {
	cfg func() *props.Config
	log *slog.Logger
}

func (a authz) policy() authPolicy { return authPolicyOf(a.cfg(), selfPeer.uid) }

// inGroups reports whether p's primary or a supplementary group is in gids.
func (p peer) inGroups(gids []uint32) bool {
	if slices.Contains(gids, p.gid) {
		return true
	}
	for _, g := range p.groups {
		if slices.Contains(gids, g) {
			return true
		}
	}
	return false
}

func (a authPolicy) isAdmin(p peer) bool {
	if !p.known {
		return false
	}
	return p.uid == a.self || slices.Contains(a.adminUIDs, p.uid) || p.inGroups(a.adminGIDs)
}

func (a authPolicy) isClient(p peer) bool {
	if len(a.clientUIDs) == 0 && len(a.clientGIDs) == 0 {
		return true
	}
	if a.isAdmin(p) {
		return true
	}
	return p.known && (slices.Contains(a.clientUIDs, p.uid) || p.inGroups(a.clientGIDs))
}

// may reports whether p may do act.
func (a authPolicy) may(p peer, act action) bool {
	if act.admin {
		return a.isAdmin(p)
	}
	return a.isClient(p)
}

// forbidden is the 403 of a refused action, naming the key that allows it.
func forbidden(p peer, act action) *httpError {
	class, uids, gids := "client", keyClientUIDs, keyClientGIDs
	if act.admin {
		class, uids, gids = "admin", keyAdminUIDs, keyAdminGIDs
	}
	e := newError(api.Forbidden, "%s may not %s: it is an %s action; list the uid in %s or a group of it in %s to allow it",
		p, act.name, class, uids, gids)
	if class == "client" {
		e.Body.Message = fmt.Sprintf("%s may not %s: it is a client action, and %s / %s list who may; add the uid to %s or a group of it to %s",
			p, act.name, uids, gids, uids, gids)
	}
	e.Body.Action, e.Body.Key = act.name, uids
	return e
}

// authorize refuses (403) a caller that may not do act; the refusal is
// audit-logged. The zero action (the probes) is allowed to anyone.
func (a authz) authorize(r *http.Request, act action) error {
	p := peerFrom(r.Context())
	if act.name == "" || a.policy().may(p, act) {
		return nil
	}
	auditRefused(a.log, r, act)
	return forbidden(p, act)
}

// auditRefused writes the audit line of a request refused because its
// caller may not do act.
func auditRefused(log *slog.Logger, r *http.Request, act action) {
	p := peerFrom(r.Context())
	log.Warn("audit: request refused: not allowed", "action", act.name, "method", r.Method, "path", r.URL.Path,
		"caller", p.String(), "uid", p.uid, "gid", p.gid)
}

// owner is who acquired a lease: its uid and gid (op deliveries: none).
type owner struct {
	uid, gid uint32
	set      bool
}

func ownerOf(p peer) owner { return owner{uid: p.uid, gid: p.gid, set: p.known} }

// checkOwner refuses (403) act on l by a caller other than the uid that
// acquired it, unless the caller is an admin. An op delivery's lease has
// no owner: whoever holds its id may use it (the id is the capability).
func (a authz) checkOwner(r *http.Request, l *lease, act action) error {
	o := l.owner
	p := peerFrom(r.Context())
	if !o.set || (p.known && p.uid == o.uid) || a.policy().isAdmin(p) {
		return nil
	}
	a.log.Warn("audit: request refused: the lease belongs to another uid", "action", act.name, "lease_object", l.g.Object(),
		"owner_uid", o.uid, "caller", p.String(), "uid", p.uid, "gid", p.gid)
	e := newError(api.Forbidden, "%s may not %s lease on %q: it belongs to uid %d, which acquired it (admins may: %s, %s)",
		p, act.name, l.g.Object(), o.uid, keyAdminUIDs, keyAdminGIDs)
	e.Body.Action, e.Body.Key = act.name, keyAdminUIDs
	return e
}
