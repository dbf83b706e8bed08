package sidecar_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With BATON_DEBUG_STAMPS naming a directory, the sidecar writes one line
// per API request there when it stops (baton-bench floor reads them): the
// acquire and the release, each received before its handler returned.
func TestDebugStampsRecordRequests(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BATON_DEBUG_STAMPS", dir)
	s := start(t, testConfig(t, testRoot(t), "stamps"))
	l := s.acquire("stamped", `{"wait_ms":5000}`)
	s.release(l.LeaseID)
	s.stop()
	files, err := filepath.Glob(filepath.Join(dir, "*.stamps"))
	if err != nil || len(files) != 1 {
		t.Fatalf("stamp files in %s = %v (%v), want one", dir, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"POST /v1/locks/stamped/acquire": false, "DELETE /v1/leases/" + l.LeaseID: false}
	for line := range strings.Lines(string(b)) {
		var method, path string
		var recv, done int64
		if _, err := fmt.Sscan(line, &method, &path, &recv, &done); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if recv <= 0 || done < recv {
			t.Errorf("line %q: received %d, returned %d", line, recv, done)
		}
		if _, ok := want[method+" "+path]; ok {
			want[method+" "+path] = true
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("no stamp for %s in %q", k, b)
		}
	}
}
