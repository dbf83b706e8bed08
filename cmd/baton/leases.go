package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

func init() { commands = append(commands, newLeasesCmd, newReleaseCmd) }

func newLeasesCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "List your leases on this sidecar (an admin: every lease)",
		Long: `leases lists the leases this sidecar holds for your uid (GET /v1/leases): the
leases acquired by processes running as you, oldest first, with their id,
object, token, state and validity. An admin (sidecar.auth.admin.uids/.gids,
root, the sidecar's own uid) sees every lease, with the uid that owns it.
A holder that lost its lease_id can find it here and release it with
'baton release LEASE_ID'. Op deliveries' leases are not listed.

Exit status 0; 69 when the sidecar is unavailable; 1 when refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			send := func(ctx context.Context, c *client.Client) (*api.LeaseList, error) { return c.Leases(ctx) }
			return request(g, cmd, asJSON, send, printLeases)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")
	return cmd
}

func printLeases(w io.Writer, ll *api.LeaseList) error {
	if len(ll.Leases) == 0 {
		_, err := fmt.Fprintln(w, "no leases")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "LEASE\tOBJECT\tUID\tTOKEN\tSTATE\tVALID_FOR\tHOLDS\tACQUIRED\tINFO")
	for _, l := range ll.Leases {
		uid := "-"
		if l.UID != nil {
			uid = strconv.FormatUint(uint64(*l.UID), 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%dms\t%d\t%s\t%s\n", l.LeaseID, strconv.Quote(l.Object), uid, l.Token, l.State,
			l.ValidForMS, l.Holds, since(l.AcquiredAt), strconv.Quote(l.Info))
	}
	return tw.Flush()
}

func newReleaseCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "release LEASE_ID",
		Short: "Release a lease by id (see 'baton leases')",
		Long: `release releases the lease LEASE_ID (DELETE /v1/leases/LEASE_ID): the lock is
freed, or, for a lease re-entered by several holders, one hold is counted
down. Only the uid that acquired the lease, or an admin, may release it.

Exit status 0; 1 when the lease is unknown, lost or not yours; 69 when the
sidecar is unavailable; 64 without LEASE_ID.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("missing LEASE_ID: baton release LEASE_ID (baton leases lists yours)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(g, cmd, func(ctx context.Context, c *client.Client) error {
				res, err := c.ReleaseLease(ctx, args[0])
				if err != nil {
					return clientExit(c, err)
				}
				if res.Released {
					fmt.Fprintf(g.stdout, "released %s (token %d)\n", strconv.Quote(res.Object), res.Token)
				} else {
					fmt.Fprintf(g.stdout, "one hold of %s released; %d left (token %d)\n", strconv.Quote(res.Object), res.Holds, res.Token)
				}
				return nil
			})
		},
	}
	return cmd
}
