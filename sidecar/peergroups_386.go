//go:build linux && 386

package sidecar

import "errors"

// peerGroups is not implemented on linux/386 (no getsockopt syscall number):
// only the primary gid counts there.
func peerGroups(int) ([]uint32, error) {
	return nil, errors.New("SO_PEERGROUPS not implemented on linux/386")
}
