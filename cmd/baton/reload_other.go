//go:build !linux

package main

import (
	"errors"
	"net"
)

// socketPeerPID is not implemented outside Linux (no SO_PEERCRED).
func socketPeerPID(net.Conn) (int, error) {
	return 0, errors.New("finding the peer's pid needs SO_PEERCRED (Linux)")
}
