package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/ops/opstest"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
	"github.com/batonhq/baton/testenv"
)

// The OpenAPI document (api/openapi.json, served at GET /v1/openapi.json)
// is checked three ways with github.com/pb33f/libopenapi and its validator:
// the document itself (OpenAPI 3.1 schema, every $ref resolves), the
// document against the Go wire types and constants of this package, and
// the document against a running sidecar: every route the router serves is
// documented with exactly its methods and the reverse, and real answers,
// deliveries and dead letters validate against it.

// oapi is the parsed document.
type oapi struct {
	doc   libopenapi.Document
	model *v3.Document
	v     validator.Validator
}

func loadOpenAPI(t *testing.T) *oapi {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	if err != nil {
		t.Fatalf("libopenapi: %v", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("libopenapi: building the v3 model: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("libopenapi-validator: %v", errs)
	}
	return &oapi{doc: doc, model: &m.Model, v: v}
}

func (o *oapi) schema(t *testing.T, name string) *base.Schema {
	t.Helper()
	sp, ok := o.model.Components.Schemas.Get(name)
	if !ok {
		t.Fatalf("no schema %q in components", name)
	}
	s := sp.Schema()
	if s == nil {
		t.Fatalf("schema %q: %v", name, sp.GetBuildError())
	}
	return s
}

// operations returns "METHOD /path" → the operation, for every path.
func (o *oapi) operations() map[string]*v3.Operation {
	out := map[string]*v3.Operation{}
	for path, item := range o.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			out[strings.ToUpper(method)+" "+path] = op
		}
	}
	return out
}

func TestOpenAPIDocument(t *testing.T) {
	o := loadOpenAPI(t)
	if v := o.model.Version; v != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", v)
	}
	if ok, errs := o.v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("document: %s: %s %v", e.Message, e.Reason, e.SchemaValidationErrors)
		}
	}
	if err := json.Unmarshal(api.OpenAPI, new(map[string]any)); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	ids := map[string]string{}
	for key, op := range o.operations() {
		if op.OperationId == "" || op.Summary == "" {
			t.Errorf("%s: no operationId or summary", key)
		}
		if prev, dup := ids[op.OperationId]; dup {
			t.Errorf("operationId %q of %s and %s", op.OperationId, prev, key)
		}
		ids[op.OperationId] = key
	}
	if o.model.Webhooks.GetOrZero("opDelivery") == nil {
		t.Errorf("no webhook opDelivery (the op-delivery contract)")
	}
	o.schema(t, "DeadLetter")
}

// TestOpenAPIMatchesWireTypes: every JSON member of the wire types is a
// property of its schema and the reverse, and the enums list exactly the
// constants of this package (error kinds with their statuses, lease
// states, lost reasons, op states).
func TestOpenAPIMatchesWireTypes(t *testing.T) {
	o := loadOpenAPI(t)
	for name, v := range map[string]any{
		"Error": api.Error{}, "AcquireRequest": api.AcquireRequest{}, "RenewRequest": api.RenewRequest{},
		"Lease": api.Lease{}, "ReleaseResponse": api.ReleaseResponse{}, "DrainResponse": api.DrainResponse{},
		"Holder": api.Holder{}, "Waiter": api.Waiter{}, "LockStatus": api.LockStatus{}, "LockSummary": api.LockSummary{},
		"LockList": api.LockList{}, "Health": api.Health{}, "ReloadInfo": api.ReloadInfo{}, "ZKInfo": api.ZKInfo{},
		"OpRequest": api.OpRequest{}, "OpAck": api.OpAck{}, "Op": api.Op{}, "DeadLetter": dlq.Letter{},
		"Delivery": api.Delivery{}, "OpDiscarded": api.OpDiscarded{}, "QueueInfo": api.QueueInfo{},
		"CheckResult": api.CheckResult{}, "LeaseObject": api.LeaseObject{}, "SemaphoreHolder": api.SemaphoreHolder{},
		"SemaphoreStatus": api.SemaphoreStatus{}, "LockWatch": api.LockWatch{},
	} {
		var fields []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			tag := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]
			if tag != "" && tag != "-" {
				fields = append(fields, tag)
			}
		}
		var props []string
		for k := range o.schema(t, name).Properties.KeysFromOldest() {
			props = append(props, k)
		}
		sort.Strings(fields)
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("schema %s has properties %v; the Go type %s has JSON members %v", name, props, rt, fields)
		}
	}

	consts := apiConsts(t)
	enum := func(schema string) []string {
		var out []string
		for _, n := range o.schema(t, schema).Enum {
			out = append(out, n.Value)
		}
		sort.Strings(out)
		return out
	}
	lease := o.schema(t, "Lease").Properties.GetOrZero("state").Schema()
	var states []string
	for _, n := range lease.Enum {
		states = append(states, n.Value)
	}
	sort.Strings(states)
	for _, c := range []struct {
		schema string
		got    []string
		prefix string
		file   string
	}{
		{"ErrorKind", enum("ErrorKind"), "", "errors.go"},
		{"LostReason", enum("LostReason"), "Reason", "api.go"},
		{"OpState", enum("OpState"), "Op", "api.go"},
		{"Lease.state", states, "State", "api.go"},
	} {
		var want []string
		for name, val := range consts[c.file] {
			if strings.HasPrefix(name, c.prefix) && (c.prefix != "" || val == name) {
				want = append(want, val)
			}
		}
		sort.Strings(want)
		if !slices.Equal(c.got, want) {
			t.Errorf("%s lists %v; api/%s defines %v", c.schema, c.got, c.file, want)
		}
	}
	// ErrorKind's description gives each kind's status as api.Status does.
	desc := o.schema(t, "ErrorKind").Description
	for _, k := range enum("ErrorKind") {
		if want := fmt.Sprintf("`%s` (%d)", k, api.Status(k)); !strings.Contains(desc, want) {
			t.Errorf("ErrorKind description lacks %q", want)
		}
	}
}

