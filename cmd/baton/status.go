package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// clientTimeout bounds one request of the client commands (status, locks, reload).
const clientTimeout = 10 * time.Second

func init() { commands = append(commands, newStatusCmd) }

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the sidecar's health and readiness",
		Long: `status asks the sidecar (GET /healthz) for its state: ready or not and why,
the ZooKeeper servers and session (connected or for how long not, id,
negotiated timeout, the last connection error while connecting fails), the
locks held, the waiting acquires, the node deletions pending after a
disconnection, the leases held through it, the last configuration
reload (keys applied, restart keys kept until a restart, or why it was
rejected), and with background ops enabled the queue: ops queued, waiting
for the dead-letter topic and dead-lettered (kept ones among them), the
payload bytes against queue.max.bytes, the oldest unfinished op.

Exit status 0 when the sidecar is ready, 69 when it is not ready or cannot
be reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(g, cmd, func(ctx context.Context, c *client.Client) error {
				h, err := c.Health(ctx)
				if err != nil {
					return clientExit(c, err)
				}
				if asJSON {
					if err := writeJSON(g.stdout, h); err != nil {
						return err
					}
				} else if err := printHealth(g.stdout, c.Socket, h); err != nil {
					return err
				}
				if !h.Ready {
					return exitWith(exitUnavailable, fmt.Errorf("sidecar not ready: %s", h.Reason))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the /healthz answer as JSON")
	return cmd
}

// newClient returns a client of the socket the configuration names.
func newClient(g *globals) (*client.Client, error) {
	l, err := g.loadProps()
	if err != nil {
		return nil, configError(g, err)
	}
	for _, w := range l.Warnings {
		fmt.Fprintf(g.stderr, "baton: warning: %s\n", w)
	}
	return client.New(l.Config.SocketPath), nil
}

// withClient runs f with a client of the configured sidecar and a
// request deadline of clientTimeout.
func withClient(g *globals, cmd *cobra.Command, f func(ctx context.Context, c *client.Client) error) error {
	c, err := newClient(g)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
	defer cancel()
	return f(ctx, c)
}

// clientExit maps a request error of the client commands to an exit status:
// 69 unreachable, 503 or 429, 64 a request the sidecar rejected as bad, 77
// one refused for this uid (403), 1 else.
func clientExit(c *client.Client, err error) error {
	if msg, ok := sidecarUnreachable(err); ok {
		return exitWith(exitUnavailable, msg)
	}
	switch {
	case errors.Is(err, client.ErrUnavailable):
		if _, ok := errors.AsType[*client.APIError](err); ok {
			return exitWith(exitUnavailable, unprefixed(err))
		}
		return exitWith(exitUnavailable, fmt.Errorf("sidecar at %s unreachable: %w", c.Socket, err))
	case errors.Is(err, context.DeadlineExceeded):
		return exitWith(exitUnavailable, fmt.Errorf("sidecar at %s did not answer within %v: %w", c.Socket, clientTimeout, err))
	}
	if ae, ok := errors.AsType[*client.APIError](err); ok {
		switch ae.Status {
		case http.StatusBadRequest:
			return exitWith(exitUsage, unprefixed(err))
		case http.StatusForbidden: // not allowed for this uid (sidecar.auth.*)
			return exitWith(exitNoPerm, unprefixed(err))
		case http.StatusTooManyRequests: // a per-uid cap: retry later
			return exitWith(exitUnavailable, unprefixed(err))
		}
	}
	return exitWith(exitFailure, unprefixed(err))
}

// unprefixed drops the "baton: " the client's API errors start with, since
// run prints "baton: " itself; errors.Is and errors.As still see err.
func unprefixed(err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), "baton: "); ok {
		return &trimmedError{msg: msg, err: err}
	}
	return err
}

type trimmedError struct {
	msg string
	err error
}

func (e *trimmedError) Error() string { return e.msg }
func (e *trimmedError) Unwrap() error { return e.err }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns the writer of the commands' aligned text tables.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// request is the body of a client command that sends one request and
// prints its answer: a request error as clientExit maps it, else the answer
// as the API's JSON (asJSON, --json) or as text writes it.
func request[T any](g *globals, cmd *cobra.Command, asJSON bool,
	send func(ctx context.Context, c *client.Client) (T, error), text func(w io.Writer, v T) error) error {
	return withClient(g, cmd, func(ctx context.Context, c *client.Client) error {
		v, err := send(ctx, c)
		if err != nil {
			return clientExit(c, err)
		}
		if asJSON {
			return writeJSON(g.stdout, v)
		}
		return text(g.stdout, v)
	})
}

func printHealth(w io.Writer, socket string, h *api.Health) error {
	tw := newTable(w)
	ready := "yes"
	if !h.Ready {
		ready = "no: " + h.Reason
	}
	zk := h.ZooKeeper
	servers := "servers " + strings.Join(zk.Servers, ",")
	if len(zk.Servers) == 0 {
		servers = "servers unknown" // a sidecar older than this command
	}
	conn := "connected (" + servers + ")"
	if !zk.Connected {
		conn = fmt.Sprintf("disconnected for %v (%s)", time.Duration(zk.DisconnectedForMS)*time.Millisecond, servers)
	}
	session := "none yet"
	if zk.Session != "" {
		session = zk.Session
		if zk.TimeoutMS > 0 {
			session += fmt.Sprintf(", negotiated timeout %v", time.Duration(zk.TimeoutMS)*time.Millisecond)
		}
		if !zk.Connected {
			session += " (not connected: held locks are suspect until it reconnects or expires)"
		}
	}
	fmt.Fprintf(tw, "socket\t%s\n", socket)
	fmt.Fprintf(tw, "sidecar\t%s (incarnation %s, pid %d)\n", h.Sidecar, h.Incarnation, h.PID)
	fmt.Fprintf(tw, "status\t%s\n", h.Status)
	fmt.Fprintf(tw, "ready\t%s\n", ready)
	fmt.Fprintf(tw, "zookeeper\t%s\n", conn)
	fmt.Fprintf(tw, "session\t%s\n", session)
	if h.LockProtocol != "" { // a sidecar older than the native protocol leaves it out
		fmt.Fprintf(tw, "lock protocol\t%s\n", printable(h.LockProtocol))
	}
	if zk.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", zk.LastError)
	}
	fmt.Fprintf(tw, "locks held\t%d\n", zk.LocksHeld)
	fmt.Fprintf(tw, "waiters\t%d\n", zk.Waiting)
	if zk.Parked > 0 {
		fmt.Fprintf(tw, "  parked\t%d (behind a holder of this sidecar; not in ZooKeeper yet)\n", zk.Parked)
	}
	fmt.Fprintf(tw, "cleanup pending\t%d\n", zk.CleanupPending)
	fmt.Fprintf(tw, "leases\t%d\n", h.Leases)
	fmt.Fprintf(tw, "last reload\t%s\n", reloadText(h.Reload))
	if q := h.Queue; q != nil {
		oldest := "none"
		if !q.OldestUnfinishedAt.IsZero() {
			oldest = "accepted " + since(q.OldestUnfinishedAt) + " (the oldest unfinished op)"
		}
		fmt.Fprintf(tw, "queue\t%d queued, %d dead-letter pending, %d dead-lettered (%d kept until replayed or discarded)\n",
			q.Queued, q.DLQPending, q.DeadLettered, q.Kept)
		fmt.Fprintf(tw, "queue payload\t%d of %d bytes (queue.max.bytes)\n", q.PayloadBytes, q.MaxBytes)
		fmt.Fprintf(tw, "queue oldest\t%s\n", oldest)
	}
	return tw.Flush()
}

// reloadText describes the last reload: the keys applied, the restart
// keys kept until a restart, or why it was rejected.
func reloadText(r *api.ReloadInfo) string {
	if r == nil {
		return "none since the sidecar started"
	}
	at := r.At.UTC().Format(time.RFC3339)
	if r.Error != "" {
		s := fmt.Sprintf("#%d at %s rejected, nothing changed: %s", r.Generation, at, r.Error)
		if len(r.KeptUntilRestart) > 0 {
			s += "; still kept until restart: " + strings.Join(r.KeptUntilRestart, ", ")
		}
		return s
	}
	return fmt.Sprintf("#%d at %s applied: %s; kept until restart: %s", r.Generation, at, orNone(r.Applied), orNone(r.KeptUntilRestart))
}
