package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// TestLockLossToldOnce: a Lock whose fn returns its context's cause (the
// loss) returns the loss once, and the loss names its reason once.
func TestLockLossToldOnce(t *testing.T) {
	c := newClient(t)
	err := c.Lock(context.Background(), "told-once", func(ctx context.Context) error {
		deletePrivateLock(t, "told-once")
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("Lock = %v, want ErrLockLost", err)
	}
	msg := err.Error()
	if n := strings.Count(msg, "is lost"); n != 1 {
		t.Errorf("Lock error says %q %d times, want once: %q", "is lost", n, msg)
	}
	if n := strings.Count(msg, api.ReasonLockDeleted); n != 1 {
		t.Errorf("Lock error names the reason %d times, want once: %q", n, msg)
	}
}

// TestUnreachableMessage: no socket is one "client:" error naming the
// request and the socket, without blaming ZooKeeper; errors.Is still sees
// ErrUnavailable and the missing file.
func TestUnreachableMessage(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	c := client.New(sock)
	defer c.Close()
	_, err := c.Acquire(context.Background(), "x")
	if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Acquire without a sidecar = %v, want ErrUnavailable and fs.ErrNotExist", err)
	}
	want := "client: POST /v1/locks/x/acquire: no sidecar answers at " + sock + ": connect: no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("Acquire without a sidecar = %q, want %q", err, want)
	}
}

// TestNotBatonMessage: something that is not Baton answering on the
// socket (an HTML page) is ErrUnavailable naming what answered, whatever
// the status, not a JSON decoding error.
func TestNotBatonMessage(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "web.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	status := 200
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		io.WriteString(w, "<html><body>hello</body></html>")
	})}
	go hs.Serve(ln)
	defer hs.Close()
	c := client.New(sock)
	defer c.Close()
	for _, status = range []int{200, 404, 503} {
		_, err := c.Health(context.Background())
		var nb *client.NotBatonError
		if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &nb) || nb.Status != status {
			t.Errorf("HTML answer %d: %v, want a *NotBatonError (ErrUnavailable)", status, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, sock+" does not answer as a Baton sidecar: HTTP "+strconv.Itoa(status)+", text/html") ||
			strings.Contains(msg, "invalid character") {
			t.Errorf("HTML answer %d: %q", status, msg)
		}
	}
}

// TestQueueFullBytesUnavailable: a 507 QueueFull (queue.max.bytes reached)
// is ErrUnavailable like a 503 QueueFull, keeping its status and message;
// another 4xx/5xx kind is not.
func TestQueueFullBytesUnavailable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "q.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	status, kind := 507, api.QueueFull
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":%q,"message":"past queue.max.bytes"}`, kind)
	})}
	go hs.Serve(ln)
	defer hs.Close()
	c := client.New(sock)
	defer c.Close()
	for _, tc := range []struct {
		status int
		kind   string
		want   bool
	}{{507, api.QueueFull, true}, {503, api.QueueFull, true}, {409, api.Conflict, false}, {500, api.InternalError, false}} {
		status, kind = tc.status, tc.kind
		_, err := c.Submit(context.Background(), api.OpRequest{Object: "o"})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Kind != tc.kind || errors.Is(err, client.ErrUnavailable) != tc.want {
			t.Errorf("%d %s: %v; want an APIError, ErrUnavailable %v", tc.status, tc.kind, err, tc.want)
		}
	}
}
