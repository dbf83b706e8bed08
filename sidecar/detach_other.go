//go:build !linux

package sidecar

import "net"

// closeWatcher: without epoll, each detached connection is watched by a
// goroutine reading it (detachState.watch).
type closeWatcher struct{}

func (w *closeWatcher) watch(net.Conn, func()) (unwatch func(), ok bool) { return nil, false }

func (w *closeWatcher) watchHangup(net.Conn, func()) (unwatch func(), ok bool) { return nil, false }

func (w *closeWatcher) stop() {}

func (w *closeWatcher) available() bool { return false }
