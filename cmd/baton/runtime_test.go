package main

import (
	"runtime"
	"runtime/debug"
	"testing"
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
