//go:build !linux

package sidecar

import (
	"log/slog"
	"net"
)

// peerCred is not available on this platform: the caller is unknown (a
// client, never an admin).
func peerCred(c net.Conn) peer {
	if pc, ok := c.(*peerConn); ok {
		return pc.p
	}
	return peer{}
}

func newExitWaiter(int, *slog.Logger) exitWaiter { return neverWaiter{make(chan struct{})} }

type neverWaiter struct{ quit chan struct{} }

func (w neverWaiter) wait() bool { <-w.quit; return false }
func (w neverWaiter) stop()      { close(w.quit) }
