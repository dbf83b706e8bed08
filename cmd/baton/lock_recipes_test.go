package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// testLockRecipes: baton lock with several objects and with -n, through
// two sidecars.
//   - A set: CMD gets BATON_FENCING_TOKENS with each object's holder token.
//     Two commands naming the same two objects in opposite orders, on two
//     sidecars, in loops, against a command holding one of them: all exit 0
//     (no deadlock), and none ever overlaps another on an object (each CMD
//     mkdirs a directory per object it holds: a second holder's mkdir
//     fails and it exits 9).
//   - A semaphore of 2: commands on two sidecars in loops each hold a
//     permit below 2 and never the same permit as another (mkdir per
//     permit), so never more than 2 at once; with two holding, a third
//     waits (GET /v1/semaphores shows it) and runs once one exits.
//   - -n or several objects with the preemption flags, or -n out of range
//     or with several names: usage errors (64).
func testLockRecipes(t *testing.T, e *env, shared *sidecarProc) {
	other := e.startSidecar(t, "recipes-b", nil)
	defer other.stop(t)
	dir := t.TempDir()

	// The set's environment.
	code, out, errOut := lockIn(t, shared.socket, "rs-b", "rs-a", "--", "sh", "-c", `echo "obj=$BATON_OBJECT token=$BATON_FENCING_TOKEN tokens=$BATON_FENCING_TOKENS"`)
	m := regexp.MustCompile(`obj=rs-a token=(\d+) tokens=rs-a=(\d+) rs-b=(\d+)\n`).FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] != m[2] || m[2] == m[3] {
		t.Fatalf("baton lock rs-b rs-a: exit %d, stdout %q, stderr %q; want BATON_OBJECT rs-a, its token, and both tokens", code, out, errOut)
	}

	hold := func(objs ...string) string {
		var mk, rm []string
		for _, o := range objs {
			d := filepath.Join(dir, o)
			mk = append(mk, "mkdir "+d+" || exit 9")
			rm = append(rm, "rmdir "+d)
		}
		return strings.Join(mk, "; ") + "; sleep 0.02; " + strings.Join(rm, "; ")
	}
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
					t.Errorf("baton lock %q: still running after 90s (deadlock?); stderr %q", args, r.err.String())
					return
				}
			}
		})
	}
	run(shared.socket, "--wait", "60s", "rs-a", "rs-b", "--", "sh", "-c", hold("rs-a", "rs-b"))
	run(other.socket, "--wait", "60s", "rs-b", "rs-a", "--", "sh", "-c", hold("rs-a", "rs-b"))
	run(other.socket, "--wait", "60s", "rs-a", "--", "sh", "-c", hold("rs-a"))
	wg.Wait()

	// The semaphore.
	permitHold := `[ "$BATON_SEMAPHORE" = rsem ] && [ "$BATON_PERMIT" -lt 2 ] || exit 8; mkdir ` + dir + `/permit-$BATON_PERMIT || exit 9; sleep 0.02; rmdir ` + dir + `/permit-$BATON_PERMIT`
	for _, sock := range []string{shared.socket, shared.socket, other.socket, other.socket} {
		run(sock, "-n", "2", "--wait", "60s", "rsem", "--", "sh", "-c", permitHold)
	}
	wg.Wait()

	var pipes []*io.PipeWriter
	var holders []*lockRun
	for i, sock := range []string{shared.socket, other.socket} {
		pr, pw := io.Pipe()
		defer pw.Close()
		pipes = append(pipes, pw)
		r := startLock(sock, pr, "-n", "2", "--info", "h"+strconv.Itoa(i), "rsem", "--", "sh", "-c", `echo "permit=$BATON_PERMIT"; read x`)
		r.out.waitFor(t, 0, "\n", 30*time.Second)
		holders = append(holders, r)
	}
	third := startLock(other.socket, nil, "-n", "2", "--wait", "60s", "--info", "third", "rsem", "--", "sh", "-c", `echo "third permit=$BATON_PERMIT"`)
	c := client.New(shared.socket)
	defer c.Close()
	waitCond(t, 30*time.Second, "the third waiting", func() bool {
		st, err := c.Semaphore(context.Background(), "rsem")
		return err == nil && len(st.Holders) == 2 && len(st.Waiters) == 1 && st.Waiters[0].Info == "third"
	})
	select {
	case code := <-third.done:
		t.Fatalf("the third ran while two held: exit %d, stdout %q", code, third.out.String())
	default:
	}
	fmt.Fprintln(pipes[0], "done")
	pipes[0].Close()
	if code, _ := holders[0].wait(t, 30*time.Second); code != 0 {
		t.Errorf("first holder: exit %d, stderr %q", code, holders[0].err.String())
	}
	if code, _ := third.wait(t, 30*time.Second); code != 0 || !strings.Contains(third.out.String(), "third permit="+strings.TrimPrefix(strings.TrimSpace(holders[0].out.String()), "permit=")) {
		t.Errorf("third: exit %d, stdout %q, stderr %q; want the first holder's permit (%q)", code, third.out.String(), third.err.String(), holders[0].out.String())
	}
	fmt.Fprintln(pipes[1], "done")
	pipes[1].Close()
	holders[1].wait(t, 30*time.Second)

	for _, args := range [][]string{
		{"-n", "2", "a", "b", "--", "true"},
		{"-n", "300", "a", "--", "true"},
		{"-n", "2", "--preemptible", "a", "--", "true"},
		{"--preempt", "a", "b", "--", "true"},
		{"a", "b"},
	} {
		if code, _, errOut := lockIn(t, shared.socket, args...); code != exitUsage {
			t.Errorf("baton lock %q: exit %d, want %d (usage); stderr %q", args, code, exitUsage, errOut)
		}
	}
}
