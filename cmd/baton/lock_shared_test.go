package main

import (
	"strings"
	"testing"
)

// testLockShared: baton lock --shared on a plugin-protocol sidecar is
// refused loudly (exit 64, the sidecar's SharedNeedsNative naming
// zookeeper.lock.protocol=native), and the command does not run;
// --shared with -n is a usage error.
func testLockShared(t *testing.T, e *env, plugin *sidecarProc) {
	code, out, errOut := lockIn(t, plugin.socket, "--shared", "--wait", "1s", "sh-plugin", "--", "echo", "ran")
	if code != exitUsage || strings.Contains(out, "ran") || !strings.Contains(errOut, "SharedNeedsNative") ||
		!strings.Contains(errOut, "zookeeper.lock.protocol=native") {
		t.Errorf("baton lock --shared on a plugin sidecar: exit %d, stdout %q, stderr %q; want 64, SharedNeedsNative naming zookeeper.lock.protocol=native, CMD not run",
			code, out, errOut)
	}
	if code, _, errOut := lockIn(t, plugin.socket, "--shared", "-n", "2", "sh-sem", "--", "true"); code != exitUsage || !strings.Contains(errOut, "--shared") {
		t.Errorf("baton lock --shared -n 2: exit %d, stderr %q; want 64 naming --shared", code, errOut)
	}
}
