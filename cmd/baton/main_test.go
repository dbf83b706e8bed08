package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runBaton runs baton in-process and returns its exit status and output.
func runBaton(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// cleanEnv runs the test in an empty directory (no ./baton.properties)
// without any BATON_ variable from the outside.
func cleanEnv(t *testing.T) string {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "BATON_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
	dir := t.TempDir()
	t.Chdir(dir)
	return dir
}

func writeFile(t *testing.T, path string, lines ...string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUsageErrors(t *testing.T) {
	cleanEnv(t)
	for _, tc := range []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"no command", nil, "missing command"},
		{"unknown command", []string{"bogus"}, `unknown command "bogus" for "baton"`},
		{"unknown command suggestion", []string{"vresion"}, `(did you mean "version"?)`},
		{"unknown flag", []string{"--bogus"}, "unknown flag: --bogus"},
		{"unknown subcommand flag", []string{"config", "check", "--bogus"}, "unknown flag: --bogus"},
		{"missing subcommand", []string{"config"}, "baton config needs a subcommand: check"},
		{"unknown subcommand", []string{"config", "chek"}, `unknown command "chek" for "baton config" (did you mean "check"?)`},
		{"extra argument", []string{"version", "x"}, `unknown command "x" for "baton version"`},
		{"flag without value", []string{"config", "check", "--set"}, "flag needs an argument: --set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runBaton(t, tc.args...)
			if code != exitUsage {
				t.Errorf("baton %q = exit %d, want %d", tc.args, code, exitUsage)
			}
			if !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--help' for usage") {
				t.Errorf("baton %q stderr = %q, want %q and a usage hint", tc.args, stderr, tc.want)
			}
			if strings.Count(stderr, tc.want) != 1 {
				t.Errorf("baton %q printed the error %d times: %q", tc.args, strings.Count(stderr, tc.want), stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	code, stdout, stderr := runBaton(t, "--help")
	if code != exitOK || !strings.Contains(stdout, "config") || !strings.Contains(stdout, "--set key=value") || stderr != "" {
		t.Errorf("baton --help = %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestRunIsFresh(t *testing.T) {
	// Flags of one run must not leak into the next (the root is rebuilt).
	cleanEnv(t)
	if code, _, _ := runBaton(t, "config", "check", "--set", "log.level=debug"); code != 0 {
		t.Fatalf("first run exit %d", code)
	}
	_, stdout, _ := runBaton(t, "config", "check")
	if !strings.Contains(stdout, "log.level=info  # default\n") {
		t.Errorf("second run shows %q, want the default log.level", stdout)
	}
}

func TestSocketFlag(t *testing.T) {
	cleanEnv(t)
	sock := filepath.Join(t.TempDir(), "b.sock")
	_, stdout, _ := runBaton(t, "--socket", sock, "config", "check")
	if want := "sidecar.socket.path=" + sock + "  # --socket\n"; !strings.Contains(stdout, want) {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
}
