package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// InstallCommand is the command that installs what [StartZooKeeper] needs on
// Debian 12. Errors about a missing java or missing jars contain it verbatim.
const InstallCommand = "apt-get install -y openjdk-17-jre-headless zookeeper"

// ErrNotInstalled reports that java or the ZooKeeper jars are missing. The
// wrapping error names what is missing; its message contains [InstallCommand].
var ErrNotInstalled = errors.New("testenv: java or zookeeper not installed (run: " + InstallCommand + ")")

// ErrStopped is returned by methods called after Stop or Close.
var ErrStopped = errors.New("testenv: stopped")

// ErrNoSuchNode is returned for a node id outside 1..Nodes.
var ErrNoSuchNode = errors.New("testenv: no such node")

// ErrNotRunning is returned by Kill, Pause and Resume on a node whose process is not running.
var ErrNotRunning = errors.New("testenv: node not running")

// ErrRunning is returned by Restart on a node whose process is still running.
var ErrRunning = errors.New("testenv: node already running")

// ErrNoLeader is returned by Leader when no live node reports itself leader (or standalone).
var ErrNoLeader = errors.New("testenv: no leader")

// TB is the part of [testing.TB] the ...T helpers use. The package does not
// import "testing" because it is linked into the `baton dev` binary; any
// *testing.T, *testing.B or *testing.F satisfies TB.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
}

// failed reports whether t has failed, when t can tell (testing.TB can).
func failed(t TB) bool {
	f, ok := t.(interface{ Failed() bool })
	return ok && f.Failed()
}

// lineWriter prefixes each line written to w with prefix. It is safe for
// concurrent use and buffers a partial last line until its newline arrives.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func newLineWriter(w io.Writer, prefix string) *lineWriter {
	return &lineWriter{w: w, prefix: prefix}
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := l.buf[:i+1]
		if _, err := fmt.Fprintf(l.w, "%s%s", l.prefix, line); err != nil {
			l.buf = l.buf[i+1:]
			return len(p), err
		}
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

// syncWriter serializes writes to a writer that may not be safe for concurrent use.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// syncLog wraps w in a syncWriter; nil stays nil.
func syncLog(w io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	if _, ok := w.(*syncWriter); ok {
		return w
	}
	return &syncWriter{w: w}
}

// logf writes one progress line to w when w is not nil.
func logf(w io.Writer, format string, args ...any) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "testenv: "+format+"\n", args...)
}

// Buffer is a bytes.Buffer safe for concurrent Write and String: a log or
// output sink for processes and loggers under test.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
