package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/cenkalti/backoff/v4"
)

// Class says whether a failed attempt is worth repeating.
type Class int

const (
	// Retryable failures may succeed later: the op goes to retrying until
	// its retries are used up.
	Retryable Class = iota + 1
	// Permanent failures cannot succeed by repetition: the op is
	// dead-lettered at once.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Error names (the op's error_class and the dead letter's
// baton-error-class). HTTP statuses are named "HTTP" + code, e.g. "HTTP503".
const (
	NameInstanceLock = "InstanceLockException" // the background lock was not granted in time
	NameTimeout      = "Timeout"               // the delivery (or a step of it) ran out of time
	NameConnection   = "ConnectionError"       // the app could not be reached, or hung up
	NameCanceled     = "Canceled"              // the attempt's context was canceled
	NameUnknown      = "Error"                 // anything else (classified retryable)
)

// Error is a classified delivery failure. Error() is the underlying message
// (suitable for last_error); Name is the stable error class. Build one
// directly to force a class, e.g. for an app URL that can never work:
//
//	&retry.Error{Class: retry.Permanent, Name: "BadAppURL", Err: err}
//
// [Classify] returns an *Error found in the chain unchanged.
type Error struct {
	Class Class
	Name  string
	Err   error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Name
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Temporary reports whether the failure is retryable (kafka-go's
// Error.Temporary convention).
func (e *Error) Temporary() bool { return e.Class == Retryable }

// InstanceLocker is implemented by errors that report a lock acquire that
// timed out or was cancelled before the grant (the API's InstanceLockException).
// The lock package's *InstanceLockError (and the Go client's) should
// implement it as
//
//	func (*InstanceLockError) InstanceLock() bool { return true }
//
// so that retry does not import them.
type InstanceLocker interface {
	InstanceLock() bool
}

// HTTPStatuser is implemented by errors that carry the app's HTTP answer,
// such as [*StatusError].
type HTTPStatuser interface {
	HTTPStatus() int
}

// StatusError is a non-2xx answer of the app to a delivery.
type StatusError struct {
	Code int
	Body string // possibly truncated by the caller
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("app answered HTTP %d", e.Code)
	}
	return fmt.Sprintf("app answered HTTP %d: %s", e.Code, e.Body)
}

// HTTPStatus returns the status code.
func (e *StatusError) HTTPStatus() int { return e.Code }

// ClassifyStatus classifies an HTTP status of the app's answer: nil for 2xx;
// retryable for 408, 409, 423, 429, 5xx and any other non-4xx code (1xx,
// 3xx: a redirect Baton does not follow may be a transient deployment
// state, and retries are bounded anyway); permanent for the other 4xx.
func ClassifyStatus(code int) *Error {
	return classifyStatus(code, &StatusError{Code: code})
}

func classifyStatus(code int, err error) *Error {
	if code >= 200 && code <= 299 {
		return nil
	}
	name := fmt.Sprintf("HTTP%d", code)
	switch {
	case code == 408, code == 409, code == 423, code == 429:
		return &Error{Class: Retryable, Name: name, Err: err}
	case code >= 400 && code <= 499:
		return &Error{Class: Permanent, Name: name, Err: err}
	default:
		return &Error{Class: Retryable, Name: name, Err: err}
	}
}

// Classify maps the outcome of a delivery attempt to an [*Error] (nil for a
// nil err). The first rule that matches wins:
//
//  1. a backoff.PermanentError in the chain: the inner error's name,
//     permanent; else an *Error in the chain: returned as is;
//  2. an error implementing [InstanceLocker] whose InstanceLock() is true:
//     retryable, InstanceLockException;
//  3. an error implementing [HTTPStatuser]: by [ClassifyStatus] (a 2xx status
//     here is treated as retryable "HTTP2xx", since an error was reported);
//  4. timeouts (context.DeadlineExceeded, os.ErrDeadlineExceeded, a net.Error
//     with Timeout()): retryable, Timeout;
//  5. context.Canceled: retryable, Canceled (callers that cancel on shutdown
//     should give the op back instead of classifying);
//  6. connection errors (refused, reset, aborted, broken pipe, unreachable,
//     a missing unix socket, EOF from the app, *net.OpError, *net.DNSError):
//     retryable, ConnectionError;
//  7. anything else: retryable, Error — unknown failures are retried, bounded
//     by the retry count.
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	if p, ok := errors.AsType[*backoff.PermanentError](err); ok && p.Err != nil {
		inner := Classify(p.Err)
		if inner.Class == Permanent {
			return inner
		}
		return &Error{Class: Permanent, Name: inner.Name, Err: err}
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	var l InstanceLocker
	if errors.As(err, &l) && l.InstanceLock() {
		return &Error{Class: Retryable, Name: NameInstanceLock, Err: err}
	}
	var s HTTPStatuser
	if errors.As(err, &s) {
		if e := classifyStatus(s.HTTPStatus(), err); e != nil {
			return e
		}
		return &Error{Class: Retryable, Name: fmt.Sprintf("HTTP%d", s.HTTPStatus()), Err: err}
	}
	if isTimeout(err) {
		return &Error{Class: Retryable, Name: NameTimeout, Err: err}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Class: Retryable, Name: NameCanceled, Err: err}
	}
	if isConnection(err) {
		return &Error{Class: Retryable, Name: NameConnection, Err: err}
	}
	return &Error{Class: Retryable, Name: NameUnknown, Err: err}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

func isConnection(err error) bool {
	for _, target := range []error{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN,
		syscall.ENOENT, // unix socket of the app not there (yet)
		syscall.EAGAIN, // unix socket backlog full
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	return false
}

// Backoff prepares err for a backoff.Retry loop: it classifies err and wraps
// permanent failures in backoff.Permanent so the loop stops at once. It
// returns nil for nil.
func Backoff(err error) error {
	e := Classify(err)
	if e == nil {
		return nil
	}
	if e.Class == Permanent {
		return backoff.Permanent(e)
	}
	return e
}
