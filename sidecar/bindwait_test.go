package sidecar_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// forkedCaller connects to the socket as process A, forks B (which keeps the
// connection), and A exits 300 ms later; B sends a bound acquire at once and
// prints the answer. SO_PEERCRED names A, the process that connected.
const forkedCaller = `
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
if os.fork():
    time.sleep(0.3)
    os._exit(0)
body = b'{"bind":"process","wait_ms":20000}'
s.sendall(b"POST /v1/locks/bw/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
out = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    out += c
sys.stdout.write(out.decode())
`

// Issue 8: a bound acquire's caller is watched from when the request
// arrives, not from the grant. Here the process that asked (A) exits while
// the acquire waits and another process (B) keeps the connection: at the
// grant there is no process to bind the lease to, so no lease is handed out
// (before, the grant was answered 200 and bound to A's pid by number — a pid
// the system may have given to another process during a long wait).
func TestBoundCallerExitsDuringWait(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	root := testRoot(t)
	conn := rawConn(t)
	s := start(t, testConfig(t, root, "sc-a"))
	t.Cleanup(func() { assertNoLeftovers(t, conn, root) })

	st, raw := s.call("POST", "/v1/locks/bw/acquire", `{"lease_ms":60000}`)
	if st != 200 {
		t.Fatalf("holder acquire: %d %s", st, raw)
	}
	holder := decodeLease(t, raw)
	answer := make(chan string, 1)
	go func() {
		out, err := exec.Command(py, "-c", forkedCaller, s.cfg.SocketPath).Output()
		if err != nil {
			t.Errorf("python: %v", err)
		}
		answer <- string(out)
	}()
	waitFor(t, 10*time.Second, "the forked caller waiting", func() bool {
		st, raw := s.call("GET", "/v1/locks/bw", "")
		var lk struct{ Waiters []json.RawMessage }
		return st == 200 && json.Unmarshal(raw, &lk) == nil && len(lk.Waiters) == 1
	})
	time.Sleep(time.Second) // A has exited
	if st, raw := s.call("DELETE", "/v1/leases/"+holder.LeaseID, ""); st != 200 {
		t.Fatalf("holder release: %d %s", st, raw)
	}
	got := <-answer
	status := strings.SplitN(got, "\r\n", 2)[0]
	t.Logf("forked caller's answer: %s", status)
	if strings.Contains(status, " 200 ") {
		t.Errorf("a lease was granted to a caller that had exited during the wait:\n%s", got)
	}
	waitFor(t, 5*time.Second, "the object free", func() bool {
		st, raw := s.call("GET", "/v1/locks/bw", "")
		var lk struct{ Holder json.RawMessage }
		return st == 200 && json.Unmarshal(raw, &lk) == nil && (len(lk.Holder) == 0 || string(lk.Holder) == "null")
	})
}
