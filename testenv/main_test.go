package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// helperEnv selects a helper mode when the test binary is re-executed as a
// subprocess (see runHelper); tests never set it for themselves.
const helperEnv = "BATON_TESTENV_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

// runHelper runs one subprocess mode and returns its exit code.
//
//	zk      start a standalone ZooKeeper from a goroutine whose OS thread then
//	        exits, check it still serves, print "READY <java pid> <dir> <port>",
//	        and sleep until killed
//	sleep   sleep until killed (a stand-in for a stale server: its command
//	        line carries whatever arguments the test gave)
//	port=N  print "TAKEN" if port N is reserved by someone else, else "FREE"
func runHelper(mode string) int {
	switch {
	case mode == "zk":
		// Pin the main goroutine to the main thread (the runtime never ends
		// that one), so the goroutine below runs on a thread that can end.
		runtime.LockOSThread()
		type result struct {
			z   *ZooKeeper
			tid int
			err error
		}
		res := make(chan result)
		go func() {
			// Lock this goroutine to its thread and return without
			// unlocking: the runtime then ends the thread. Had the fork
			// happened on this thread, Pdeathsig would kill java then.
			runtime.LockOSThread()
			z, err := StartZooKeeper(ZKOptions{})
			res <- result{z, syscall.Gettid(), err}
		}()
		r := <-res
		if r.err != nil {
			fmt.Println("ERROR", r.err)
			return 1
		}
		if r.tid == os.Getpid() {
			fmt.Println("ERROR the starting goroutine ran on the main thread")
			r.z.Stop()
			return 1
		}
		for i := 0; ; i++ { // wait until the starting thread is gone
			if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", r.tid)); os.IsNotExist(err) {
				break
			}
			if i == 100 {
				fmt.Println("ERROR the starting thread did not exit")
				r.z.Stop()
				return 1
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // let a parent-death signal, if any, land
		if out, err := r.z.FourLetter(1, "ruok"); err != nil || out != "imok" {
			fmt.Println("ERROR ruok after the starting thread exited:", out, err)
			r.z.Stop()
			return 1
		}
		fmt.Printf("READY %d %s %d\n", r.z.PID(1), r.z.Dir(), r.z.nodes[0].clientPort)
		time.Sleep(time.Hour)
		return 0
	case mode == "sleep":
		time.Sleep(time.Hour)
		return 0
	case len(mode) > 5 && mode[:5] == "port=":
		port, err := strconv.Atoi(mode[5:])
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		l, err := tryReservePort(port)
		switch {
		case err != nil:
			fmt.Println("ERROR", err)
			return 1
		case l == nil:
			fmt.Println("TAKEN")
		default:
			l.Release()
			fmt.Println("FREE")
		}
		return 0
	}
	fmt.Println("ERROR unknown helper mode", mode)
	return 2
}

// startHelper re-executes the test binary in helper mode with args; the
// process is killed and reaped at cleanup. It returns the command and its stdout.
func startHelper(t *testing.T, mode string, args ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewReader(out)
}

// readLine reads one line from r within d.
func readLine(r *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := r.ReadString('\n')
		ch <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", fmt.Errorf("no line within %v", d)
	}
}

// exec0 runs a process to completion and returns its (now unused) pid.
func exec0(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
