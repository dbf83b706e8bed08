package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	code, stdout, stderr := runBaton(t, "version")
	v, c := buildVersion()
	want := "version: " + v + "\ncommit: " + c + "\ngo: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if code != 0 || stdout != want || stderr != "" {
		t.Errorf("baton version = %d, %q, %q; want 0, %q", code, stdout, stderr, want)
	}

	oldV, oldC := version, commit
	t.Cleanup(func() { version, commit = oldV, oldC })
	version, commit = "v9.8.7", "c0ffee"
	_, stdout, _ = runBaton(t, "version")
	if !strings.HasPrefix(stdout, "version: v9.8.7\ncommit: c0ffee\ngo: go") {
		t.Errorf("with -X values: %q", stdout)
	}
}

// TestVersionLdflags builds baton with -ldflags -X and runs it.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "baton")
	build := exec.Command(gobin, "build", "-o", bin, "-ldflags", "-X main.version=v1.2.3 -X main.commit=abc1234", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("baton version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "version: v1.2.3\ncommit: abc1234\ngo: go") {
		t.Errorf("baton version printed %q", out)
	}
}
