package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

func init() { commands = append(commands, newRevokeCmd) }

func newRevokeCmd(g *globals) *cobra.Command {
	var reason, token string
	cmd := &cobra.Command{
		Use:   "revoke [--reason TEXT] [--token N] OBJECT",
		Short: "Revoke the holder of an object's lock (operator), safely",
		Long: `revoke frees the lock of a stuck holder without deleting anything under a
holder that may still believe it holds (POST /v1/locks/{object}/revoke). It
works through any sidecar: the revocation is written into the holder's
privateLock in ZooKeeper, and the holder's sidecar, which watches it,
  - refuses the holder's renewals (410 LockLost, reason "revoked: TEXT"),
  - tells the holder at once (lease state "lost": long-polls return, the Go
    client's Lost() fires, baton lock sends the command SIGTERM),
  - frees the lock only after the last valid_until it told the holder.
Both sidecars write an audit line (object, token, holder, reason, and the
caller's uid and pid as the socket shows them), and count it in
baton_revocations_total.

A holder that is not a Baton grant (the original plugin's nodes) cannot be
revoked safely: 409, nothing is written. A holder whose sidecar is gone is
freed by its ZooKeeper session's expiry, as without revoke. With --token,
only the grant with that fencing token is revoked (not a later one).

Exit status: 0 revocation delivered; 1 no holder, or not revocable; 64
usage error; 69 sidecar or ZooKeeper unavailable.`,
		Example: `  baton revoke --reason "reindex hung since 02:00, ticket OPS-42" article-42`,
		Args:    argsNamed("OBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tok int64
			if token != "" {
				v, err := strconv.ParseInt(token, 10, 64)
				if err != nil || v <= 0 {
					return usageErrorf("--token: %q is not a fencing token (a positive whole number)", token)
				}
				tok = v
			}
			return withClient(g, cmd, func(ctx context.Context, c *client.Client) error {
				v, err := c.Revoke(ctx, args[0], reason, tok)
				if err != nil {
					return clientExit(c, err)
				}
				printRevoked(g, v)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the holder, the logs and the audit line (at most 1 KiB)")
	cmd.Flags().StringVar(&token, "token", "", "revoke only the grant with this fencing token")
	return cmd
}

// printRevoked prints what became of a revocation.
func printRevoked(g *globals, v *api.RevokeResponse) {
	holder := "?"
	if v.Holder != nil {
		holder = fmt.Sprintf("node %s on sidecar %s", printable(v.Holder.Node), printable(v.Holder.Sidecar))
		if v.Holder.Info != "" {
			holder += fmt.Sprintf(" (%s)", printable(v.Holder.Info))
		}
	}
	fmt.Fprintf(g.stdout, "revoked %q (token %d, %s): %s\n", v.Object, v.Token, holder, printable(v.Reason))
	if v.Orphan {
		fmt.Fprintf(g.stdout, "it was an orphan privateLock (no grant behind it, of session %s): deleted now, the lock is free\n", v.Holder.Session)
	} else if v.Local && v.FreedAfter != nil {
		fmt.Fprintf(g.stdout, "the holder was told; the lock is freed at %s (in %v), after the validity told to it\n",
			v.FreedAfter.UTC().Format(time.RFC3339Nano), max(0, time.Until(v.FreedAfter.Time)).Round(time.Millisecond))
	} else {
		fmt.Fprintln(g.stdout, "the holder's sidecar learns it through ZooKeeper, tells the holder and frees the lock after the validity told to it")
	}
}
