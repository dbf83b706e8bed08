package sidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// debugStamps is a latency probe for `baton-bench floor`, off unless the
// environment variable BATON_DEBUG_STAMPS names a directory when the
// server is built: then every API request is recorded as the wall-clock
// times (ns) it was received (its header parsed) and its handler returned
// (the answer buffered; net/http flushes it right after), and the records
// are written to DIR/<pid>-<n>.stamps, one "METHOD PATH RECEIVED RETURNED"
// line each, when the server tears down. Off, it costs a nil check per
// request. It records at most maxDebugStamps requests.
type debugStamps struct {
	path string
	mu   sync.Mutex
	recs []debugStamp
}

type debugStamp struct {
	method, path string
	recv, done   int64
}

const maxDebugStamps = 1 << 20

var debugStampsSeq sync.Mutex
var debugStampsN int

// newDebugStamps returns the probe, or nil when BATON_DEBUG_STAMPS is unset.
func newDebugStamps() *debugStamps {
	dir := os.Getenv("BATON_DEBUG_STAMPS")
	if dir == "" {
		return nil
	}
	debugStampsSeq.Lock()
	debugStampsN++
	n := debugStampsN
	debugStampsSeq.Unlock()
	return &debugStamps{path: filepath.Join(dir, fmt.Sprintf("%d-%d.stamps", os.Getpid(), n))}
}

func (d *debugStamps) add(method, path string, recv time.Time) {
	done := time.Now().UnixNano()
	d.mu.Lock()
	if len(d.recs) < maxDebugStamps {
		d.recs = append(d.recs, debugStamp{method, path, recv.UnixNano(), done})
	}
	d.mu.Unlock()
}

// write writes the records (best effort: a probe).
func (d *debugStamps) write() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, r := range d.recs {
		fmt.Fprintf(&b, "%s %s %d %d\n", r.method, r.path, r.recv, r.done)
	}
	_ = os.WriteFile(d.path, []byte(b.String()), 0o600)
}
