package testenv

import (
	"net"
	"strconv"
	"testing"
	"time"
)

func TestReservePorts(t *testing.T) {
	t.Parallel()
	leases, err := ReservePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseAll(leases)
	seen := map[int]bool{}
	for _, l := range leases {
		p := l.Port()
		if p < PortRangeLow || p >= PortRangeHigh || seen[p] {
			t.Fatalf("ReservePorts(20) gave port %d (dup=%v), want distinct ports in [%d,%d)", p, seen[p], PortRangeLow, PortRangeHigh)
		}
		seen[p] = true
		if got, want := l.Addr(), "127.0.0.1:"+strconv.Itoa(p); got != want {
			t.Errorf("Addr() = %q, want %q", got, want)
		}
		// Another reservation of a held port fails, in this process...
		if again, err := tryReservePort(p); err != nil || again != nil {
			t.Fatalf("tryReservePort(%d) of a held port = %v, %v; want nil, nil", p, again, err)
		}
	}

	// ...and in another process (a parallel `go test` binary).
	p := leases[0].Port()
	if got := helperLine(t, "port="+strconv.Itoa(p)); got != "TAKEN" {
		t.Errorf("other process reserving held port %d: %q, want TAKEN", p, got)
	}
	leases[0].Release()
	leases[0].Release() // idempotent
	if got := helperLine(t, "port="+strconv.Itoa(p)); got != "FREE" {
		t.Errorf("other process reserving released port %d: %q, want FREE", p, got)
	}
}

// A port some other program listens on is skipped even though its lock file is free.
// The port is the kernel's choice, outside the reserved range: a port of the range
// released and then listened on here would be a trap for a parallel test that
// reserves it in between (its server's bind would fail).
func TestReservePortSkipsListened(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := ln.Addr().(*net.TCPAddr).Port
	if l, err := tryReservePort(p); err != nil || l != nil {
		t.Errorf("tryReservePort(%d) of a listened port = %v, %v; want nil, nil", p, l, err)
	}
}

// reserveListener's listener is bound at the lease's port, so nothing can
// take the port between the reservation and the server's use of it.
func TestReserveListener(t *testing.T) {
	t.Parallel()
	l, ln, err := reserveListener()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	defer ln.Close()
	if got := ln.Addr().String(); got != l.Addr() {
		t.Fatalf("listener at %s, lease %s", got, l.Addr())
	}
	if _, err := net.Listen("tcp", l.Addr()); err == nil {
		t.Fatalf("a second bind of %s succeeded: the reserved port was not held", l.Addr())
	}
	c, err := net.DialTimeout("tcp", l.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial the reserved listener: %v", err)
	}
	c.Close()
}

func helperLine(t *testing.T, mode string) string {
	t.Helper()
	_, out := startHelper(t, mode)
	line, err := readLine(out, 30*time.Second)
	if err != nil {
		t.Fatalf("helper %s: %v", mode, err)
	}
	return line
}
