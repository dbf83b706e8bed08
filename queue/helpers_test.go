package queue_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/queue"
)

// Child-process modes: the test binary re-executes itself with
// BATON_QUEUE_CHILD set to act as a second sidecar on the same directory.
const (
	envChild = "BATON_QUEUE_CHILD"
	envDir   = "BATON_QUEUE_DIR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(child(mode, os.Getenv(envDir)))
	}
	goleak.VerifyTestMain(m)
}

// child runs in the re-executed test binary. It reports on stdout and then
// blocks reading stdin until killed (or stdin closes).
func child(mode, dir string) int {
	s, err := queue.Open(dir, queue.Options{})
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	ctx := context.Background()
	switch mode {
	case "hold":
		// Just hold the directory lock.
	case "claim":
		// Claim a1, fail it once (attempts 1), claim it again, claim b1:
		// both running when the parent kills us.
		now := time.Now()
		a1, err := s.Claim(ctx, now)
		if err == nil {
			err = s.Retry(ctx, a1.ID, "HTTP503", "app answered HTTP 503", now.Add(-time.Second))
		}
		if err == nil {
			_, err = s.Claim(ctx, now)
		}
		if err == nil {
			_, err = s.Claim(ctx, now)
		}
		if err != nil {
			fmt.Printf("error %v\n", err)
			return 1
		}
	default:
		fmt.Printf("error unknown mode %q\n", mode)
		return 1
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	s.Close()
	return 0
}

// startChild re-executes the test binary in mode on dir and waits until it
// reports ready. The child is killed at cleanup if still running.
func startChild(t *testing.T, mode, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envDir+"="+dir)
	cmd.Stderr = t.Output()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child %s: got %q, %v; want ready", mode, line, err)
	}
	return cmd
}

// clock is a settable fake clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

func testLogger(t testing.TB) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func open(t testing.TB, dir string, opts queue.Options) *queue.Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	s, err := queue.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return s
}

func submit(t testing.TB, s *queue.Store, id, object string) queue.Op {
	t.Helper()
	op, created, err := s.Submit(context.Background(), queue.SubmitRequest{
		ID: id, Object: object, Info: "info " + id, Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id)),
	})
	if err != nil || !created {
		t.Fatalf("Submit(%s) = %v, created %v", id, err, created)
	}
	return op
}

func claim(t testing.TB, s *queue.Store, now time.Time) queue.Op {
	t.Helper()
	op, err := s.Claim(context.Background(), now)
	if err != nil {
		t.Fatalf("Claim(%v) = %v", now, err)
	}
	return op
}

func get(t testing.TB, s *queue.Store, id string) queue.Op {
	t.Helper()
	op, err := s.Get(id)
	if err != nil {
		t.Fatalf("Get(%s) = %v", id, err)
	}
	return op
}
