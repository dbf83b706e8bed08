package sidecar

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// closeWatcher notices detached callers leaving (detach.go) with one epoll
// instance and one goroutine for all of them, instead of a goroutine per
// connection blocked in a read: with 10,000 waiting acquires that is 10,000
// goroutine stacks less for the sidecar to hold and for every collection to
// scan. It starts with the first connection watched and stops with the
// server (stop).
type closeWatcher struct {
	mu      sync.Mutex
	started bool
	failed  bool // epoll unavailable: watch answers false (the caller reads instead)
	stopped bool
	epfd    int
	wake    [2]int // a pipe whose read end is in the set: stop writes to it
	seq     int32
	m       map[int32]watched // by fd
	done    chan struct{}
	events  atomic.Int64 // events of watched connections handled (tests)
}

type watched struct {
	seq  int32 // the registration's: an event of an earlier connection with the same fd is not this one's
	gone func()
}

// watch calls gone once c's caller closes its end (or the connection
// fails). unwatch must be called before c is closed. ok is false when c
// cannot be watched this way.
func (w *closeWatcher) watch(c net.Conn, gone func()) (unwatch func(), ok bool) {
	return w.register(c, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLONESHOT, gone)
}

// watchHangup is watch for a connection whose caller goes on sending
// requests (the lean path's, for its whole life): only its hanging up
// (RDHUP, HUP, ERR) is an event, the bytes it sends are not.
func (w *closeWatcher) watchHangup(c net.Conn, gone func()) (unwatch func(), ok bool) {
	return w.register(c, syscall.EPOLLRDHUP|syscall.EPOLLONESHOT, gone)
}

func (w *closeWatcher) register(c net.Conn, events uint32, gone func()) (unwatch func(), ok bool) {
	if pc, isPeer := c.(*peerConn); isPeer {
		c = pc.Conn
	}
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || !w.start() {
		return nil, false
	}
	w.seq++
	seq := w.seq
	var fd int32
	var cerr error
	err = raw.Control(func(f uintptr) {
		fd = int32(f)
		ev := syscall.EpollEvent{Events: events, Fd: fd, Pad: seq}
		cerr = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(f), &ev)
	})
	if err != nil || cerr != nil {
		return nil, false
	}
	w.m[fd] = watched{seq: seq, gone: gone}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if e, ok := w.m[fd]; ok && e.seq == seq && !w.stopped {
			delete(w.m, fd)
			_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
		}
	}, true
}

// available reports whether watch can watch connections (epoll works),
// starting the watcher if it has not started.
func (w *closeWatcher) available() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.stopped && w.start()
}

// start creates the epoll set and its goroutine once (w.mu held).
func (w *closeWatcher) start() bool {
	if w.started {
		return !w.failed
	}
	w.started = true
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		w.failed = true
		return false
	}
	if err := syscall.Pipe2(w.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		w.failed = true
		return false
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(w.wake[0]), Pad: -1}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, w.wake[0], &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(w.wake[0])
		syscall.Close(w.wake[1])
		w.failed = true
		return false
	}
	w.epfd, w.m, w.done = epfd, map[int32]watched{}, make(chan struct{})
	go w.loop()
	return true
}

func (w *closeWatcher) loop() {
	defer close(w.done)
	evs := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(w.epfd, evs, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		var gone []func()
		w.mu.Lock()
		for _, ev := range evs[:n] {
			if ev.Pad == -1 && ev.Fd == int32(w.wake[0]) {
				w.mu.Unlock()
				return
			}
			e, ok := w.m[ev.Fd]
			if !ok || e.seq != ev.Pad {
				continue
			}
			w.events.Add(1)
			if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				delete(w.m, ev.Fd) // one-shot: the registration is spent
				gone = append(gone, e.gone)
				continue
			}
			// Bytes after the request (pipelined): dropped with the
			// answer, which closes the connection; the caller may still
			// leave meanwhile: watch for that alone (the fd is still this
			// connection's: unwatch, under w.mu, comes before its close).
			rearm := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: ev.Fd, Pad: e.seq}
			if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_MOD, int(ev.Fd), &rearm) != nil {
				delete(w.m, ev.Fd)
			}
		}
		w.mu.Unlock()
		for _, f := range gone {
			f()
		}
	}
}

// stop ends the watcher's goroutine and closes its descriptors; watch
// answers false afterwards.
func (w *closeWatcher) stop() {
	w.mu.Lock()
	w.stopped = true
	running := w.started && !w.failed
	w.mu.Unlock()
	if !running {
		return
	}
	_, _ = syscall.Write(w.wake[1], []byte{0})
	<-w.done
	syscall.Close(w.epfd)
	syscall.Close(w.wake[0])
	syscall.Close(w.wake[1])
}
