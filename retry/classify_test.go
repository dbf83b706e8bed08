package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/batonhq/baton/retry"
)

// instanceLockError stands in for lock.InstanceLockError: any error type with
// InstanceLock() bool is classified as an InstanceLockException.
type instanceLockError struct{ object string }

func (e *instanceLockError) Error() string      { return "lock " + e.object + ": not granted" }
func (e *instanceLockError) InstanceLock() bool { return true }

// realDialErrors returns errors from real failed connections on loopback.
func realDialErrors(t *testing.T) (refused, noSocket, timeout error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, refused = net.Dial("tcp", addr)
	if refused == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	_, noSocket = net.Dial("unix", filepath.Join(t.TempDir(), "missing.sock"))
	// A server that accepts but never answers, with a short client timeout.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	hc := http.Client{Timeout: 50 * time.Millisecond}
	_, timeout = hc.Get("http://" + hang.Addr().String() + "/")
	hc.CloseIdleConnections()
	return refused, noSocket, timeout
}

func TestClassify(t *testing.T) {
	refused, noSocket, httpTimeout := realDialErrors(t)
	lockErr := &instanceLockError{object: "article-42"}
	custom := &retry.Error{Class: retry.Permanent, Name: "BadAppURL", Err: errors.New("unsupported scheme")}
	tests := []struct {
		name      string
		err       error
		wantClass retry.Class
		wantName  string
	}{
		{"instance lock", lockErr, retry.Retryable, "InstanceLockException"},
		{"instance lock wrapped", fmt.Errorf("deliver op 7: %w", lockErr), retry.Retryable, "InstanceLockException"},
		{"deadline", context.DeadlineExceeded, retry.Retryable, "Timeout"},
		{"http client timeout", httpTimeout, retry.Retryable, "Timeout"},
		{"os deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), retry.Retryable, "Timeout"},
		{"connection refused", refused, retry.Retryable, "ConnectionError"},
		{"missing unix socket", noSocket, retry.Retryable, "ConnectionError"},
		{"eof", fmt.Errorf("post: %w", io.EOF), retry.Retryable, "ConnectionError"},
		{"unexpected eof", io.ErrUnexpectedEOF, retry.Retryable, "ConnectionError"},
		{"canceled", context.Canceled, retry.Retryable, "Canceled"},
		{"HTTP 408", &retry.StatusError{Code: 408}, retry.Retryable, "HTTP408"},
		{"HTTP 409", &retry.StatusError{Code: 409}, retry.Retryable, "HTTP409"},
		{"HTTP 423", &retry.StatusError{Code: 423}, retry.Retryable, "HTTP423"},
		{"HTTP 429", &retry.StatusError{Code: 429}, retry.Retryable, "HTTP429"},
		{"HTTP 500", &retry.StatusError{Code: 500}, retry.Retryable, "HTTP500"},
		{"HTTP 503 wrapped", fmt.Errorf("op 7: %w", &retry.StatusError{Code: 503, Body: "busy"}), retry.Retryable, "HTTP503"},
		{"HTTP 599", &retry.StatusError{Code: 599}, retry.Retryable, "HTTP599"},
		{"HTTP 301 not followed", &retry.StatusError{Code: 301}, retry.Retryable, "HTTP301"},
		{"HTTP 400", &retry.StatusError{Code: 400}, retry.Permanent, "HTTP400"},
		{"HTTP 401", &retry.StatusError{Code: 401}, retry.Permanent, "HTTP401"},
		{"HTTP 404", &retry.StatusError{Code: 404}, retry.Permanent, "HTTP404"},
		{"HTTP 410", &retry.StatusError{Code: 410}, retry.Permanent, "HTTP410"},
		{"HTTP 422", &retry.StatusError{Code: 422}, retry.Permanent, "HTTP422"},
		{"HTTP 499", &retry.StatusError{Code: 499}, retry.Permanent, "HTTP499"},
		{"explicit permanent", custom, retry.Permanent, "BadAppURL"},
		{"explicit wrapped", fmt.Errorf("x: %w", custom), retry.Permanent, "BadAppURL"},
		{"backoff.Permanent of a retryable kind", backoff.Permanent(io.EOF), retry.Permanent, "ConnectionError"},
		{"unknown", errors.New("something odd"), retry.Retryable, "Error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.Classify(tt.err)
			if got == nil || got.Class != tt.wantClass || got.Name != tt.wantName {
				t.Fatalf("Classify(%v) = %+v, want class %v name %s", tt.err, got, tt.wantClass, tt.wantName)
			}
			if !errors.Is(got, tt.err) && !errors.Is(tt.err, got) {
				t.Errorf("Classify(%v) does not wrap the original error", tt.err)
			}
			var asErr *retry.Error
			if !errors.As(fmt.Errorf("outer: %w", got), &asErr) || asErr.Name != tt.wantName {
				t.Errorf("errors.As(*retry.Error) failed on a wrapped classification")
			}
			if got.Temporary() != (tt.wantClass == retry.Retryable) {
				t.Errorf("Temporary() = %v for class %v", got.Temporary(), got.Class)
			}
			// Backoff wraps exactly the permanent ones for backoff.Retry.
			_, isPerm := errors.AsType[*backoff.PermanentError](retry.Backoff(tt.err))
			if isPerm != (tt.wantClass == retry.Permanent) {
				t.Errorf("Backoff(%v) permanent = %v, want %v", tt.err, isPerm, tt.wantClass == retry.Permanent)
			}
		})
	}
	if retry.Classify(nil) != nil || retry.Backoff(nil) != nil {
		t.Errorf("Classify(nil)/Backoff(nil) not nil")
	}
}

func TestClassifyStatus(t *testing.T) {
	for code := 100; code < 600; code++ {
		got := retry.ClassifyStatus(code)
		if code >= 200 && code <= 299 {
			if got != nil {
				t.Errorf("ClassifyStatus(%d) = %v, want nil", code, got)
			}
			continue
		}
		wantPerm := code >= 400 && code <= 499 && code != 408 && code != 409 && code != 423 && code != 429
		if (got.Class == retry.Permanent) != wantPerm || got.Name != fmt.Sprintf("HTTP%d", code) {
			t.Errorf("ClassifyStatus(%d) = %v/%s, want permanent=%v", code, got.Class, got.Name, wantPerm)
		}
	}
}
