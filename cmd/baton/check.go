package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/client"
)

func init() { commands = append(commands, newCheckCmd) }

func newCheckCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check [--json] OBJECT TOKEN",
		Short: "Check whether a fencing token is the object's current grant",
		Long: `check asks whether TOKEN is the object's current grant (GET
/v1/locks/OBJECT/check?token=TOKEN, Chubby's CheckSequencer), through any
sidecar: the sidecar reads the object's privateLock from ZooKeeper after a
sync, so a token made stale by a newer grant is reported stale as soon as
that grant has been made. It prints "current" or "stale" with the current
grant's token; the holder's own sidecar also prints the validity left of
what it told the holder (only it knows).

A script that writes on a lock holder's behalf runs it just before the
write; a storage that compares the token itself in the write (a fence
column and a conditional update) also closes the gap between the check and
the write.

Exit status: 0 current; 1 stale (another grant, or none); 64 usage error
(TOKEN not a positive whole number, bad object name); 69 sidecar or
ZooKeeper unavailable.`,
		Example: `  baton check article-42 "$BATON_FENCING_TOKEN" && write-article`,
		Args:    argsNamed("OBJECT", "TOKEN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || tok <= 0 || args[1][0] == '+' {
				return usageErrorf("TOKEN: %q is not a fencing token (a positive whole number, as in a lease's \"token\")", args[1])
			}
			return withClient(g, cmd, func(ctx context.Context, c *client.Client) error {
				v, err := c.Check(ctx, args[0], tok)
				if err != nil {
					return clientExit(c, err)
				}
				if asJSON {
					if err := writeJSON(g.stdout, v); err != nil {
						return err
					}
				} else {
					verdict := "current"
					if !v.Current {
						verdict = "stale"
					}
					line := fmt.Sprintf("%s: token %d of %s", verdict, tok, strconv.Quote(args[0]))
					switch {
					case v.Current && v.ValidForMS != nil:
						line += fmt.Sprintf(", valid for %d ms more (as told to the holder)", *v.ValidForMS)
					case !v.Current && v.Token != 0:
						line += fmt.Sprintf("; the current grant is token %d", v.Token)
					case !v.Current:
						line += "; the object is free"
					}
					fmt.Fprintln(g.stdout, line)
				}
				if !v.Current {
					return exitWith(exitFailure, nil)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")
	return cmd
}
