package sidecar_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/sidecar"
)

// TestBadInput: malformed or out-of-range requests answer 4xx in the error
// shape, naming the field; nothing is created in ZooKeeper; the server keeps
// serving.
func TestBadInput(t *testing.T) {
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	long := strings.Repeat("x", 257)
	huge := `{"info":"` + strings.Repeat("x", api.MaxBody) + `"}`
	ctl := url.PathEscape("a\x01b")
	badUTF8 := "%FF%FE"
	acq := "/v1/locks/o/acquire"
	cases := []struct {
		name, method, path, body string
		status                   int
		kind, field              string
	}{
		{"malformed JSON", "POST", acq, `{"type":`, 400, api.BadRequest, "body"},
		{"not JSON", "POST", acq, `type=foreground`, 400, api.BadRequest, "body"},
		{"JSON array", "POST", acq, `[]`, 400, api.BadRequest, "body"},
		{"JSON string", "POST", acq, `"x"`, 400, api.BadRequest, "body"},
		{"trailing data", "POST", acq, `{}{}`, 400, api.BadRequest, "body"},
		{"unknown field", "POST", acq, `{"wait":5}`, 400, api.BadRequest, "wait"},
		{"unknown field lease", "POST", acq, `{"lease":5}`, 400, api.BadRequest, "lease"},
		{"wait_ms string", "POST", acq, `{"wait_ms":"100"}`, 400, api.BadRequest, "wait_ms"},
		{"wait_ms fraction", "POST", acq, `{"wait_ms":1.5}`, 400, api.BadRequest, "wait_ms"},
		{"wait_ms negative", "POST", acq, `{"wait_ms":-1}`, 400, api.BadRequest, "wait_ms"},
		{"wait_ms over 600000", "POST", acq, `{"wait_ms":600001}`, 400, api.BadRequest, "wait_ms"},
		{"wait_ms beyond int64", "POST", acq, `{"wait_ms":99999999999999999999}`, 400, api.BadRequest, "wait_ms"},
		{"lease_ms zero", "POST", acq, `{"lease_ms":0}`, 400, api.BadRequest, "lease_ms"},
		{"lease_ms negative", "POST", acq, `{"lease_ms":-5}`, 400, api.BadRequest, "lease_ms"},
		{"lease_ms over max", "POST", acq, `{"lease_ms":600001}`, 400, api.BadRequest, "lease_ms"},
		{"lease_ms bool", "POST", acq, `{"lease_ms":true}`, 400, api.BadRequest, "lease_ms"},
		{"type unknown", "POST", acq, `{"type":"urgent"}`, 400, api.BadRequest, "type"},
		{"type number", "POST", acq, `{"type":1}`, 400, api.BadRequest, "type"},
		{"info number", "POST", acq, `{"info":7}`, 400, api.BadRequest, "info"},
		{"info too long", "POST", acq, `{"info":"` + strings.Repeat("i", 4097) + `"}`, 400, api.BadRequest, "info"},
		{"object too long", "POST", "/v1/locks/" + long + "/acquire", ``, 400, api.BadRequest, "object"},
		{"object empty", "POST", "/v1/locks//acquire", ``, 400, api.BadRequest, "object"},
		{"object control char", "POST", "/v1/locks/" + ctl + "/acquire", ``, 400, api.BadRequest, "object"},
		{"object bad UTF-8", "POST", "/v1/locks/" + badUTF8 + "/acquire", ``, 400, api.BadRequest, "object"},
		{"inspect bad object", "GET", "/v1/locks/" + long, ``, 400, api.BadRequest, "object"},
		{"body over 1 MiB", "POST", acq, huge, 413, api.PayloadTooLarge, "body"},
		{"renew body over 1 MiB", "POST", "/v1/leases/x/renew", huge, 413, api.PayloadTooLarge, "body"},
		{"renew unknown field", "POST", "/v1/leases/x/renew", `{"lease":1}`, 400, api.BadRequest, "lease"},
		{"renew lease_ms zero", "POST", "/v1/leases/x/renew", `{"lease_ms":0}`, 400, api.BadRequest, "lease_ms"},
		{"renew unknown lease", "POST", "/v1/leases/nope/renew", ``, 404, api.NoNode, ""},
		{"get unknown lease", "GET", "/v1/leases/0123456789abcdef.0123", ``, 404, api.NoNode, ""},
		{"delete unknown lease", "DELETE", "/v1/leases/" + s.srv.Incarnation() + ".0123456789abcdef0123456789abcdef", ``, 404, api.NoNode, ""},
		{"long-poll bad wait", "GET", "/v1/leases/x?wait=forever", ``, 400, api.BadRequest, "wait"},
		{"long-poll bad timeout", "GET", "/v1/leases/x?wait=lost&timeout_ms=soon", ``, 400, api.BadRequest, "timeout_ms"},
		{"long-poll timeout too long", "GET", "/v1/leases/x?wait=lost&timeout_ms=600001", ``, 400, api.BadRequest, "timeout_ms"},
		{"timeout without wait", "GET", "/v1/leases/x?timeout_ms=5", ``, 400, api.BadRequest, "timeout_ms"},
		{"unknown query parameter", "GET", "/v1/locks?prefx=a", ``, 400, api.BadRequest, "prefx"},
		{"list limit zero", "GET", "/v1/locks?limit=0", ``, 400, api.BadRequest, "limit"},
		{"list limit huge", "GET", "/v1/locks?limit=1001", ``, 400, api.BadRequest, "limit"},
		{"list limit text", "GET", "/v1/locks?limit=ten", ``, 400, api.BadRequest, "limit"},
		{"GET acquire", "GET", acq, ``, 405, api.MethodNotAllowed, ""},
		{"PUT lock", "PUT", "/v1/locks/o", ``, 405, api.MethodNotAllowed, ""},
		{"POST lease", "POST", "/v1/leases/x", ``, 405, api.MethodNotAllowed, ""},
		{"GET renew", "GET", "/v1/leases/x/renew", ``, 405, api.MethodNotAllowed, ""},
		{"DELETE locks", "DELETE", "/v1/locks", ``, 405, api.MethodNotAllowed, ""},
		{"POST healthz", "POST", "/healthz", ``, 405, api.MethodNotAllowed, ""},
		// Query parameters no endpoint takes are a 400 naming them, before anything is done (issue 9).
		{"acquire query type", "POST", acq + "?type=background&wait_ms=100", ``, 400, api.BadRequest, "type"},
		{"acquire query wait_ms", "POST", acq + "?wait_ms=100", ``, 400, api.BadRequest, "wait_ms"},
		{"acquire query flag", "POST", acq + "?force", ``, 400, api.BadRequest, "force"},
		{"renew query", "POST", "/v1/leases/x/renew?lease_ms=5", ``, 400, api.BadRequest, "lease_ms"},
		{"release query", "DELETE", "/v1/leases/x?force=1", ``, 400, api.BadRequest, "force"},
		{"get lease unknown query", "GET", "/v1/leases/x?wait=lost&timeout=5", ``, 400, api.BadRequest, "timeout"},
		{"inspect query", "GET", "/v1/locks/o?limit=5", ``, 400, api.BadRequest, "limit"},
		{"healthz query", "GET", "/healthz?verbose=1", ``, 400, api.BadRequest, "verbose"},
		{"readyz query", "GET", "/readyz?verbose=1", ``, 400, api.BadRequest, "verbose"},
		{"drain query", "POST", "/v1/drain?grace_ms=1", ``, 400, api.BadRequest, "grace_ms"},
		{"drain unknown field", "POST", "/v1/drain", `{"grace_ms":1}`, 400, api.BadRequest, "grace_ms"},
		{"GET drain", "GET", "/v1/drain", ``, 405, api.MethodNotAllowed, ""},
		{"bind unknown", "POST", acq, `{"bind":"pid"}`, 400, api.BadRequest, "bind"},
		{"bind number", "POST", acq, `{"bind":1}`, 400, api.BadRequest, "bind"},
		{"root", "GET", "/", ``, 404, api.NotFound, ""},
		{"unknown path", "GET", "/v1/nope", ``, 404, api.NotFound, ""},
		{"too deep", "POST", "/v1/locks/o/acquire/now", ``, 404, api.NotFound, ""},
		{"release path", "POST", "/v1/locks/o/release", ``, 404, api.NotFound, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, b := s.call(c.method, c.path, c.body)
			if st != c.status {
				t.Fatalf("%s %.60s %.60s = %d %s, want %d", c.method, c.path, c.body, st, b, c.status)
			}
			e := decodeError(t, b)
			if e.Kind != c.kind || e.Field != c.field {
				t.Errorf("error %q field %q (%s), want %q field %q", e.Kind, e.Field, e.Message, c.kind, c.field)
			}
			if c.field != "" && !strings.Contains(e.Message, c.field) {
				t.Errorf("message %q does not name %q", e.Message, c.field)
			}
		})
	}
	if left, _, err := conn.Children(root); err == nil && len(left) > 0 {
		t.Errorf("bad requests created %v under %s", left, root)
	}
	// Still serving.
	s.mustCall(200, "GET", "/healthz", "")
	s.release(s.acquire("o", `{"wait_ms":1000}`).LeaseID)
	assertNoLeftovers(t, conn, root)
}

