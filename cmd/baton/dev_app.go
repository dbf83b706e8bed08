package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton/api"
)

// The demo app of `baton dev`: the app the sidecar delivers background ops
// to (sidecar.app.url), so that deliveries, retries, dead letters and
// replays can be watched without writing one. It is in a file without the
// dev build tag so that its tests run in `make test`; only `baton dev`
// starts it.
//
//	POST /deliver                   a delivery: logged, answered as the rules say (200 by default)
//	POST /answer?object=O&status=N  answer N to every delivery of object O
//	POST /answer?op=ID&status=N     ... of op ID (an op rule wins over an object rule)
//	     &times=K                   ... only the next K deliveries, then 200 again
//	     status=200                 removes the rule
//	GET  /answer                    the rules, as JSON
//	GET  /deliveries                every delivery so far, as JSON

// demoDelivery is one delivery the demo app received.
type demoDelivery struct {
	api.Delivery
	Status int       `json:"status"` // what the app answered
	At     time.Time `json:"at"`
}

// demoRule is an answer the demo app was told to give.
type demoRule struct {
	Status int `json:"status"`
	Times  int `json:"times,omitempty"` // deliveries left; 0 = every delivery
}

type demoApp struct {
	ln  net.Listener
	srv *http.Server
	url string // sidecar.app.url
	wg  sync.WaitGroup

	outMu sync.Mutex // serialises the lines written to out
	out   io.Writer

	mu         sync.Mutex
	rules      map[string]*demoRule // "object:" + O or "op:" + ID
	token      string               // Baton-Token a delivery must carry; "" = not checked
	deliveries []demoDelivery
}

// startDemoApp serves the demo app on a free loopback port and logs every
// delivery and rule change, one line each starting with "app: ", to out.
func startDemoApp(out io.Writer) (*demoApp, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo app: %w", err)
	}
	a := &demoApp{ln: ln, out: out, rules: map[string]*demoRule{}}
	a.url = "http://" + ln.Addr().String() + "/deliver"
	mux := http.NewServeMux()
	mux.HandleFunc("POST /deliver", a.deliver)
	mux.HandleFunc("GET /answer", a.listRules)
	mux.HandleFunc("POST /answer", a.setRule)
	mux.HandleFunc("GET /deliveries", a.listDeliveries)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	a.wg.Go(func() { _ = a.srv.Serve(ln) })
	return a, nil
}

// logf writes one line to out.
func (a *demoApp) logf(format string, args ...any) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	fmt.Fprintf(a.out, format+"\n", args...)
}

// URL is the value for sidecar.app.url.
func (a *demoApp) URL() string { return a.url }

// setToken makes the app refuse (401) deliveries without Baton-Token: tok.
func (a *demoApp) setToken(tok string) {
	a.mu.Lock()
	a.token = tok
	a.mu.Unlock()
}

// Base is the app's address for the control endpoints ("http://127.0.0.1:PORT").
func (a *demoApp) Base() string { return "http://" + a.ln.Addr().String() }

// Close stops the app.
func (a *demoApp) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := a.srv.Shutdown(ctx)
	a.wg.Wait()
	return err
}