// apiConsts returns file → constant name → value, for the string constants
// of api/api.go and api/errors.go.
func apiConsts(t *testing.T) map[string]map[string]string {
	out := map[string]map[string]string{}
	fset := token.NewFileSet()
	for _, file := range []string{"api.go", "errors.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[file] = map[string]string{}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if bl, ok := vs.Values[i].(*ast.BasicLit); ok && bl.Kind == token.STRING {
							v, _ := strconv.Unquote(bl.Value)
							out[file][n.Name] = v
						}
					}
				}
			}
		}
	}
	return out
}

// stack is a running sidecar with background ops, a test app and a broker.
type stack struct {
	cfg   props.Config
	hc    *http.Client
	app   *opstest.App
	kafka *testenv.Kafka
	srv   *sidecar.Server
	zk    *testenv.ZooKeeper
}

func startStack(t *testing.T) *stack {
	t.Helper()
	z := testenv.ZooKeeperT(t, testenv.ZKOptions{})
	cfg := props.Defaults()
	k := testenv.KafkaT(t, testenv.KafkaOptions{Topics: []string{cfg.DLQTopic}})
	app := opstest.StartT(t, opstest.Options{Token: "openapi-token", Respond: func(_ context.Context, d opstest.Delivery) int {
		if d.Object == "dead" {
			return http.StatusBadRequest
		}
		return http.StatusOK
	}})
	dir, err := os.MkdirTemp("", "oa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.ZKServers = z.Servers()
	cfg.ZKSessionTimeout = 4 * time.Second
	cfg.NodeID = "openapi-test"
	cfg.SocketPath = filepath.Join(dir, "s.sock")
	cfg.QueueDir = filepath.Join(dir, "queue")
	cfg.KafkaBrokers = []string{k.Addr()}
	cfg.AppURL = app.URL()
	cfg.ShutdownGrace = 3 * time.Second
	cfg.RetryInitial, cfg.RetryRandomization = 20*time.Millisecond, 0
	cfg.AppTokenFile = filepath.Join(dir, "app.token") // deliveries carry Baton-Token
	if err := os.WriteFile(cfg.AppTokenFile, []byte("openapi-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.DiscardHandler)
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: log, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("sidecar.New: %v", err)
	}
	d, err := ops.New(cfg, ops.Deps{Engine: srv.Engine(), Registry: srv.Registry(), Logger: log, Hold: srv.HoldDelivery}) // as baton serve
	if err != nil {
		srv.Close()
		t.Fatalf("ops.New: %v", err)
	}
	if err := srv.Mount(d); err != nil {
		srv.Close()
		t.Fatalf("Mount: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.Run(ctx) })
	wg.Go(func() { _ = srv.Run(ctx) })
	hc := testenv.UnixHTTP(cfg.SocketPath)
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 8
	hc.Timeout = 30 * time.Second
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		d.Close()
		hc.CloseIdleConnections()
	})
	s := &stack{cfg: cfg, hc: hc, app: app, kafka: k, srv: srv, zk: z}
	testenv.WaitFor(t, 30*time.Second, "sidecar ready", func() bool {
		resp, err := s.do("GET", "/readyz", "")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return s
}

// nativeRoot is the lock root of startNative's sidecar.
const nativeRoot = "/openapi-native"

// startNative runs a second sidecar, with zookeeper.lock.protocol=native
// on nativeRoot, on the stack's ZooKeeper; it returns an HTTP client of its
// socket and a ZooKeeper connection for the test's own nodes.
func (s *stack) startNative(t *testing.T) (*http.Client, *zk.Conn) {
	t.Helper()
	cfg := props.Defaults()
	dir, err := os.MkdirTemp("", "oan")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.ZKServers, cfg.ZKSessionTimeout, cfg.NodeID = s.zk.Servers(), 4*time.Second, "openapi-native"
	cfg.LockRoot, cfg.LockProtocol, cfg.ObjectNode = nativeRoot, "native", "persistent"
	cfg.SocketPath = filepath.Join(dir, "n.sock")
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("sidecar.New (native): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	hc := testenv.UnixHTTP(cfg.SocketPath)
	hc.Timeout = 30 * time.Second
	t.Cleanup(func() {
		cancel()
		<-done
		hc.CloseIdleConnections()
	})
	testenv.WaitFor(t, 30*time.Second, "native sidecar ready", func() bool {
		st, _ := testenv.Call(context.Background(), hc, "GET", "/readyz", "")
		return st == 200
	})
	return hc, testenv.Client(t, s.zk.Servers())
}

func (s *stack) do(method, path, body string) (*http.Response, error) {
	req, err := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	return s.hc.Do(req)
}

// TestOpenAPIRoutes: every path the router serves is documented, with
// exactly the methods it allows, and every documented path is served.
// Paths are probed with a method no route has: the router answers 405 with
// an Allow header on a path it serves and 404 NotFound on any other. The
// probes are every path of 1 to 3 segments made of the string literals of
// the router's match function (sidecar/routes.go), the documented paths'
// segments and a placeholder, so a route added there is found, and every
// served 3-segment path extended by one such segment.
func TestOpenAPIRoutes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ZooKeeper and a sidecar")
	}
	o := loadOpenAPI(t)
	documented := map[string][]string{} // template → methods
	for key := range o.operations() {
		m, p, _ := strings.Cut(key, " ")
		documented[p] = append(documented[p], m)
	}
	words := map[string]bool{"x": true}
	for p := range documented {
		for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
			if !strings.HasPrefix(seg, "{") {
				words[seg] = true
			}
		}
	}
	for _, w := range routerLiterals(t) {
		if w != "" && !strings.ContainsAny(w, "/%") {
			words[w] = true
		}
	}
	vocab := slices.Sorted(func(yield func(string) bool) {
		for w := range words {
			if !yield(w) {
				return
			}
		}
	})
	s := startStack(t)

	probe := func(path string) (allow []string, served bool) {
		resp, err := s.do("BATONPROBE", path, "")
		if err != nil {
			t.Fatalf("probe %s: %v", path, err)
		}
		defer resp.Body.Close()
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		switch {
		case resp.StatusCode == 405 && e.Kind == api.MethodNotAllowed:
			ms := strings.Split(resp.Header.Get("Allow"), ", ")
			sort.Strings(ms)
			return ms, true
		case resp.StatusCode == 404 && e.Kind == api.NotFound:
			return nil, false
		}
		t.Fatalf("probe %s: %d %s %q, want 405 MethodNotAllowed or 404 NotFound", path, resp.StatusCode, e.Kind, e.Message)
		return nil, false
	}

	// Router → document.
	var undocumented []string
	paths := []string{""}
	probes, served := 0, 0
	servedAt := map[string]bool{}
	for depth := 1; depth <= 4; depth++ {
		var next []string
		for _, p := range paths {
			// 4-segment routes extend a served 3-segment path
			// ({object}/acquire, {id}/renew, ...): probing only those
			// keeps the count near 5,000 instead of 70,000.
			if depth == 4 && !servedAt[p] {
				continue
			}
			for _, w := range vocab {
				next = append(next, p+"/"+w)
			}
		}
		paths = next
		var mu sync.Mutex
		var wg sync.WaitGroup
		work := make(chan string)
		for range 4 {
			wg.Go(func() {
				for p := range work {
					allow, ok := probe(p)
					mu.Lock()
					probes++
					if ok {
						served++
						servedAt[p] = true
						tmpl := matchTemplate(documented, p)
						if tmpl == "" {
							undocumented = append(undocumented, fmt.Sprintf("%s %v", p, allow))
						} else if want := matchMethods(documented, p); !slices.Equal(allow, want) {
							t.Errorf("the router allows %v on %s; the document has %v for %s", allow, p, want, tmpl)
						}
					}
					mu.Unlock()
				}
			})
		}
		for _, p := range paths {
			work <- p
		}
		close(work)
		wg.Wait()
	}
	t.Logf("%d probes over %d words, %d served", probes, len(vocab), served)
	if len(undocumented) > 0 {
		sort.Strings(undocumented)
		t.Errorf("the router serves %d paths the OpenAPI document does not have, e.g.\n  %s",
			len(undocumented), strings.Join(undocumented[:min(8, len(undocumented))], "\n  "))
	}

	// Document → router.
	for tmpl, methods := range documented {
		p := tmpl
		for _, seg := range strings.Split(tmpl, "/") {
			if strings.HasPrefix(seg, "{") {
				p = strings.Replace(p, seg, "some-value", 1)
			}
		}
		allow, ok := probe(p)
		if !ok {
			t.Errorf("the document has %s %v; the router answers 404 on %s", tmpl, methods, p)
			continue
		}
		if want := matchMethods(documented, p); !slices.Equal(allow, want) {
			t.Errorf("the document has %v on %s (%s); the router allows %v", want, p, tmpl, allow)
		}
	}
}

// routerLiterals returns the literal segments of the path patterns in
// sidecar/router.go's route table (func routes).
func routerLiterals(t *testing.T) []string {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "sidecar", "router.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "routes" {
			continue
		}
		ast.Inspect(fd, func(n ast.Node) bool {
			if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				v, _ := strconv.Unquote(bl.Value)
				if pattern, ok := strings.CutPrefix(v, "/"); ok {
					for _, seg := range strings.Split(pattern, "/") {
						if !strings.HasPrefix(seg, "{") {
							out = append(out, seg)
						}
					}
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal("no path patterns in func routes of sidecar/router.go: update this test with the router")
	}
	return out
}

// matchMethods returns the methods of every documented path template that
// path matches, sorted: a literal path (POST /v1/locks/acquire) also
// matches a template with a parameter there (GET /v1/locks/{object}).
func matchMethods(documented map[string][]string, path string) []string {
	segs := strings.Split(path, "/")
	var out []string
	for tmpl, methods := range documented {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		ok := true
		for i := range ts {
			if !strings.HasPrefix(ts[i], "{") && ts[i] != segs[i] {
				ok = false
			}
		}
		if ok {
			out = append(out, methods...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// matchTemplate returns the documented path template that path matches
// (literal segments equal, {param} any), the one with most literal
// matches, or "".
func matchTemplate(documented map[string][]string, path string) string {
	segs := strings.Split(path, "/")
	best, bestLit := "", -1
	for tmpl := range documented {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		lit, ok := 0, true
		for i := range ts {
			switch {
			case strings.HasPrefix(ts[i], "{"):
			case ts[i] == segs[i]:
				lit++
			default:
				ok = false
			}
		}
		if ok && lit > bestLit {
			best, bestLit = tmpl, lit
		}
	}
	return best
}

// TestOpenAPIAnswers sends requests of every documented operation to a
// running sidecar, successes and refusals, and validates each answer
// against the document; then the deliveries the app received against the
// opDelivery webhook and the dead letters on the topic against DeadLetter.
func TestOpenAPIAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ZooKeeper, a broker and a sidecar")
	}
	o := loadOpenAPI(t)
	s := startStack(t)
	seen := map[string]map[int]bool{} // "METHOD /template" → statuses validated

	call := func(method, path, body string, want int, validRequest bool) []byte {
		t.Helper()
		req, err := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := s.hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, resp.StatusCode, b, want)
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		vreq, _ := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
		if body != "" {
			vreq.Header.Set("Content-Type", "application/json")
		}
		if ok, errs := o.v.ValidateHttpResponse(vreq, resp); !ok {
			for _, e := range errs {
				t.Errorf("%s %s → %d %s\n  does not validate: %s: %s %s", method, path, resp.StatusCode, b, e.Message, e.Reason, schemaErrs(e.SchemaValidationErrors))
			}
		}
		if validRequest {
			vreq, _ := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
			if body != "" {
				vreq.Header.Set("Content-Type", "application/json")
			}
			if ok, errs := o.v.ValidateHttpRequest(vreq); !ok {
				for _, e := range errs {
					t.Errorf("request %s %s %s does not validate: %s: %s %s", method, path, body, e.Message, e.Reason, schemaErrs(e.SchemaValidationErrors))
				}
			}
		}
		key := method + " " + matchTemplate(documentedPaths(o), strings.SplitN(path, "?", 2)[0])
		if seen[key] == nil {
			seen[key] = map[int]bool{}
		}
		seen[key][resp.StatusCode] = true
		return b
	}
	lease := func(b []byte) api.Lease {
		var l api.Lease
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("lease: %v: %s", err, b)
		}
		return l
	}

	call("GET", "/healthz", "", 200, true)
	call("GET", "/readyz", "", 200, true)
	call("GET", "/metrics", "", 200, true)
	call("GET", "/v1/openapi.json", "", 200, true)

	// Locks and leases.
	l := lease(call("POST", "/v1/locks/doc-1/acquire", `{"info":"openapi","lease_ms":60000,"wait_ms":60000}`, 200, true)) // free, but slow to grant when loaded
	call("POST", "/v1/locks/doc-1/acquire", `{"type":"background","wait_ms":0}`, 423, true)
	call("POST", "/v1/locks/doc-1/acquire", `{"wait_ms":50,"bind":"process"}`, 423, true)
	call("GET", "/v1/locks/doc-1", "", 200, true)
	call("GET", "/v1/locks/free-object", "", 200, true)
	call("GET", "/v1/locks/doc-1/check?token="+strconv.FormatInt(l.Token, 10), "", 200, true)
	call("GET", "/v1/locks/free-object/check?token=1", "", 200, true)
	call("GET", "/v1/locks/doc-1/check", "", 400, false)
	call("GET", "/v1/locks/doc-1/check?token=-3", "", 400, false)
	call("GET", "/v1/locks/doc-1?wait=change", "", 200, true)
	call("GET", "/v1/locks/doc-1?wait=change&timeout_ms=0&after="+strconv.FormatInt(l.Token, 10), "", 200, true)
	call("GET", "/v1/locks/free-object?wait=change&timeout_ms=0&version=0", "", 200, true)
	call("GET", "/v1/locks/doc-1?wait=change&after=x", "", 400, false)
	call("GET", "/v1/locks/doc-1?after=1", "", 400, false)
	call("GET", "/v1/locks", "", 200, true)
	call("GET", "/v1/locks?prefix=doc&limit=10", "", 200, true)
	call("POST", "/v1/leases/"+l.LeaseID+"/renew", `{"lease_ms":30000}`, 200, true)
	call("POST", "/v1/leases/"+l.LeaseID+"/renew", "", 200, true)
	call("GET", "/v1/leases", "", 200, true)
	call("GET", "/v1/leases/"+l.LeaseID, "", 200, true)
	call("GET", "/v1/leases/"+l.LeaseID+"?wait=lost&timeout_ms=10", "", 200, true)
	call("DELETE", "/v1/leases/"+l.LeaseID, "", 200, true)
	call("GET", "/v1/leases/"+l.LeaseID, "", 404, true)
	call("DELETE", "/v1/leases/"+l.LeaseID, "", 404, true)
	call("POST", "/v1/leases/"+l.LeaseID+"/renew", "", 404, true)
	// A release that answers before its write lands (SPEC §5's mode).
	nw := lease(call("POST", "/v1/locks/doc-nw/acquire", `{"lease_ms":60000}`, 200, true))
	call("DELETE", "/v1/leases/"+nw.LeaseID+"?wait=maybe", "", 400, false)
	call("DELETE", "/v1/leases/"+nw.LeaseID+"?wait=false", "", 202, true)
	call("DELETE", "/v1/leases/"+nw.LeaseID+"?wait=true", "", 404, true)
	// Re-entry and revocation.
	re := lease(call("POST", "/v1/locks/doc-4/acquire", `{"lease_ms":60000,"wait_ms":60000}`, 200, true))
	call("POST", "/v1/locks/doc-4/acquire", `{"lease_id":"`+re.LeaseID+`"}`, 200, true)
	call("POST", "/v1/locks/free-object/acquire", `{"lease_id":"`+re.LeaseID+`"}`, 400, true)
	call("DELETE", "/v1/leases/"+re.LeaseID, "", 200, true)
	call("POST", "/v1/locks/doc-4/revoke", `{"reason":"openapi"}`, 202, true)
	call("GET", "/v1/leases/"+re.LeaseID, "", 410, true)
	call("POST", "/v1/locks/free-object/revoke", "", 404, true)
	short := lease(call("POST", "/v1/locks/doc-2/acquire", `{"lease_ms":1,"wait_ms":60000}`, 200, true))
	testenv.WaitFor(t, 10*time.Second, "lease expired", func() bool {
		resp, err := s.do("GET", "/v1/leases/"+short.LeaseID, "")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 410
	})
	call("GET", "/v1/leases/"+short.LeaseID, "", 410, true)
	call("POST", "/v1/leases/"+short.LeaseID+"/renew", "", 410, true)
	call("DELETE", "/v1/leases/"+short.LeaseID, "", 410, true)
	// Modes: shared needs the native protocol (this sidecar runs plugin).
	call("POST", "/v1/locks/doc-8/acquire", `{"mode":"shared","wait_ms":0}`, 409, true)
	call("POST", "/v1/locks/acquire", `{"objects":["doc-8","doc-9"],"mode":"shared"}`, 409, true)
	call("POST", "/v1/locks/doc-8/acquire", `{"mode":"read"}`, 400, false)
	call("POST", "/v1/semaphores/doc-pool/acquire", `{"permits":2,"mode":"shared"}`, 400, true)
	if ex := lease(call("POST", "/v1/locks/doc-8/acquire", `{"mode":"exclusive","wait_ms":60000}`, 200, true)); ex.Mode != api.ModeExclusive {
		t.Errorf("exclusive lease: mode %q", ex.Mode)
	} else {
		var st api.LockStatus
		if err := json.Unmarshal(call("GET", "/v1/locks/doc-8", "", 200, true), &st); err != nil || len(st.Holders) != 1 ||
			st.Holder == nil || st.Holders[0].Mode != api.ModeExclusive || st.Holder.Mode != api.ModeExclusive {
			t.Errorf("status of an exclusive holder: %+v, %v; want one holder, mode exclusive, in holder and holders", st, err)
		}
		call("DELETE", "/v1/leases/"+ex.LeaseID, "", 200, true)
	}
	call("POST", "/v1/locks/doc-1/acquire", `{"typ":"foreground"}`, 400, false)
	call("POST", "/v1/locks/doc-1/acquire", `{"bind":"thread"}`, 400, false)
	call("POST", "/v1/locks/doc-1/acquire?wait=1", "", 400, false)
	call("POST", "/v1/locks/doc-1/acquire", `{"info":"`+strings.Repeat("x", api.MaxBody)+`"}`, 413, false)
	call("GET", "/v1/locks?limit=0", "", 400, false)
	call("GET", "/v1/leases/x?wait=forever", "", 400, false)

	// Recipes: a set of objects, a semaphore.
	set := lease(call("POST", "/v1/locks/acquire", `{"objects":["doc-5","doc-6"],"wait_ms":60000}`, 200, true))
	if len(set.Objects) != 2 {
		t.Errorf("set lease without its objects: %+v", set)
	}
	call("POST", "/v1/locks/acquire", `{"objects":["doc-6"],"wait_ms":0}`, 423, true)
	call("POST", "/v1/locks/acquire", `{"objects":["doc-7","doc-7"]}`, 400, false)
	call("DELETE", "/v1/leases/"+set.LeaseID, "", 200, true)
	sem := lease(call("POST", "/v1/semaphores/doc-pool/acquire", `{"permits":1,"wait_ms":60000}`, 200, true))
	call("POST", "/v1/semaphores/doc-pool/acquire", `{"permits":1,"wait_ms":0}`, 423, true)
	call("POST", "/v1/semaphores/doc-pool/acquire", `{"permits":0}`, 400, false)
	call("GET", "/v1/semaphores/doc-pool", "", 200, true)
	call("GET", "/v1/semaphores/a%2Fb", "", 400, true)
	call("DELETE", "/v1/leases/"+sem.LeaseID, "", 200, true)

	// The native protocol: a second sidecar on a native root.
	native, zc := s.startNative(t)
	ncall := func(method, path, body string, want int) []byte {
		t.Helper()
		saved := s.hc
		s.hc = native
		defer func() { s.hc = saved }()
		return call(method, path, body, want, want < 400)
	}
	r1 := lease(ncall("POST", "/v1/locks/doc-n/acquire", `{"mode":"shared","wait_ms":60000}`, 200))
	r2 := lease(ncall("POST", "/v1/locks/doc-n/acquire", `{"mode":"shared","wait_ms":60000}`, 200))
	var nst api.LockStatus
	if err := json.Unmarshal(ncall("GET", "/v1/locks/doc-n", "", 200), &nst); err != nil || len(nst.Holders) != 2 || r1.Mode != api.ModeShared {
		t.Errorf("native status with two shared holders: %+v, %v; lease mode %q", nst, err, r1.Mode)
	}
	ncall("GET", "/v1/locks/doc-n?wait=change", "", 200)
	ncall("POST", "/v1/locks/doc-n/acquire", `{"lease_id":"`+r1.LeaseID+`"}`, 400)
	ncall("POST", "/v1/locks/doc-n/revoke", `{"reason":"openapi"}`, 409)
	ncall("POST", "/v1/locks/doc-m/acquire", `{"preemptible":true}`, 409)
	ncall("DELETE", "/v1/leases/"+r1.LeaseID, "", 200)
	ncall("DELETE", "/v1/leases/"+r2.LeaseID, "", 200)
	if _, err := zc.Create(nativeRoot+"/doc-p", nil, 0, zk.WorldACL(zk.PermAll)); err != nil { // a plugin object under the native root
		t.Fatal(err)
	}
	if _, err := zc.Create(nativeRoot+"/doc-p/A-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	ncall("POST", "/v1/locks/doc-p/acquire", `{"wait_ms":0}`, 409)
	ncall("POST", "/v1/locks/acquire", `{"objects":["doc-p","doc-q"],"wait_ms":0}`, 409)
	ncall("GET", "/v1/locks/doc-p", "", 409)
	ncall("GET", "/v1/locks/doc-p/check?token=1", "", 409)
	ncall("GET", "/v1/locks", "", 409)

	// Background ops: one delivered, one dead-lettered and replayed.
	call("POST", "/v1/ops", `{"id":"doc-op-1","object":"doc-3","info":"openapi","payload":{"n":1}}`, 202, true)
	call("POST", "/v1/ops", `{"id":"doc-op-1","object":"doc-3","info":"openapi","payload":{"n":1}}`, 200, true)
	call("POST", "/v1/ops", `{"id":"doc-op-1","object":"doc-3","payload":{"n":2}}`, 409, true)
	call("POST", "/v1/ops", `{"info":"no object"}`, 400, false)
	call("POST", "/v1/ops", `{"id":"doc-dead","object":"dead","payload":"x"}`, 202, true)
	call("POST", "/v1/ops", `{"id":"doc-gone","object":"dead","payload":[1]}`, 202, true) // discarded below
	waitOp := func(id, state string) {
		testenv.WaitFor(t, 20*time.Second, id+" "+state, func() bool {
			resp, err := s.do("GET", "/v1/ops/"+id, "")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var op api.Op
			return json.NewDecoder(resp.Body).Decode(&op) == nil && op.State == state
		})
	}
	waitOp("doc-op-1", api.OpDone)
	waitOp("doc-dead", api.OpDeadLettered)
	waitOp("doc-gone", api.OpDeadLettered)
	call("GET", "/v1/ops/doc-op-1", "", 200, true)
	call("GET", "/v1/ops/doc-dead", "", 200, true)
	call("GET", "/v1/ops/no-such-op", "", 404, true)
	call("POST", "/v1/ops/doc-op-1/replay", "", 409, true)
	call("POST", "/v1/ops/no-such-op/replay", "", 404, true)
	call("POST", "/v1/ops/doc-dead/replay", "", 202, true)
	waitOp("doc-dead", api.OpDeadLettered)         // the app refuses it again: a second letter
	call("GET", "/v1/ops/doc-dead", "", 200, true) // with its history across the replay
	call("POST", "/v1/ops/doc-op-1/discard", "", 409, true)
	call("POST", "/v1/ops/no-such-op/discard", "", 404, true)
	call("POST", "/v1/ops/doc-gone/discard", "", 200, true)
	call("GET", "/v1/ops?limit=1", "", 200, true)
	call("GET", "/v1/ops?state=dead_lettered&object=dead", "", 200, true)
	call("GET", "/v1/ops?state=finished", "", 400, false)

	// Deliveries against the opDelivery webhook.
	hook := o.model.Webhooks.GetOrZero("opDelivery").Post
	delivery := o.schema(t, "Delivery")
	sv := schema_validation.NewSchemaValidator()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.app.Wait(ctx, func(ds []opstest.Delivery) bool { return len(ds) >= 3 }); err != nil {
		t.Fatalf("deliveries: %v (%d)", err, len(s.app.Deliveries()))
	}
	for _, d := range s.app.Deliveries() {
		if ok, errs := sv.ValidateSchemaBytes(delivery, d.Body); !ok {
			t.Errorf("delivery %s does not validate against Delivery: %s", d.Body, valErrs(errs))
		}
		for _, p := range hook.Parameters {
			v := d.Header.Get(p.Name)
			if v == "" {
				t.Errorf("delivery %s: no header %s", d.ID, p.Name)
				continue
			}
			var val any = v
			if p.Schema.Schema().Type[0] == "integer" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Errorf("delivery %s: header %s=%q is not an integer", d.ID, p.Name, v)
					continue
				}
				val = n
			}
			if ok, errs := sv.ValidateSchemaObject(p.Schema.Schema(), val); !ok {
				t.Errorf("delivery %s: header %s=%q: %s", d.ID, p.Name, v, valErrs(errs))
			}
		}
	}

	// Dead letters against DeadLetter.
	letter := o.schema(t, "DeadLetter")
	r, err := dlq.NewReader(dlq.ReaderOptions{Brokers: []string{s.kafka.Addr()}, Topic: s.cfg.DLQTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n, err := r.List(ctx, 0, func(m dlq.Message) error {
		if ok, errs := sv.ValidateSchemaBytes(letter, m.Raw.Value); !ok {
			t.Errorf("dead letter %s does not validate against DeadLetter: %s", m.Raw.Value, valErrs(errs))
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("dead letters: %d, %v; want 3 (doc-dead, again after its replay, doc-gone)", n, err)
	}

	// Unknown paths and methods: no operation, the Error shape.
	for _, c := range []struct {
		method, path string
		status       int
	}{{"GET", "/v2/locks", 404}, {"GET", "/v1/locks/a/b/c", 404}, {"PUT", "/v1/locks/a", 405}, {"GET", "/v1/drain", 405}} {
		resp, err := s.do(c.method, c.path, "")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		if ok, errs := sv.ValidateSchemaBytes(o.schema(t, "Error"), b); !ok {
			t.Errorf("%s %s → %d %s does not validate against Error: %s", c.method, c.path, resp.StatusCode, b, valErrs(errs))
		}
	}

	// The drain, and what the sidecar answers while it drains.
	call("POST", "/v1/drain", "", 202, true)
	call("POST", "/v1/drain", "{}", 202, true)
	call("GET", "/readyz", "", 503, true)
	call("POST", "/v1/locks/doc-4/acquire", "", 503, true)

	// Every documented operation was exercised.
	for key := range o.operations() {
		if len(seen[key]) == 0 {
			t.Errorf("no answer of %s was validated: add a request to this test", key)
		}
	}
}

func documentedPaths(o *oapi) map[string][]string {
	out := map[string][]string{}
	for p := range o.model.Paths.PathItems.KeysFromOldest() {
		out[p] = nil
	}
	return out
}

func valErrs(errs []*liberrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "%s: %s %s; ", e.Message, e.Reason, schemaErrs(e.SchemaValidationErrors))
	}
	return b.String()
}

func schemaErrs(fs []*liberrors.SchemaValidationFailure) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("[%s: %s]", f.FieldPath, f.Reason))
	}
	return strings.Join(parts, " ")
}
