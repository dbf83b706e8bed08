// Package sidecar is Baton's daemon: the HTTP API of api/openapi.json over a unix
// socket, the leases it hands out for lock grants, and the lock engine
// (package lock) that grants them.
//
// # Use
//
//	loaded, err := props.Load(props.LoadOptions{File: *config, Env: os.Environ()})
//	srv, err := sidecar.New(loaded.Config, sidecar.Options{Logger: logger, LogLevel: level})
//	// optional: srv.Mount(d), d an ops.Dispatcher on srv.Engine() (background locks)
//	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
//	err = srv.Run(ctx) // nil after a clean shutdown
//	// on SIGHUP: next, changes, err := props.Reload(loaded, opts); srv.Reload(next, changes)
//
// # Leases and validity
//
// A lease names one grant. Its id is "<incarnation>.<128 random bits>" (hex):
// unguessable, and an id of an earlier run of the sidecar is recognised and
// answered 410 "sidecar restarted". A lease acquired with "bind":"process"
// records the caller's pid (SO_PEERCRED) and is released as soon as that
// process exits: the exit is
// seen through a pidfd (pidfd_open, Linux ≥ 5.3) registered with Go's
// network poller, or, where pidfd is not available, by polling /proc/<pid>
// every 200 ms. Callers whose pid is not visible (another pid namespace),
// callers inside the sidecar's own process and leases acquired without
// "bind" rely on the lease alone (released, expired or lost).
//
// valid_until = min(lease_expires_at, the engine's session deadline), and
// valid_for_ms is the time left until it on the monotonic clock; while the
// session is disconnected (state "suspect") it shrinks and no renewal
// extends it. The server remembers the latest valid_until it told each
// holder and never frees the lock before it, except on the holder's own
// release or its process's exit: a renewal never moves lease_expires_at
// before it, and shutdown waits for it. A lease not renewed by
// lease_expires_at is released; a lost lease answers 410 for 15 minutes.
//
// # Releases that answer first
//
// DELETE /v1/leases/{id}?wait=false (an explicit mode) answers 202
// {"released":false,"releasing":true} once the lease has ended, before the
// release's ZooKeeper write lands (leaseTable.release). The lock stays held
// in ZooKeeper until then, so nobody is granted before it; an acquire of
// the same object on this sidecar waits for the write (freeingOf) and is
// then granted as after a waited release.
//
// # Long-polls
//
// GET /v1/leases/{id}?wait=lost&timeout_ms=N returns when the lease is lost
// or released, or its state changes from the one it had when the poll
// began (held → suspect, suspect → held, held → draining), or after N ms
// (default 30 s): a poll started while held returns as soon as the lease is
// no longer held.
//
// # Drain
//
// SIGTERM (Run's ctx ending, Shutdown) and POST /v1/drain (Drain) start a
// drain: no more grants (503 ShuttingDown), /readyz 503, leases renewed but
// never valid past the end of sidecar.shutdown.grace (state "draining",
// drain_ends_at); at that end the leases left are told lost (reason
// "shutdown") and freed after the valid_until told to them. See Shutdown.
//
// # Connections
//
// Every connection starts on the lean path (lean.go): acquire, renew and
// release, when the request is plain HTTP/1.1, are read and answered on
// the connection's goroutine through the same router and handlers as
// net/http's, and the caller's hanging up cancels the request through the
// close watcher (detach_linux.go). The first request of a connection that
// is anything else hands the connection to net/http, bytes unread
// (peerConn.pre), for the rest of its life. Options.LeanPathOff sends
// every connection to net/http.
//
// # What is not guaranteed
//
// A holder can pause past its validity without noticing; storage must check
// the fencing token. Close (unlike Shutdown) frees locks at once.
package sidecar
