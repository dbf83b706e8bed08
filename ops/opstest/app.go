// Package opstest provides a test app for Baton's background operations: an
// HTTP server, on loopback TCP or a unix socket, that records every delivery
// the sidecar makes and answers as the test tells it. It is for tests of
// the ops package, of cmd/baton and of the `baton serve` binary (e.g. a
// kill -9 test: point sidecar.app.url at App.URL, then check that every op
// id was delivered and count the duplicates with App.Duplicates).
package opstest

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/internal/notify"
)

// Delivery is one POST the app received.
type Delivery struct {
	api.Delivery

	Header http.Header `json:"-"` // the request's headers
	Body   []byte      `json:"-"` // the raw request body
	At     time.Time   `json:"-"` // when it arrived
	Status int         `json:"-"` // what the app answered (0 if the request was cut off first)
	Err    error       `json:"-"` // the body did not decode (Status is then 400)
}

// Respond decides the app's answer to a delivery: an HTTP status. It may
// block (a hung handler) until ctx, the request's context, ends; it is
// called concurrently for concurrent deliveries.
type Respond func(ctx context.Context, d Delivery) int

// Options configures an App. A zero field means its documented default.
type Options struct {
	// Unix, if set, serves on this unix socket path instead of TCP
	// 127.0.0.1 (URL is then "unix:<path>:/deliver"). Keep it < 108 bytes.
	Unix string
	// Respond answers each delivery; default 200 for all.
	Respond Respond
	// Token, if set, is the Baton-Token a delivery must carry
	// (sidecar.app.token.file): one without it is answered 401.
	Token string
}

// App is the test app. Its methods are safe for concurrent use.
type App struct {
	srv  *http.Server
	ln   net.Listener
	url  string
	done chan struct{}

	mu      sync.Mutex
	respond Respond
	token   string
	log     []Delivery
	changed notify.Broadcast // every delivery
}

// Start starts an App; Close stops it.
func Start(opts Options) (*App, error) {
	a := &App{respond: opts.Respond, token: opts.Token, done: make(chan struct{})}
	var err error
	if opts.Unix != "" {
		a.ln, err = net.Listen("unix", opts.Unix)
		a.url = "unix:" + opts.Unix + ":/deliver"
	} else {
		a.ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			a.url = "http://" + a.ln.Addr().String() + "/deliver"
		}
	}
	if err != nil {
		return nil, fmt.Errorf("opstest: listen: %w", err)
	}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(a.done)
		_ = a.srv.Serve(a.ln)
	}()
	return a, nil
}

// StartT starts an App for a test and closes it in t.Cleanup. With
// Options.Unix == "unix" a short socket path in a fresh temp dir is used.
func StartT(t testing.TB, opts Options) *App {
	t.Helper()
	if opts.Unix == "unix" {
		dir, err := os.MkdirTemp("", "oa")
		if err != nil {
			t.Fatalf("opstest: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		opts.Unix = filepath.Join(dir, "app.sock")
	}
	a, err := Start(opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// URL is the value for sidecar.app.url.
func (a *App) URL() string { return a.url }

// SetRespond replaces the answer function.
func (a *App) SetRespond(f Respond) {
	a.mu.Lock()
	a.respond = f
	a.mu.Unlock()
}

// Close stops the server, cutting off deliveries in progress.
func (a *App) Close() error {
	err := a.srv.Close()
	<-a.done
	return err
}

func (a *App) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	d := Delivery{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	d.Err = dec.Decode(&d)
	d.Header, d.Body, d.At = r.Header.Clone(), body, time.Now()
	status := http.StatusBadRequest
	a.mu.Lock()
	token := a.token
	a.mu.Unlock()
	if token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Baton-Token")), []byte(token)) != 1 {
		status, d.Err = http.StatusUnauthorized, errors.New("opstest: no or a wrong Baton-Token")
	}
	if d.Err == nil {
		a.mu.Lock()
		f := a.respond
		a.mu.Unlock()
		status = http.StatusOK
		if f != nil {
			status = f(r.Context(), d)
		}
	}
	if r.Context().Err() != nil {
		status = 0 // the sidecar gave up first
	} else {
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, "app answered %d\n", status)
	}
	d.Status = status
	a.mu.Lock()
	a.log = append(a.log, d)
	a.changed.Notify()
	a.mu.Unlock()
}

// Deliveries returns every delivery so far, in arrival order.
func (a *App) Deliveries() []Delivery {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Delivery(nil), a.log...)
}

// ByID returns the deliveries of op id, in arrival order.
func (a *App) ByID(id string) []Delivery {
	var out []Delivery
	for _, d := range a.Deliveries() {
		if d.ID == id {
			out = append(out, d)
		}
	}
	return out
}

// Succeeded reports how many times each op id was answered with a 2xx.
func (a *App) Succeeded() map[string]int {
	out := map[string]int{}
	for _, d := range a.Deliveries() {
		if d.Status >= 200 && d.Status < 300 {
			out[d.ID]++
		}
	}
	return out
}

// Duplicates is the number of 2xx answers beyond the first per op id: the
// at-least-once deliveries an app must be idempotent against.
func (a *App) Duplicates() int {
	n := 0
	for _, c := range a.Succeeded() {
		n += c - 1
	}
	return n
}

// Wait waits until cond holds for the deliveries so far, or ctx ends.
func (a *App) Wait(ctx context.Context, cond func([]Delivery) bool) error {
	for {
		a.mu.Lock()
		log, ch := append([]Delivery(nil), a.log...), a.changed.Wait()
		a.mu.Unlock()
		if cond(log) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("opstest: %d deliveries so far: %w", len(log), context.Cause(ctx))
		}
	}
}

// WaitSucceeded waits until every id got a 2xx answer.
func (a *App) WaitSucceeded(ctx context.Context, ids ...string) error {
	err := a.Wait(ctx, func(log []Delivery) bool {
		ok := map[string]bool{}
		for _, d := range log {
			if d.Status >= 200 && d.Status < 300 {
				ok[d.ID] = true
			}
		}
		for _, id := range ids {
			if !ok[id] {
				return false
			}
		}
		return true
	})
	if err != nil {
		missing := 0
		s := a.Succeeded()
		for _, id := range ids {
			if s[id] == 0 {
				missing++
			}
		}
		return errors.Join(err, fmt.Errorf("opstest: %d of %d ops not delivered", missing, len(ids)))
	}
	return nil
}

// Fail returns a Respond that answers status to the first n deliveries of
// each op id that matches (all ids if match is nil) and 200 afterwards.
func Fail(n, status int, match func(Delivery) bool) Respond {
	var mu sync.Mutex
	seen := map[string]int{}
	return func(_ context.Context, d Delivery) int {
		if match != nil && !match(d) {
			return http.StatusOK
		}
		mu.Lock()
		defer mu.Unlock()
		seen[d.ID]++
		if seen[d.ID] <= n {
			return status
		}
		return http.StatusOK
	}
}

// TokenInt returns the delivery's fencing token (the body's) as a number.
func (d Delivery) TokenInt() int64 {
	v, _ := strconv.ParseInt(d.Token, 10, 64)
	return v
}

// SetToken replaces Options.Token.
func (a *App) SetToken(token string) {
	a.mu.Lock()
	a.token = token
	a.mu.Unlock()
}
