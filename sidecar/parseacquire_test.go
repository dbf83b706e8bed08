package sidecar

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/props"
)

func parseAcquireRequest(t *testing.T, object, query, body string, caller *peer) acquireSpec {
	t.Helper()
	sp, err := parseAcquireOf(object, query, body, caller)
	if err != nil {
		t.Fatalf("parseAcquire(%q, %q): %v", object, body, err)
	}
	return sp
}

var parseCfg = func() *props.Config {
	c := props.Defaults()
	c.ForegroundTimeout, c.BackgroundTimeout = 500*time.Millisecond, 7*time.Second
	c.LeaseDefault, c.LeaseMax = 15*time.Second, time.Minute
	c.AuthAdminUIDs = []uint32{0}
	return &c
}()

func parseAcquireOf(object, query, body string, caller *peer) (acquireSpec, error) {
	r := httptest.NewRequest("POST", "/v1/locks/o/acquire"+query, strings.NewReader(body))
	r.SetPathValue("object", object)
	if caller != nil {
		r = r.WithContext(context.WithValue(r.Context(), peerKey{}, *caller))
	}
	return parseAcquire(r, parseCfg)
}

// TestParseAcquireRefusals: one row per refusal of parseAcquire, each
// naming its field (or, for the 403, the action and the key that allows it).
func TestParseAcquireRefusals(t *testing.T) {
	app := &peer{uid: 4242, gid: 4242, known: true, pid: 7}
	for _, tc := range []struct {
		name, object, query, body string
		caller                    *peer
		status                    int
		field, msg                string // field: api.Error.Field (403: .Action)
	}{
		{"empty object", "", "", ``, nil, 400, "object", ""},
		{"reserved object", "zookeeper/../x\x00", "", ``, nil, 400, "object", ""},
		{"query parameter", "o", "?wait_ms=5", ``, nil, 400, "wait_ms", "takes none"},
		{"malformed body", "o", "", `{"wait_ms":`, nil, 400, "body", "malformed"},
		{"unknown field", "o", "", `{"wait":5}`, nil, 400, "wait", "unknown field"},
		{"body over 1 MiB", "o", "", `{"info":"` + strings.Repeat("x", api.MaxBody) + `"}`, nil, 413, "body", ""},
		{"bad bind", "o", "", `{"bind":"thread"}`, nil, 400, "bind", `"thread" is not "process"`},
		{"bad type", "o", "", `{"type":"urgent"}`, nil, 400, "type", `"urgent"`},
		{"info too long", "o", "", `{"info":"` + strings.Repeat("i", lock.MaxInfoBytes+1) + `"}`, nil, 400, "info", "at most"},
		{"negative wait", "o", "", `{"wait_ms":-1}`, nil, 400, "wait_ms", "out of range"},
		{"wait over the maximum", "o", "", `{"wait_ms":999999999999}`, nil, 400, "wait_ms", "out of range"},
		{"lease 0", "o", "", `{"lease_ms":0}`, nil, 400, "lease_ms", "want 1 to 60000"},
		{"lease over sidecar.lease.max", "o", "", `{"lease_ms":60001}`, nil, 400, "lease_ms", "want 1 to 60000"},
		{"cleanup without preemptible", "o", "", `{"cleanup_ms":100}`, nil, 400, "cleanup_ms", "preemptible"},
		{"cleanup 0", "o", "", `{"preemptible":true,"cleanup_ms":0}`, nil, 400, "cleanup_ms", "out of range"},
		{"preempt_wait without preempt", "o", "", `{"preempt_wait_ms":5000}`, nil, 400, "preempt_wait_ms", "\"preempt\": true"},
		{"preempt_wait out of range", "o", "", `{"preempt":true,"wait_ms":9000,"preempt_wait_ms":-5}`, nil, 400, "preempt_wait_ms", "out of range"},
		{"forceful without preempt", "o", "", `{"forceful":true}`, nil, 400, "forceful", "\"preempt\": true"},
		{"background preempt", "o", "", `{"type":"background","preempt":true}`, nil, 400, "preempt", "only a foreground"},
		{"forceful by a client", "o", "", `{"preempt":true,"forceful":true,"wait_ms":100}`, app, 403, "preempt forcefully", "sidecar.auth.admin.uids"},
		{"preempt trying once", "o", "", `{"preempt":true,"wait_ms":0}`, nil, 400, "wait_ms", "(try once)"},
		{"preempt with a short default wait", "o", "", `{"preempt":true}`, nil, 400, "wait_ms", "zookeeper.foreground.task.timeout = 500"},
		{"bad mode", "o", "", `{"mode":"read"}`, nil, 400, "mode", `"read" is not "exclusive" or "shared"`},
		{"mode in capitals", "o", "", `{"mode":"SHARED"}`, nil, 400, "mode", `"SHARED" is not`},
		{"preempt_wait shorter than the margin", "o", "", `{"preempt":true,"wait_ms":9000,"preempt_wait_ms":999}`, nil, 400, "preempt_wait_ms", "cannot shorten"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseAcquireOf(tc.object, tc.query, tc.body, tc.caller)
			he, ok := err.(*httpError)
			if !ok {
				t.Fatalf("parseAcquire = %v, want a %d naming %q", err, tc.status, tc.field)
			}
			named := he.Body.Field
			if tc.status == 403 {
				named = he.Body.Action
			}
			if he.Status != tc.status || named != tc.field || !strings.Contains(he.Body.Message, tc.msg) {
				t.Errorf("parseAcquire = %d %s field %q action %q: %s; want %d naming %q with %q",
					he.Status, he.Body.Kind, he.Body.Field, he.Body.Action, he.Body.Message, tc.status, tc.field, tc.msg)
			}
		})
	}
}

