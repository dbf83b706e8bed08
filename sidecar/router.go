package sidecar

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton/api"
)

// handlerFunc is an endpoint: it answers, or returns the error that the
// server's one error writer (errorWriter) answers with.
type handlerFunc func(http.ResponseWriter, *http.Request) error

// route is one endpoint of the API: a method, a path pattern, the action a
// caller must be allowed (auth.go; none for the probes, /metrics and the API
// reference, which anyone who can open the socket may read) and the handler.
// A pattern's "{name}" segment matches one path segment, unescaped, and sets
// the path value name: an object may contain "/" (as %2F) or be "..".
type route struct {
	method, pattern string
	act             action
	h               handlerFunc
}

// routes is the API, one line per endpoint (api/openapi.json documents it).
func (s *Server) routes() []route {
	prom := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	metrics := func(w http.ResponseWriter, r *http.Request) error { prom.ServeHTTP(w, r); return nil }
	// mounted is an endpoint a Mount serves (mountPoint.slot), wrapped by wrap when not nil.
	mounted := func(method, pattern string, act action, wrap func(handlerFunc) handlerFunc) route {
		h := s.ops.slot(method, pattern)
		if wrap != nil {
			h = wrap(h)
		}
		return route{method, pattern, act, h}
	}
	v := &views{eng: s.eng, leases: s.leases, caps: s.caps, drain: s.drain}
	return []route{
		{"GET", "/healthz", action{}, s.probe(false)},
		{"GET", "/readyz", action{}, s.probe(true)},
		{"GET", "/metrics", action{}, metrics},
		{"GET", "/v1/openapi.json", action{}, serveOpenAPI},
		{"POST", "/v1/drain", actDrain, s.startDrain},
		{"GET", "/v1/locks", actInspect, v.list},
		{"POST", "/v1/locks/acquire", actAcquire, s.detachable(s.acquire(acquireSet))}, // a set of objects (recipes.go); GET /v1/locks/acquire is the object "acquire"
		{"GET", "/v1/locks/{object}", actInspect, v.inspect},                           // with a query: the watch long-poll (watch.go)
		{"POST", "/v1/locks/{object}/acquire", actAcquire, s.detachable(s.acquire(acquireObject))},
		{"POST", "/v1/locks/{object}/revoke", actRevoke, s.revoke},
		{"GET", "/v1/locks/{object}/check", actCheck, v.check},
		{"POST", "/v1/semaphores/{name}/acquire", actAcquire, s.detachable(s.acquire(acquirePermit))},
		{"GET", "/v1/semaphores/{name}", actInspect, v.semaphore},
		{"GET", "/v1/leases", actListLeases, s.listLeases},
		{"GET", "/v1/leases/{id}", actInspect, s.getLease},
		{"DELETE", "/v1/leases/{id}", actRelease, s.deleteLease},
		{"POST", "/v1/leases/{id}/renew", actRenew, s.renewLease},
		mounted("POST", "/v1/ops", actSubmit, nil), // the op dispatcher's (Server.Mount)
		mounted("GET", "/v1/ops", actListOps, nil),
		mounted("GET", "/v1/ops/{id}", actGetOp, nil),
		mounted("POST", "/v1/ops/{id}/replay", actReplay, func(h handlerFunc) handlerFunc { return auditReplay(s.log, h) }),
		mounted("POST", "/v1/ops/{id}/discard", actDiscard, nil), // an admin action (SPEC §7): deletes a dead-lettered op for good
	}
}

// router serves a route table: it matches the path against every pattern,
// answers 404 when none matches and 405 (with Allow) when the method is not
// among those of the patterns that match; HEAD is served as GET.
type router struct {
	routes  []compiledRoute
	auth    func(*http.Request, action) error // authz.authorize
	writeEr func(http.ResponseWriter, *http.Request, error)
	stamps  *debugStamps // nil unless BATON_DEBUG_STAMPS (debugstamps.go)
}

type compiledRoute struct {
	route
	segs []string // the pattern split at "/"; "{name}" matches any one segment
}

func newRouter(routes []route, auth func(*http.Request, action) error, writeErr func(http.ResponseWriter, *http.Request, error)) *router {
	rt := &router{auth: auth, writeEr: writeErr}
	for _, r := range routes {
		rt.routes = append(rt.routes, compiledRoute{route: r, segs: strings.Split(r.pattern[1:], "/")})
	}
	return rt
}

// match reports whether the unescaped path segments match the pattern.
func (c *compiledRoute) match(segs []string) bool {
	if len(segs) != len(c.segs) {
		return false
	}
	for i, p := range c.segs {
		if !isWildcard(p) && p != segs[i] {
			return false
		}
	}
	return true
}

func isWildcard(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

// pathSegments splits the escaped path at "/" and unescapes each segment,
// so that an escaped "/" stays inside its segment; false if it is not a
// path this API can have.
func pathSegments(r *http.Request) ([]string, bool) {
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil {
			return nil, false
		}
		segs[i] = u
	}
	return segs, true
}

// ServeHTTP routes r: 404 when no pattern matches its path, 405 with Allow
// when none of those that match has its method; else it sets the path
// values, authorizes the route's action and calls its handler. Every
// error goes to the one error writer.
func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.stamps != nil {
		defer rt.stamps.add(r.Method, r.URL.Path, time.Now())
	}
	segs, ok := pathSegments(r)
	var hit, get *compiledRoute
	var allow []string
	for i := range rt.routes {
		c := &rt.routes[i]
		if !ok || !c.match(segs) {
			continue
		}
		allow = append(allow, c.method)
		switch c.method {
		case r.Method:
			hit = c
		case http.MethodGet:
			get = c
		}
	}
	if hit == nil && r.Method == http.MethodHead {
		hit = get
	}
	switch {
	case len(allow) == 0:
		rt.writeEr(w, r, newError(api.NotFound, "no such path %q; the API is under /v1/locks, /v1/semaphores, /v1/leases and /v1/ops, "+
			"plus /v1/drain, /healthz, /readyz and /metrics (all of it: GET /v1/openapi.json)", r.URL.Path))
		return
	case hit == nil:
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		rt.writeEr(w, r, newError(api.MethodNotAllowed, "method %s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
		return
	}
	for i, p := range hit.segs {
		if isWildcard(p) {
			r.SetPathValue(p[1:len(p)-1], segs[i])
		}
	}
	err := rt.auth(r, hit.act)
	if err == nil {
		err = hit.h(w, r)
	}
	if err != nil {
		rt.writeEr(w, r, err)
	}
}
