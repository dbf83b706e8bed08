package sidecar

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRouter: the flat route table matches per unescaped segment (an
// object may hold %2F or be ".."), sets the path values, serves HEAD as
// GET, answers 404 when no pattern matches and 405 with the Allow of the
// patterns that match, and authorizes the route's action before its
// handler.
func TestRouter(t *testing.T) {
	var got string
	h := func(name string) handlerFunc {
		return func(w http.ResponseWriter, r *http.Request) error {
			got = name + " object=" + r.PathValue("object") + " id=" + r.PathValue("id")
			return nil
		}
	}
	var authorized []string
	auth := func(r *http.Request, act action) error { authorized = append(authorized, act.name); return nil }
	var errs []*httpError
	writeErr := func(w http.ResponseWriter, r *http.Request, err error) {
		he := err.(*httpError)
		errs = append(errs, he)
		w.WriteHeader(he.Status)
	}
	rt := newRouter([]route{
		{"GET", "/healthz", action{}, h("healthz")},
		{"GET", "/v1/locks/{object}", actInspect, h("inspect")},
		{"POST", "/v1/locks/{object}/acquire", actAcquire, h("acquire")},
		{"GET", "/v1/leases/{id}", actInspect, h("get")},
		{"DELETE", "/v1/leases/{id}", actRelease, h("delete")},
	}, auth, writeErr)
	for _, tc := range []struct {
		method, path string
		status       int
		want, allow  string
	}{
		{"GET", "/healthz", 200, "healthz object= id=", ""},
		{"HEAD", "/healthz", 200, "healthz object= id=", ""},
		{"GET", "/v1/locks/a%2Fb", 200, "inspect object=a/b id=", ""},
		{"GET", "/v1/locks/%2E%2E", 200, "inspect object=.. id=", ""},
		{"POST", "/v1/locks/acquire/acquire", 200, "acquire object=acquire id=", ""},
		{"POST", "/v1/locks/a%2Fb/%61cquire", 200, "acquire object=a/b id=", ""},
		{"DELETE", "/v1/leases/x.1", 200, "delete object= id=x.1", ""},
		{"PUT", "/v1/leases/x", 405, "", "DELETE, GET"},
		{"GET", "/v1/locks/a/acquire", 405, "", "POST"},
		{"GET", "/v1/locks/a/b/c", 404, "", ""},
		{"GET", "/v2/locks", 404, "", ""},
	} {
		got, errs, authorized = "", nil, nil
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, httptest.NewRequest(tc.method, "http://sidecar"+tc.path, nil))
		if rec.Code != tc.status || got != tc.want || rec.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s = %d %q Allow %q; want %d %q Allow %q", tc.method, tc.path, rec.Code, got, rec.Header().Get("Allow"),
				tc.status, tc.want, tc.allow)
		}
		if tc.status == 200 && len(authorized) != 1 {
			t.Errorf("%s %s: authorized %q, want the route's action once", tc.method, tc.path, authorized)
		}
		if tc.status != 200 && (len(errs) != 1 || len(authorized) != 0) {
			t.Errorf("%s %s: errors %v, authorized %q; want one error, nothing authorized", tc.method, tc.path, errs, authorized)
		}
	}
}
