package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// testLockSharedNative: baton lock --shared on two sidecar processes of a
// native root (zookeeper.lock.protocol=native).
//   - Two holds without a command (baton lock processes), one per sidecar,
//     hold the object shared at once: baton locks prints both holder lines
//     with mode shared, baton watch lists both in holders=, baton status
//     says native; an exclusive try-once exits 75, and one with -v says
//     it waits for a shared holder "and 1 other shared holders".
//   - Inside a baton lock --shared, a nested baton lock of the object
//     re-enters only with --shared: without it, exit 64 naming --shared
//     and the mode rule (no silent upgrade).
//   - Readers (--shared) and writers in loops on both sidecars, each CMD
//     checks the others with files: a reader creates r.<pid> then fails
//     (exit 9) if the writer's directory w exists; a writer mkdirs w (a
//     second writer fails) then fails if any r.* exists. Whichever of two
//     overlapping holders came second sees the first: any overlap of a
//     writer with anyone exits 9. All exit 0.
func testLockSharedNative(t *testing.T, e *env) {
	extra := map[string]string{"zookeeper.lock.root": e2eRoot + "-native", "zookeeper.lock.protocol": "native",
		"zookeeper.object.node": "persistent"}
	a := e.startSidecar(t, "native-a", extra)
	defer a.stop(t)
	b := e.startSidecar(t, "native-b", extra)
	defer b.stop(t)

	var holds []*proc
	for i, s := range []*sidecarProc{a, b} {
		p := start(t, "shared-hold-"+string(rune('a'+i)), nil, e.bin, "--socket", s.socket, "lock", "--shared", "--wait", "30s", "article-1")
		p.out.waitFor(t, 0, "until SIGINT (Ctrl-C) or SIGTERM", 30*time.Second)
		holds = append(holds, p)
	}
	code, stdout, stderr := runBaton(t, "--config", "/dev/null", "--socket", a.socket, "locks", "article-1")
	if n := len(regexp.MustCompile(`(?m)^holder\s+A_s_[0-9a-f]+_\d{10}  type foreground  mode shared  sidecar native-[ab]  `).FindAllString(stdout, -1)); code != 0 || n != 2 {
		t.Errorf("baton locks article-1 with two shared holders: exit %d, %d shared holder lines in\n%s%s", code, n, stdout, stderr)
	}
	code, stdout, _ = runBaton(t, "--config", "/dev/null", "--socket", b.socket, "watch", "--count", "1", "article-1")
	if code != 0 || !regexp.MustCompile(` held token=\d+ node=A_s_[0-9a-f]+_\d{10} sidecar=native-[ab] type=foreground mode=shared .* holders=A_s_[0-9a-f]+_\d{10}@native-[ab],A_s_[0-9a-f]+_\d{10}@native-[ab] `).MatchString(stdout) {
		t.Errorf("baton watch article-1 with two shared holders: exit %d, %q", code, stdout)
	}
	if code, stdout, _ = runBaton(t, "--config", "/dev/null", "--socket", a.socket, "status"); !regexp.MustCompile(`(?m)^lock protocol\s+native$`).MatchString(stdout) {
		t.Errorf("baton status on a native sidecar: exit %d, %q", code, stdout)
	}
	if code, _, errOut := lockIn(t, b.socket, "--wait", "0", "article-1", "--", "echo", "ran"); code != exitNotTaken {
		t.Errorf("exclusive baton lock --wait 0 beside shared holders: exit %d, stderr %q; want %d", code, errOut, exitNotTaken)
	}
	code, _, errOut := lockIn(t, b.socket, "-v", "--wait", "2500ms", "article-1", "--", "echo", "ran")
	if code != exitNotTaken || !regexp.MustCompile(`waiting for "article-1": held by A_s_\S+ on sidecar native-[ab] \(foreground, shared, token \d+, .*\) and 1 other shared holders; 1 waiting`).MatchString(errOut) {
		t.Errorf("baton lock -v behind two shared holders: exit %d, stderr %q; want 75 after saying it waits for a shared holder and 1 other", code, errOut)
	}
	if !strings.Contains(holds[0].out.String(), `holding "article-1" shared (token `) {
		t.Errorf("baton lock --shared without a command: %q, want it to say shared", holds[0].out.String())
	}
	for _, p := range holds {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Errorf("shared hold after SIGTERM: exit %d, output %q", code, p.out.String())
		}
	}

	// No silent upgrade: run inside a shared baton lock, a baton lock of the
	// same object re-enters its lease only as shared.
	nested := func(args ...string) []string {
		return append([]string{"--shared", "--wait", "30s", "article-3", "--", e.bin, "--config", "/dev/null", "--socket", a.socket, "lock"}, args...)
	}
	if code, _, errOut := lockIn(t, a.socket, nested("article-3", "--", "true")...); code != exitUsage ||
		!strings.Contains(errOut, "--shared: rejected by the sidecar") || !strings.Contains(errOut, "keeps the lease's mode") {
		t.Errorf("exclusive baton lock inside a shared one: exit %d, stderr %q; want 64 naming --shared and the mode rule", code, errOut)
	}
	if code, out, errOut := lockIn(t, a.socket, nested("--shared", "article-3", "--", "sh", "-c", `echo "lease=$BATON_LEASE_ID"`)...); code != 0 ||
		!strings.Contains(out, "lease=") {
		t.Errorf("shared baton lock inside a shared one (re-entry): exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	dir := t.TempDir()
	reader := `touch ` + dir + `/r.$$; [ -e ` + dir + `/w ] && exit 9; sleep 0.02; [ -e ` + dir + `/w ] && exit 9; rm ` + dir + `/r.$$`
	writer := `mkdir ` + dir + `/w || exit 9; ls ` + dir + `/r.* >/dev/null 2>&1 && exit 9; sleep 0.02; ls ` + dir + `/r.* >/dev/null 2>&1 && exit 9; rmdir ` + dir + `/w`
	var wg sync.WaitGroup
	run := func(sock string, args ...string) {
		wg.Go(func() {
			for range 4 {
				r := startLock(sock, nil, args...)
				select {
				case code := <-r.done:
					if code != 0 {
						t.Errorf("baton lock %q: exit %d (9: an overlap), stderr %q", args, code, r.err.String())
						return
					}
				case <-time.After(90 * time.Second):
					t.Errorf("baton lock %q: still running after 90s; stderr %q", args, r.err.String())
					return
				}
			}
		})
	}
	for _, s := range []*sidecarProc{a, b} {
		run(s.socket, "--shared", "--wait", "60s", "article-2", "--", "sh", "-c", reader)
		run(s.socket, "--shared", "--wait", "60s", "article-2", "--", "sh", "-c", reader)
		run(s.socket, "--wait", "60s", "article-2", "--", "sh", "-c", writer)
	}
	wg.Wait()
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("left by the commands: %v", left)
	}
	c := client.New(a.socket)
	defer c.Close()
	st, err := c.Inspect(context.Background(), "article-2")
	if err != nil || st.Holder != nil || len(st.Holders) != 0 || len(st.Waiters) != 0 {
		t.Errorf("article-2 after the loops: %+v, %v; want free", st, err)
	}
}