// FuzzAcquire: whatever the object and body, POST acquire answers a lease
// or a 4xx in the error shape — never a 5xx.
func FuzzAcquire(f *testing.F) {
	for _, seed := range []struct{ obj, body string }{
		{"o", ``}, {"o", `{}`}, {"a/b", `{"type":"background","wait_ms":0}`}, {"..", `{"lease_ms":100}`},
		{"o", `{"wait_ms":-1}`}, {"o", `{"info":"x","lease_ms":1e3}`}, {"", `{}`}, {"o", `{"type":null}`},
		{"ü", `{"wait_ms":600000,"lease_ms":600000}`}, {"o", `{"x":1}`}, {"o", `nul`}, {"o", `{"info":"\u0000"}`},
	} {
		f.Add(seed.obj, seed.body)
	}
	cfg := testConfig(f, testRoot(f), "sc-fuzz")
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: testLogger(f)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, obj, body string) {
		req := httptest.NewRequestWithContext(context.Background(), "POST", "/v1/locks/"+url.PathEscape(obj)+"/acquire", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusOK:
			var l api.Lease
			if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || l.LeaseID == "" || l.Object != obj {
				t.Fatalf("200 without a lease for %q: %s", obj, rec.Body)
			}
			rel := httptest.NewRecorder()
			h.ServeHTTP(rel, httptest.NewRequest("DELETE", "/v1/leases/"+l.LeaseID, nil))
			if rel.Code != 200 {
				t.Fatalf("release: %d %s", rel.Code, rel.Body)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Kind == "" || e.Message == "" {
				t.Fatalf("%d without the error shape: %s", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("obj %q body %q: %d %s", obj, body, rec.Code, rec.Body)
		}
	})
}
