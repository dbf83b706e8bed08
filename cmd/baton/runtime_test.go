package main

import (
	"math"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/batonhq/baton/props"
)

// TestServeRuntime: baton serve's GOMAXPROCS default applies only when the
// environment does not set GOMAXPROCS, and GOMEMLIMIT's only when it does
// not set GOMEMLIMIT.
func TestServeRuntime(t *testing.T) {
	procs, limit := runtime.GOMAXPROCS(0), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs); debug.SetMemoryLimit(limit) })
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	runtime.GOMAXPROCS(2)
	p, l := setServeRuntime(env(map[string]string{"GOMAXPROCS": "2", "GOMEMLIMIT": "1GiB"}))
	if p != 2 || l != limit {
		t.Errorf("environment set: GOMAXPROCS %d, GOMEMLIMIT %d; want 2 and %d (untouched)", p, l, limit)
	}
	p, l = setServeRuntime(env(nil))
	if want := min(serveMaxProcs, runtime.NumCPU()); p != want {
		t.Errorf("environment unset: GOMAXPROCS %d, want %d", p, want)
	}
	if want := int64(serveMemLimit); l != want {
		t.Errorf("environment unset: GOMEMLIMIT %d, want %d", l, want)
	}
}

// TestMemLimitWarning: the default sidecar.max.waiters fits the default
// GOMEMLIMIT (the 10,000-waiter probe's live set, with room); twice as
// many do not, and the warning says what to set; no limit, no warning.
func TestMemLimitWarning(t *testing.T) {
	if w := memLimitWarning(10_000, serveMemLimit); w != "" {
		t.Errorf("the defaults warn: %s", w)
	}
	w := memLimitWarning(20_000, serveMemLimit)
	for _, want := range []string{"sidecar.max.waiters is 20000", "about 434 MiB live", "above GOMEMLIMIT (232 MiB)", "set GOMEMLIMIT to at least 435MiB"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
	if w := memLimitWarning(10_000_000, math.MaxInt64); w != "" {
		t.Errorf("no limit, yet a warning: %s", w)
	}
}

// TestServeWarnsMemoryLimit: baton serve logs the warning at start when
// its memory limit is below what sidecar.max.waiters can keep live, and
// not with the defaults.
func TestServeWarnsMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(serveMemLimit))
	for _, tc := range []struct {
		waiters string
		warn    bool
	}{{"10000", false}, {"20000", true}} {
		t.Run(tc.waiters, func(t *testing.T) {
			dir := cleanEnv(t)
			opts := props.LoadOptions{NoFile: true, Set: []string{
				"zookeeper.servers=127.0.0.1:1", "sidecar.socket.path=" + filepath.Join(dir, "s.sock"),
				"queue.dir=" + filepath.Join(dir, "q"), "sidecar.max.waiters=" + tc.waiters,
			}}
			out := serveStartLogs(t, opts)
			re := regexp.MustCompile(`(?m)^.*level=WARN msg="memory limit below the waiters' need" key=sidecar.max.waiters warning="sidecar.max.waiters is 20000: .*set GOMEMLIMIT to at least 435MiB`)
			if got := re.MatchString(out); got != tc.warn {
				t.Errorf("warning logged: %v, want %v:\n%s", got, tc.warn, out)
			}
		})
	}
}
