//go:build linux

package sidecar

import (
	"log/slog"
	"os/exec"
	"testing"
	"time"
)

// TestExitWaiters: both ways of watching a caller see its exit (also as an
// unreaped zombie), and stop ends a wait. The pidfd watch must be the pidfd
// (no /proc polling behind it) where the kernel has one; how long either
// took is logged, not asserted (it moves with the machine's load, issue 24).
func TestExitWaiters(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name string
		new  func(pid int) exitWaiter
	}{
		{"pidfd", func(pid int) exitWaiter { return newExitWaiter(pid, log) }},
		{"poll", func(pid int) exitWaiter { return newPollWaiter(pid) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w := c.new(cmd.Process.Pid)
			if _, ok := w.(*pidfdWaiter); c.name == "pidfd" && !ok {
				t.Logf("pidfd not available here: %T", w)
			}
			got := make(chan bool, 1)
			go func() { got <- w.wait() }()
			select {
			case <-got:
				t.Fatal("wait returned while the process runs")
			case <-time.After(50 * time.Millisecond):
			}
			t0 := time.Now()
			_ = cmd.Process.Kill() // not reaped yet: a zombie until cmd.Wait
			select {
			case ok := <-got:
				if !ok {
					t.Errorf("wait = false after %v, want true", time.Since(t0))
				}
				t.Logf("exit seen after %v", time.Since(t0).Round(time.Millisecond))
				if pw, isPidfd := w.(*pidfdWaiter); isPidfd && pw.poll != nil {
					t.Errorf("the pidfd watch polled /proc: the poller would not take the pidfd")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("exit not seen")
			}
			w.stop()
			_ = cmd.Wait()

			cmd = exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			w = c.new(cmd.Process.Pid)
			go func() { got <- w.wait() }()
			w.stop()
			select {
			case ok := <-got:
				if ok {
					t.Errorf("wait after stop = true, want false")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("stop did not end the wait")
			}
		})
	}
	if w := newExitWaiter(1<<22+12345, log); !w.wait() {
		t.Errorf("a pid that does not exist is not reported exited")
	}
}
