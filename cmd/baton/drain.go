package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/client"
)

func init() { commands = append(commands, newDrainCmd) }

// drainPoll is how often `baton drain` asks whether the sidecar still runs.
const drainPoll = 200 * time.Millisecond

func newDrainCmd(g *globals) *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Drain the sidecar: stop granting, let holders finish, then exit",
		Long: `drain starts the sidecar's drain, as SIGTERM does (POST /v1/drain): it stops
granting (503 ShuttingDown) and /readyz answers 503; leases are still
renewed, but never valid past the end of sidecar.shutdown.grace, and their
state is "draining" (baton lock and the Go client see it); when every holder
has released, or at the end of the grace, the sidecar exits — holders left
at that end are told their lock is lost and it is freed after the validity
told to them. Drained this way (not by a signal), baton serve exits with
status 3, which the shipped systemd unit restarts on: a drain restarts the
sidecar, it does not leave the node without one. Draining is an admin
action (sidecar.auth.admin.uids/.gids; root and the sidecar's own uid by
default): others get 403. Background deliveries in flight finish, or go back to the
queue without counting an attempt.

drain waits until the sidecar has stopped (its socket no longer answers),
printing how many leases are left, so that it can be a Kubernetes preStop
hook: the container is then stopped only once the drain is over. With
--no-wait it returns as soon as the drain has begun.

Exit status 0 when the drain has begun (and, without --no-wait, the sidecar
stopped); 69 when no sidecar answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(g)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
			d, err := c.Drain(ctx)
			cancel()
			if err != nil {
				return clientExit(c, err)
			}
			fmt.Fprintf(g.stdout, "draining: %d leases held; grace %v, ends at %s (in %v)\n", d.Leases,
				time.Duration(d.GraceMS)*time.Millisecond, d.EndsAt.UTC().Format(time.RFC3339), time.Duration(d.EndsInMS)*time.Millisecond)
			if noWait {
				return nil
			}
			return waitStopped(cmd.Context(), g, c, d.Leases)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the drain has begun, without waiting for the sidecar to stop")
	return cmd
}

// waitStopped polls the sidecar until it stops answering, printing the
// number of leases whenever it changes.
func waitStopped(ctx context.Context, g *globals, c *client.Client, leases int) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, clientTimeout)
		h, err := c.Health(hctx)
		cancel()
		if err != nil {
			if _, ok := errors.AsType[*client.APIError](err); ok || ctx.Err() != nil {
				continue // it answered (an error); keep waiting
			}
			fmt.Fprintln(g.stdout, "sidecar stopped")
			return nil
		}
		if h.Leases != leases {
			leases = h.Leases
			fmt.Fprintf(g.stdout, "draining: %d leases held\n", leases)
		}
	}
}
