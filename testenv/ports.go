package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Port reservation, after Consul's sdk/freeport: ports come from a fixed
// range below Linux's ephemeral range (32768-60999), so the kernel never hands
// them out to an unrelated socket bound to port 0. A port is reserved by an
// exclusive, non-blocking flock on os.TempDir()/baton-ports/PORT.lock, held
// for as long as the server that uses it lives. flock locks belong to the open
// file description, so they exclude other goroutines of this process as well
// as other processes (parallel `go test` binaries), and the kernel drops them
// when the holder dies, so a crashed test never leaks a reservation. The lock
// files are never deleted: unlinking a locked file would let a third process
// lock a new file of the same name while the old one is still held.
const (
	// PortRangeLow and PortRangeHigh bound the reserved ports (inclusive, exclusive).
	PortRangeLow  = 21000
	PortRangeHigh = 32000
)

// PortDir is the directory of the per-port lock files.
func PortDir() string { return filepath.Join(os.TempDir(), "baton-ports") }

// PortLease is a reserved loopback port. Release it when the server using it
// is gone. Methods are safe for concurrent use.
type PortLease struct {
	port int
	mu   sync.Mutex
	f    *os.File
}

// Port returns the reserved port number.
func (l *PortLease) Port() int { return l.port }

// Addr returns "127.0.0.1:port".
func (l *PortLease) Addr() string { return loopback(l.port) }

// Release gives the port back. It is idempotent.
func (l *PortLease) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close() // closing the descriptor drops the flock
		l.f = nil
	}
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// ReservePorts reserves n distinct free loopback ports in
// [PortRangeLow, PortRangeHigh). A port is free when no other holder has its
// lock file locked and 127.0.0.1:port can be listened on right now.
func ReservePorts(n int) ([]*PortLease, error) {
	if err := os.MkdirAll(PortDir(), 0o777); err != nil {
		return nil, fmt.Errorf("testenv: reserve ports: %w", err)
	}
	span := PortRangeHigh - PortRangeLow
	start := rand.IntN(span)
	var leases []*PortLease
	for i := 0; i < span && len(leases) < n; i++ {
		port := PortRangeLow + (start+i)%span
		l, err := tryReservePort(port)
		if err != nil {
			releaseAll(leases)
			return nil, err
		}
		if l != nil {
			leases = append(leases, l)
		}
	}
	if len(leases) < n {
		releaseAll(leases)
		return nil, fmt.Errorf("testenv: reserve ports: only %d of %d free in [%d,%d)", len(leases), n, PortRangeLow, PortRangeHigh)
	}
	return leases, nil
}

// tryReservePort reserves port, or returns (nil, nil) when it is taken.
func tryReservePort(port int) (*PortLease, error) {
	name := filepath.Join(PortDir(), strconv.Itoa(port)+".lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o666)
	if err != nil {
		return nil, fmt.Errorf("testenv: reserve port %d: %w", port, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("testenv: lock %s: %w", name, err)
	}
	ln, err := net.Listen("tcp", loopback(port))
	if err != nil { // used by something that does not take our locks
		f.Close()
		return nil, nil
	}
	ln.Close()
	return &PortLease{port: port, f: f}, nil
}

// reserveListener reserves a port and keeps it bound, for a server that runs
// in this process and can take a listener: the port cannot be taken between
// the check and the server's bind. A port bound by a program that does not
// take our locks after the check is skipped for another.
func reserveListener() (*PortLease, net.Listener, error) {
	var last error
	for range 10 {
		leases, err := ReservePorts(1)
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", leases[0].Addr())
		if err == nil {
			return leases[0], ln, nil
		}
		leases[0].Release()
		last = err
	}
	return nil, nil, fmt.Errorf("testenv: reserve a listening port: %w", last)
}

func releaseAll(leases []*PortLease) {
	for _, l := range leases {
		l.Release()
	}
}
