package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/ops"
	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/sidecar"
)

func init() { commands = append(commands, newServeCmd) }

func newServeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the sidecar daemon",
		Long: `serve runs the sidecar: the HTTP API on the unix socket sidecar.socket.path,
the lock engine on ZooKeeper and, when sidecar.app.url is set, the background
operations (durable queue in queue.dir, deliveries, dead letters).

Logs go to stderr (log.level, log.format). Signals:
  SIGHUP           re-read the configuration: live keys apply at once, next
                   keys to later waits and ops, restart keys are logged and
                   kept until restart; an invalid file changes nothing.
  SIGTERM, SIGINT  drain (as 'baton drain' does): stop granting (503
                   ShuttingDown), /readyz 503; keep renewing leases, but
                   never valid past the end of sidecar.shutdown.grace (lease
                   state "draining"); wait for the holders to release. At
                   the end of the grace the holders left are told their lock
                   is lost (410 reason "shutdown") and each lock is freed
                   after the validity told to its holder. Deliveries in
                   flight finish, or go back to the queue without counting
                   an attempt. Then exit 0. A second signal releases every
                   lease at once.

Exit status 0 after a shutdown, 3 after a drain requested through the API
(POST /v1/drain, 'baton drain') and no signal: the shipped systemd unit
restarts on it (RestartForceExitStatus=3), so a drain restarts the sidecar
rather than leaving the node without one; 1 when the sidecar cannot start (invalid
configuration, socket in use by a running sidecar, queue.dir locked by
another sidecar).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := g.loadOptions()
			loaded, err := props.Load(opts)
			if err != nil {
				return configError(g, err)
			}
			setServeRuntime(os.Getenv)
			return serveLoaded(cmd.Context(), g, loaded, opts, nil)
		},
	}
}

// configError prints every configuration error on stderr and returns the
// exit-1 error of an invalid configuration.
func configError(g *globals, err error) error {
	if fe, ok := unreadableConfig(err); ok {
		return exitWith(exitFailure, fe)
	}
	n := 1
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		n = len(j.Unwrap())
	}
	fmt.Fprintln(g.stderr, err)
	noun := "error"
	if n > 1 {
		noun = "errors"
	}
	return exitWith(exitFailure, fmt.Errorf("invalid configuration: %d %s", n, noun))
}

// serveLoaded runs the sidecar with an already loaded configuration until
// ctx ends or SIGTERM/SIGINT arrives, and shuts it down (the drain: README, `POST /v1/drain` in api/openapi.json).
// opts are the options loaded was read with; SIGHUP reloads with them.
// onReady, if set, is called once (from another goroutine) when the sidecar
// answers /readyz with 200. It is what `baton serve` and `baton dev` run.
func serveLoaded(ctx context.Context, g *globals, loaded *props.Loaded, opts props.LoadOptions, onReady func(socket string)) error {
	// Signals are caught from the start: one during start-up is handled
	// once the sidecar runs.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigc)
	cfg := loaded.Config
	logs := newLogSetup(g.stderr, cfg.LogLevel, cfg.LogFormat)
	log := logs.logger
	for _, w := range loaded.Warnings {
		log.Warn("configuration warning", "warning", w.String())
	}
	for _, c := range props.Cautions(cfg) {
		log.Warn("insecure setting", "key", c.Key, "warning", c.Msg)
	}
	ver, rev := buildVersion()
	log.Info("baton serve starting", "version", ver, "commit", rev, "pid", os.Getpid(), "config_file", loaded.File,
		"gomaxprocs", runtime.GOMAXPROCS(0), "gomemlimit", debug.SetMemoryLimit(-1),
		"socket", cfg.SocketPath, "zookeeper", strings.Join(cfg.ZKServers, ",")+cfg.ZKChroot)
	warnMemLimit(log, cfg.MaxWaiters)

	// BATON_LEAN_PATH=off: every request through net/http (a diagnostic
	// switch, for comparison: sidecar/lean.go)
	leanOff := os.Getenv("BATON_LEAN_PATH") == "off"
	if leanOff {
		log.Info("BATON_LEAN_PATH=off: every request is served by net/http")
	}
	srv, err := sidecar.New(cfg, sidecar.Options{Logger: log, LogLevel: logs.level, LeanPathOff: leanOff})
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("cannot start the sidecar: %w", err))
	}
	d, err := wireOps(cfg, srv, log)
	if err != nil {
		_ = srv.Close()
		return exitWith(exitFailure, fmt.Errorf("cannot start background operations: %w", err))
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.Run(runCtx) })

	var signalled atomic.Bool // SIGTERM/SIGINT: the owner stops the sidecar (exit 0)
	served := make(chan struct{})
	r := &reloader{cur: loaded, opts: opts, srv: srv, ops: d, logs: logs}
	wg.Go(func() {
		stops := 0 // SIGTERM/SIGINT received
		for {
			select {
			case <-served:
				return
			case sig := <-sigc:
				switch {
				case sig == syscall.SIGHUP:
					r.reload(log)
				case stops == 0:
					stops++
					signalled.Store(true)
					log.Info("shutting down", "signal", sig.String())
					cancel()
				default:
					log.Warn("second signal: releasing every lease now, without waiting for holders", "signal", sig.String())
					wg.Go(func() { _ = srv.Close() })
				}
			}
		}
	})
	if onReady != nil {
		wg.Go(func() {
			if waitReady(runCtx, cfg.SocketPath) {
				onReady(cfg.SocketPath)
			}
		})
	}

	runErr := srv.Run(runCtx)
	close(served)
	cancel()
	wg.Wait()
	if err := d.Close(); err != nil {
		log.Warn("closing background operations", "error", err)
	}
	if runErr != nil {
		return exitWith(exitFailure, runErr)
	}
	if srv.DrainRequested() && !signalled.Load() {
		// Asked to stop through the API (POST /v1/drain, `baton drain`),
		// not by its owner: exit 3, which the shipped systemd unit restarts
		// on (RestartForceExitStatus=3), so an app that may drain cannot
		// leave its node without a sidecar until someone notices.
		log.Info("baton serve stopped: drained through the API; exit status 3 (the systemd unit restarts the sidecar)")
		return exitWith(exitDrained, nil)
	}
	log.Info("baton serve stopped")
	return nil
}

// wireOps builds the background-operations dispatcher on the sidecar's
// engine and mounts it: its /v1/ops endpoints (ops disabled: none, the
// sidecar answers 503 OpsDisabled), its readiness, queue summary and drain.
// The dispatcher opens queue.dir, whose file lock keeps a second sidecar off
// the same directory.
func wireOps(cfg props.Config, srv *sidecar.Server, log *slog.Logger) (*ops.Dispatcher, error) {
	d, err := ops.New(cfg, ops.Deps{Engine: srv.Engine(), Registry: srv.Registry(), Logger: log, Hold: srv.HoldDelivery})
	if err != nil {
		return nil, err
	}
	if err := srv.Mount(d); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// waitReady polls /readyz until it answers 200 (true) or ctx ends (false).
func waitReady(ctx context.Context, socket string) bool {
	c := client.New(socket)
	defer c.Close()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ready(rctx)
		cancel()
		if err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// reloader applies SIGHUP reloads. It is used from one goroutine.
type reloader struct {
	cur  *props.Loaded
	opts props.LoadOptions
	srv  *sidecar.Server
	ops  *ops.Dispatcher
	logs *logSetup
}

// reload re-reads the configuration with the options of the start. An
// invalid configuration is logged and changes nothing; otherwise the
// dispatcher (which may still refuse, changing nothing) and then the
// server apply it, and the applied and kept (restart) keys are logged.
func (r *reloader) reload(log *slog.Logger) {
	log.Info("SIGHUP: reloading the configuration", "config_file", r.cur.File)
	next, changes, err := props.Reload(r.cur, r.opts)
	if err != nil {
		log.Error("reload rejected: nothing changed", "error", oneLine(err))
		r.srv.RecordReload(nil, nil, errors.New(oneLine(err)))
		return
	}
	for _, w := range next.Warnings {
		log.Warn("configuration warning", "warning", w.String())
	}
	if err := r.ops.Reload(next.Config); err != nil {
		log.Error("reload rejected by background operations: nothing changed", "error", err)
		r.srv.RecordReload(nil, nil, err)
		return
	}
	r.logs.setFormat(next.Config.LogFormat)
	if next.Config.MaxWaiters != r.cur.Config.MaxWaiters {
		warnMemLimit(log, next.Config.MaxWaiters)
	}
	kept := r.srv.Reload(next, changes) // logs every change
	r.cur = next
	var applied, restart []string
	for _, c := range changes {
		if c.Applied {
			applied = append(applied, c.Key)
		}
	}
	for _, c := range kept {
		restart = append(restart, c.Key)
	}
	log.Info("configuration reloaded", "applied", strings.Join(applied, ","), "kept_until_restart", strings.Join(restart, ","))
	r.srv.RecordReload(applied, restart, nil)
}

// oneLine joins the lines of a (joined) error with "; ".
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// logSetup is the daemon's logger: text or JSON on one writer, with a
// level and a format a reload changes live.
type logSetup struct {
	level  *slog.LevelVar
	json   *atomic.Bool
	logger *slog.Logger
}

func newLogSetup(w io.Writer, level slog.Level, format string) *logSetup {
	ls := &logSetup{level: new(slog.LevelVar), json: new(atomic.Bool)}
	ls.level.Set(level)
	ls.setFormat(format)
	lw := &lockedWriter{w: w}
	ho := &slog.HandlerOptions{Level: ls.level}
	ls.logger = slog.New(&dedupHandler{next: &switchHandler{json: ls.json, text: slog.NewTextHandler(lw, ho), js: slog.NewJSONHandler(lw, ho)}})
	return ls
}

// dedupHandler writes each attribute key once per record: a key given
// again (a library's logger adds "component" to a logger that has one)
// keeps its last value. It holds the attributes added with WithAttrs until
// a record or a group, so that the record's own can replace them.
type dedupHandler struct {
	next  slog.Handler
	attrs []slog.Attr // top-level attributes not yet passed to next
}

func (h *dedupHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *dedupHandler) Handle(ctx context.Context, r slog.Record) error {
	all := make([]slog.Attr, 0, len(h.attrs)+r.NumAttrs())
	all = append(all, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		all = append(all, a)
		return true
	})
	last := make(map[string]int, len(all))
	for i, a := range all {
		last[a.Key] = i
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	for i, a := range all {
		if last[a.Key] == i {
			out.AddAttrs(a)
		}
	}
	return h.next.Handle(ctx, out)
}

func (h *dedupHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &dedupHandler{next: h.next, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *dedupHandler) WithGroup(name string) slog.Handler {
	next := h.next
	if len(h.attrs) > 0 {
		next = next.WithAttrs(h.attrs)
	}
	return &dedupHandler{next: next.WithGroup(name)}
}

// setFormat switches between "text" and "json" (anything else is text).
func (ls *logSetup) setFormat(format string) { ls.json.Store(format == "json") }

// switchHandler sends each record to its text or its JSON handler, as the
// shared switch says at the time of the record.
type switchHandler struct {
	json     *atomic.Bool
	text, js slog.Handler
}

func (h *switchHandler) cur() slog.Handler {
	if h.json.Load() {
		return h.js
	}
	return h.text
}

func (h *switchHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.cur().Enabled(ctx, l)
}

func (h *switchHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.cur().Handle(ctx, r)
}

func (h *switchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &switchHandler{json: h.json, text: h.text.WithAttrs(as), js: h.js.WithAttrs(as)}
}

func (h *switchHandler) WithGroup(name string) slog.Handler {
	return &switchHandler{json: h.json, text: h.text.WithGroup(name), js: h.js.WithGroup(name)}
}

// lockedWriter serializes writes of the two handlers (each has its own mutex).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
