package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// listenUnix listens on a unix socket at path with the given mode. If the
// path exists it must be a socket: when something answers on it, listenUnix
// refuses (another sidecar runs); when nothing does, the file is a stale
// leftover of a crashed run and is replaced.
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("sidecar: %s exists and is not a socket; remove it or choose another sidecar.socket.path", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("sidecar: another process (a running sidecar?) answers on %s; stop it or choose another sidecar.socket.path", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("sidecar: probing %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("sidecar: removing stale socket: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sidecar: socket directory: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("sidecar: listen: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if mode == 0 {
		mode = 0o660
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		ln.Close()
		return nil, fmt.Errorf("sidecar: chmod socket: %w", err)
	}
	return ln, nil
}