func (a *demoApp) deliver(w http.ResponseWriter, r *http.Request) {
	var d demoDelivery
	if err := json.NewDecoder(io.LimitReader(r.Body, 2<<20)).Decode(&d); err != nil {
		a.logf("app: a delivery whose body is not the delivery JSON (%v): answering 400", err)
		http.Error(w, "demo app: the body is not the delivery JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	d.At = time.Now() // Baton-Lease-Id is the delivery's secret: not kept, not listed
	a.mu.Lock()
	token := a.token
	a.mu.Unlock()
	if token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Baton-Token")), []byte(token)) != 1 {
		a.logf("app: op %s: no or a wrong Baton-Token (sidecar.app.token.file): answering 401", d.ID)
		http.Error(w, "demo app: no or a wrong Baton-Token", http.StatusUnauthorized)
		return
	}
	// The headers repeat the body; say so if they do not.
	var mismatch []string
	for h, v := range map[string]string{"Baton-Op-Id": d.ID, "Baton-Object": d.Object, "Baton-Fencing-Token": d.Token,
		"Baton-Attempt": strconv.Itoa(d.Attempt), "Baton-Op-Seq": strconv.FormatUint(d.Seq, 10)} {
		if got := r.Header.Get(h); got != v {
			mismatch = append(mismatch, fmt.Sprintf("%s=%q (body %q)", h, got, v))
		}
	}
	sort.Strings(mismatch)

	a.mu.Lock()
	status, why := http.StatusOK, ""
	for _, key := range []string{"op:" + d.ID, "object:" + d.Object} {
		rule := a.rules[key]
		if rule == nil {
			continue
		}
		status, why = rule.Status, "rule "+key
		if rule.Times > 0 {
			rule.Times--
			why += fmt.Sprintf(", %d more", rule.Times)
			if rule.Times == 0 {
				delete(a.rules, key)
			}
		}
		break
	}
	d.Status = status
	a.deliveries = append(a.deliveries, d)
	a.mu.Unlock()

	line := fmt.Sprintf("app: delivery op=%s object=%s token=%s attempt=%d seq=%d payload=%s -> %d",
		d.ID, d.Object, d.Token, d.Attempt, d.Seq, d.Payload, status)
	if why != "" {
		line += " (" + why + ")"
	}
	if len(mismatch) > 0 {
		line += fmt.Sprintf(" HEADERS DIFFER: %v", mismatch)
	}
	a.logf("%s", line)
	if status/100 == 2 {
		w.WriteHeader(status)
		return
	}
	http.Error(w, fmt.Sprintf("demo app: answering %d for %s as told", status, why), status)
}

func (a *demoApp) setRule(w http.ResponseWriter, r *http.Request) {
	rule, key, err := parseDemoRule(r.URL.Query())
	if err != nil {
		http.Error(w, "demo app: "+err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	if rule.Status/100 == 2 {
		delete(a.rules, key)
	} else {
		a.rules[key] = &rule
	}
	a.mu.Unlock()
	what := fmt.Sprintf("answer %d to every delivery of %s", rule.Status, key)
	switch {
	case rule.Status/100 == 2:
		what = fmt.Sprintf("answer 2xx to %s (rule removed)", key)
	case rule.Times > 0:
		what = fmt.Sprintf("answer %d to the next %d deliveries of %s", rule.Status, rule.Times, key)
	}
	a.logf("app: told to %s", what)
	fmt.Fprintf(w, "demo app: will %s\n", what)
}

// parseDemoRule reads object=O or op=ID, status=N and times=K.
func parseDemoRule(q url.Values) (demoRule, string, error) {
	for k := range q {
		switch k {
		case "object", "op", "status", "times":
		default:
			return demoRule{}, "", fmt.Errorf("unknown parameter %q: use object=O or op=ID, status=N, times=K", k)
		}
	}
	var key string
	switch {
	case q.Has("object") == q.Has("op"):
		return demoRule{}, "", errors.New("give exactly one of object=O and op=ID")
	case q.Has("object"):
		key = "object:" + q.Get("object")
	default:
		key = "op:" + q.Get("op")
	}
	status, err := strconv.Atoi(q.Get("status"))
	if err != nil || status < 200 || status > 599 {
		return demoRule{}, "", fmt.Errorf("status=%q is not an HTTP status from 200 to 599", q.Get("status"))
	}
	rule := demoRule{Status: status}
	if q.Has("times") {
		n, err := strconv.Atoi(q.Get("times"))
		if err != nil || n < 1 {
			return demoRule{}, "", fmt.Errorf("times=%q is not a positive whole number", q.Get("times"))
		}
		rule.Times = n
	}
	return rule, key, nil
}

func (a *demoApp) listRules(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a.rules)
}

func (a *demoApp) listDeliveries(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a.deliveries)
}

// Deliveries returns a copy of the deliveries so far.
func (a *demoApp) Deliveries() []demoDelivery {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]demoDelivery(nil), a.deliveries...)
}
