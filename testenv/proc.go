package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Child processes and how none outlives its owner.
//
// Every server is started with SysProcAttr{Setpgid: true, Pdeathsig: SIGKILL}.
// Linux sends the parent-death signal when the *thread* that forked the child
// exits, not the process, and the Go runtime is free to end threads. So each
// child is forked by its own goroutine that locks its OS thread first and
// stays on it, blocked in Wait, until the child is gone: the forking thread
// lives exactly as long as the child, and dies (taking the child along) only
// with the whole process. No goroutine outlives its child.
//
// Belt and braces: each server's command line carries
// -Dbaton.testenv.owner=PID:STARTTIME. ReapStale (run by every
// StartZooKeeper) kills processes carrying that marker whose owner is gone
// and removes temp dirs whose owner is gone; no other process is touched.

// ownerFlag is the command-line marker of servers started by testenv.
const ownerFlag = "-Dbaton.testenv.owner="

// ownerFile marks a directory created by testenv; it holds the owner id.
const ownerFile = ".baton-testenv-owner"

// tempPrefix names the temp dirs testenv creates (and may reap).
const tempPrefix = "baton-zk-"

// ownerID identifies a process across pid reuse: "PID:STARTTIME".
func ownerID(pid int) (string, error) {
	st, err := procStartTime(pid)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(pid) + ":" + st, nil
}

var self = sync.OnceValues(func() (string, error) { return ownerID(os.Getpid()) })

// procStartTime returns field 22 of /proc/PID/stat (start time in clock ticks since boot).
func procStartTime(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	i := bytes.LastIndexByte(b, ')') // comm may contain spaces and parens
	if i < 0 {
		return "", fmt.Errorf("testenv: parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 {
		return "", fmt.Errorf("testenv: parse /proc/%d/stat", pid)
	}
	return f[19], nil
}

// ownerAlive reports whether the owner "PID:STARTTIME" still runs. Anything
// unparsable counts as alive, so that the reaper never kills on a guess.
func ownerAlive(id string) bool {
	pidS, st, ok := strings.Cut(strings.TrimSpace(id), ":")
	pid, err := strconv.Atoi(pidS)
	if !ok || err != nil || pid <= 0 {
		return true
	}
	got, err := procStartTime(pid)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	return got == st
}

// process is one running child. done is closed when it has exited and been waited for.
type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	err  error // Wait's result, valid after done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has already exited. os.Process.Signal
// uses a pidfd, so a recycled pid is never hit.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// wait waits up to d for the process to exit; it reports whether it did.
func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// spawn starts cmd with Setpgid and Pdeathsig=SIGKILL from a goroutine that
// keeps its OS thread locked until the child has exited (see above).
// onExit (if not nil) runs after the child has been waited for, or after a failed start.
func spawn(cmd *exec.Cmd, onExit func()) (*process, error) {
	if onExit == nil {
		onExit = func() {}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: should anything below return early, the thread
		// exits with the goroutine, which is the safe direction.
		if err := cmd.Start(); err != nil {
			onExit()
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		onExit()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// ReapStale kills servers started by testenv whose owner process is gone,
// and removes testenv temp dirs (os.TempDir()/baton-zk-*) whose owner is
// gone. It recognizes servers only by the -Dbaton.testenv.owner= marker on
// their command line and dirs only by their owner file; other processes and
// files are never touched. It returns what it reaped, for logging.
func ReapStale() ([]string, error) {
	var reaped []string
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("testenv: reap: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue // gone, or not ours to read
		}
		owner, ok := cmdlineOwner(cmdline)
		if !ok || ownerAlive(owner) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			reaped = append(reaped, fmt.Sprintf("pid %d (owner %s gone)", pid, owner))
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil || ownerAlive(string(b)) {
			continue
		}
		if os.RemoveAll(d) == nil {
			reaped = append(reaped, "dir "+d)
		}
	}
	return reaped, nil
}

// cmdlineOwner returns the owner id of a NUL-separated command line carrying ownerFlag.
func cmdlineOwner(cmdline []byte) (string, bool) {
	for _, a := range bytes.Split(cmdline, []byte{0}) {
		if rest, ok := bytes.CutPrefix(a, []byte(ownerFlag)); ok {
			return string(rest), true
		}
	}
	return "", false
}

// tail returns up to the last n bytes of file name (best effort, for error messages).
func tail(name string, n int64) string {
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
