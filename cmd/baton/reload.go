package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

func init() { commands = append(commands, newReloadCmd) }

func newReloadCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Make the running sidecar re-read its configuration (SIGHUP)",
		Long: `reload sends SIGHUP to the sidecar answering on the socket. It finds the
sidecar's pid from the socket connection itself (SO_PEERCRED) and checks over
that connection that a Baton sidecar answers (GET /healthz) before signalling.

The sidecar then re-reads its configuration as at start (same file, BATON_
variables and --set values): live keys apply at once, next keys to later
waits and ops, restart keys are kept until restart; an invalid file changes
nothing. reload waits for the outcome (GET /healthz) and prints it: the keys
applied, the keys kept until a restart, or why the reload was rejected.

Exit status 0 when the reload was applied, 1 when it was rejected (or the
sidecar's pid cannot be found or signalled, or no outcome came within 10 s),
69 when no sidecar answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := g.loadProps()
			if err != nil {
				return configError(g, err)
			}
			for _, w := range l.Warnings {
				fmt.Fprintf(g.stderr, "baton: warning: %s\n", w)
			}
			sock := l.Config.SocketPath
			ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
			defer cancel()
			pid, h, err := findSidecar(ctx, sock)
			if err != nil {
				return err
			}
			var before int64
			if h.Reload != nil {
				before = h.Reload.Generation
			}
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				return fmt.Errorf("sending SIGHUP to the sidecar (pid %d): %w", pid, err)
			}
			fmt.Fprintf(g.stdout, "reload signal (SIGHUP) sent to the sidecar at %s: pid %d, node %s, incarnation %s\n",
				sock, pid, h.Sidecar, h.Incarnation)
			info, err := awaitReload(cmd.Context(), sock, before)
			if err != nil {
				return err
			}
			if info.Error != "" {
				return fmt.Errorf("reload rejected, nothing changed: %s", info.Error)
			}
			_, err = fmt.Fprintf(g.stdout, "reload %d applied: changed %s; kept until restart %s\n",
				info.Generation, orNone(info.Applied), orNone(info.KeptUntilRestart))
			return err
		},
	}
}

// findSidecar connects to the socket, reads the pid of the process serving
// it (SO_PEERCRED of the connection) and asks /healthz over the same
// connection, so the pid is that of the Baton sidecar that answered.
func findSidecar(ctx context.Context, sock string) (int, *api.Health, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return 0, nil, exitWith(exitUnavailable, fmt.Errorf("no sidecar answers at %s: %w (%s)", sock, err, socketHint))
	}
	pid, err := socketPeerPID(conn)
	if err != nil {
		conn.Close()
		return 0, nil, fmt.Errorf("finding the pid of the sidecar at %s: %w", sock, err)
	}
	if pid <= 0 {
		conn.Close()
		return 0, nil, fmt.Errorf("the pid of the process serving %s is not visible (another pid namespace?); send it SIGHUP yourself", sock)
	}
	var used atomic.Bool
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used.Swap(true) {
				return nil, errors.New("connection already used")
			}
			return conn, nil
		},
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://baton/healthz", nil)
	if err != nil {
		conn.Close()
		return 0, nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		conn.Close() // closed already if the transport took it: no harm
		return 0, nil, exitWith(exitUnavailable, fmt.Errorf("sidecar at %s (pid %d) did not answer: %w", sock, pid, err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var h api.Health
	if err == nil && resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(b, &h)
	}
	if err != nil || resp.StatusCode != http.StatusOK || h.Incarnation == "" {
		return 0, nil, fmt.Errorf("the process serving %s (pid %d) does not answer like a Baton sidecar (status %d: %.100q); not signalling it",
			sock, pid, resp.StatusCode, b)
	}
	return pid, &h, nil
}

// awaitReload polls /healthz until a reload newer than generation before
// is reported, for at most 10 s.
func awaitReload(ctx context.Context, sock string, before int64) (*api.ReloadInfo, error) {
	c := client.New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		h, err := c.Health(ctx)
		if err == nil && h.Reload != nil && h.Reload.Generation > before {
			return h.Reload, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no reload outcome from the sidecar within 10 s (see its log)")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func orNone(keys []string) string {
	if len(keys) == 0 {
		return "(none)"
	}
	return strings.Join(keys, ", ")
}