// TestParseAcquireDefaults: what an accepted request asks for, with the
// defaults applied in parseAcquire only, and the one conversion of the
// wait to the engine's options (0: try once).
func TestParseAcquireDefaults(t *testing.T) {
	sp := parseAcquireRequest(t, "a/b", "", ``, nil)
	if sp.object != "a/b" || sp.typ != lock.Foreground || sp.wait != 500*time.Millisecond || sp.waitGiven || sp.length != 15*time.Second || sp.bind {
		t.Errorf("defaults: %+v", sp)
	}
	if o := sp.lockOptions(false, nil); o.Wait != 500*time.Millisecond || o.TryOnce {
		t.Errorf("default wait as engine options: %+v", o)
	}
	sp = parseAcquireRequest(t, "o", "", `{"type":"background","bind":"process","lease_ms":2000,"info":"i"}`, nil)
	if sp.typ != lock.Background || sp.wait != 7*time.Second || !sp.bind || sp.length != 2*time.Second || sp.info != "i" {
		t.Errorf("background: %+v", sp)
	}
	sp = parseAcquireRequest(t, "o", "", `{"wait_ms":0}`, nil)
	if o := sp.lockOptions(false, nil); sp.wait != 0 || !sp.waitGiven || !o.TryOnce || o.Wait != 0 {
		t.Errorf("wait_ms 0: spec %+v, engine options %+v; want try once", sp, o)
	}
	// A re-entry skips the preemption fields: it never waits.
	sp = parseAcquireRequest(t, "o", "", `{"lease_id":"x","cleanup_ms":5,"lease_ms":3000}`, nil)
	if sp.leaseID != "x" || sp.reenterLength != 3*time.Second {
		t.Errorf("re-entry: %+v", sp)
	}
	if sp = parseAcquireRequest(t, "o", "", `{"lease_id":"x"}`, nil); sp.reenterLength != 0 {
		t.Errorf("re-entry without lease_ms: length %v, want 0 (the lease's own)", sp.reenterLength)
	}
	sp = parseAcquireRequest(t, "o", "", `{"preemptible":true}`, nil)
	if o := sp.lockOptions(false, nil); !o.Preemptible || o.Cleanup != DefaultCleanup {
		t.Errorf("preemptible: %+v", o)
	}
	sp = parseAcquireRequest(t, "o", "", `{"preempt":true,"wait_ms":9000,"preempt_wait_ms":2000}`, nil)
	if o := sp.lockOptions(true, nil); o.Wait != 2*time.Second {
		t.Errorf("preempt_wait_ms with an ask standing: engine wait %v, want 2s", o.Wait)
	}
	if o := sp.lockOptions(false, nil); o.Wait != 9*time.Second {
		t.Errorf("preempt_wait_ms without an ask: engine wait %v, want 9s", o.Wait)
	}
	sp = parseAcquireRequest(t, "o", "", `{"preempt":true,"forceful":true,"wait_ms":9000}`, nil) // in process: an admin
	if !sp.forceful {
		t.Errorf("forceful by the sidecar's own uid: %+v", sp)
	}
}

// TestParseAcquireMode: "mode" reaches the engine's options as Shared
// (default exclusive) on a lock and a set, and is refused for a
// semaphore, naming the field.
func TestParseAcquireMode(t *testing.T) {
	for _, tc := range []struct {
		body   string
		shared bool
	}{{``, false}, {`{"mode":"exclusive"}`, false}, {`{"mode":"shared"}`, true}, {`{"mode":"shared","lease_id":"x"}`, true}} {
		sp := parseAcquireRequest(t, "o", "", tc.body, nil)
		if o := sp.lockOptions(false, nil); sp.shared != tc.shared || o.Shared != tc.shared {
			t.Errorf("%s: spec shared %v, engine Shared %v; want %v", tc.body, sp.shared, o.Shared, tc.shared)
		}
	}
	kinds := func(kind acquireKind, path, body string) (acquireSpec, error) {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		r.SetPathValue("name", "pool")
		return parseAcquireAs(r, parseCfg, kind)
	}
	sp, err := kinds(acquireSet, "/v1/locks/acquire", `{"objects":["b","a"],"mode":"shared"}`)
	if o := sp.lockOptions(false, nil); err != nil || !o.Shared || len(sp.objects) != 2 {
		t.Errorf("a shared set: %+v, %v; want every object shared", sp, err)
	}
	_, err = kinds(acquirePermit, "/v1/semaphores/pool/acquire", `{"permits":2,"mode":"shared"}`)
	if he, ok := err.(*httpError); !ok || he.Status != 400 || he.Body.Field != "mode" || !strings.Contains(he.Body.Message, "semaphore") {
		t.Errorf("a shared semaphore: %v, want a 400 naming mode", err)
	}
	if sp, err := kinds(acquirePermit, "/v1/semaphores/pool/acquire", `{"permits":2,"mode":"exclusive"}`); err != nil || sp.shared {
		t.Errorf("an exclusive semaphore: %+v, %v", sp, err)
	}
}
