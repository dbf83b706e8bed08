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

func init() { commands = append(commands, newLocksCmd) }

func newLocksCmd(g *globals) *cobra.Command {
	var (
		asJSON bool
		prefix string
	)
	cmd := &cobra.Command{
		Use:   "locks [OBJECT]",
		Short: "List locked objects, or show one object's holder and waiters",
		Long: `locks lists the objects of the lock root, cluster-wide, with their holder and
number of waiters (GET /v1/locks, every page). With OBJECT it shows that
object's holder and its waiters in grant order (GET /v1/locks/OBJECT), each
with its mode (exclusive or shared); several holders are shared holders, one
"holder" line each.
Nodes Baton did not create (the original plugin's) show an empty type and
sidecar.

Exit status 0; 69 when the sidecar or ZooKeeper is unavailable; 64 for a bad
object name.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if cmd.Flags().Changed("prefix") {
					return usageErrorf("--prefix lists objects; it cannot be used with OBJECT")
				}
				inspect := func(ctx context.Context, c *client.Client) (*api.LockStatus, error) { return c.Inspect(ctx, args[0]) }
				return request(g, cmd, asJSON, inspect, printLock)
			}
			listAll := func(ctx context.Context, c *client.Client) (api.LockList, error) {
				all := api.LockList{Locks: []api.LockSummary{}}
				after := ""
				for {
					page, err := c.List(ctx, client.ListOptions{Prefix: prefix, After: after, Limit: 1000})
					if err != nil {
						return all, err
					}
					all.Locks = append(all.Locks, page.Locks...)
					if page.Next == "" || page.Next == after {
						return all, nil
					}
					after = page.Next
				}
			}
			return request(g, cmd, asJSON, listAll, printLocks)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON (all pages in one list)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "only objects whose name starts with `P`")
	return cmd
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// modeOf is a holder's or waiter's mode as printed: exclusive when the
// sidecar gave none (one older than shared locks).
func modeOf(m string) string {
	if m == "" {
		return api.ModeExclusive
	}
	return printable(m)
}

func since(t api.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(api.TimeFormat)
}

func printLocks(w io.Writer, ll api.LockList) error {
	locks := ll.Locks
	if len(locks) == 0 {
		_, err := fmt.Fprintln(w, "no locks")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "OBJECT\tHOLDER\tTYPE\tMODE\tSIDECAR\tTOKEN\tSINCE\tWAITERS\tINFO")
	for _, l := range locks {
		if h := l.Holder; h != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", printable(l.Object), printable(h.Node), orDash(printable(h.Type)),
				modeOf(h.Mode), orDash(printable(h.Sidecar)), h.Token, since(h.Since), l.Waiters, strconv.Quote(h.Info))
		} else {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%d\t\n", printable(l.Object), l.Waiters)
		}
	}
	return tw.Flush()
}

func printLock(w io.Writer, st *api.LockStatus) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "object\t%s\n", printable(st.Object))
	holders := st.Holders
	if len(holders) == 0 && st.Holder != nil { // a sidecar older than shared locks
		holders = []api.Holder{*st.Holder}
	}
	for _, h := range holders { // several: shared holders, in grant order
		fmt.Fprintf(tw, "holder\t%s  type %s  mode %s  sidecar %s  token %d  since %s  info %s\n",
			printable(h.Node), orDash(printable(h.Type)), modeOf(h.Mode), orDash(printable(h.Sidecar)), h.Token, since(h.Since), strconv.Quote(h.Info))
	}
	if len(holders) == 0 {
		fmt.Fprintln(tw, "holder\tnone")
	}
	fmt.Fprintf(tw, "waiters\t%d\n", len(st.Waiters))
	if st.Parked > 0 {
		fmt.Fprintf(tw, "parked\t%d (in this sidecar, behind its holder; not in ZooKeeper yet)\n", st.Parked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Waiters) == 0 {
		return nil
	}
	tw = newTable(w)
	fmt.Fprintln(tw, "  #\tNODE\tTYPE\tMODE\tSIDECAR\tSINCE\tINFO")
	for i, wt := range st.Waiters {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, printable(wt.Node), orDash(printable(wt.Type)), modeOf(wt.Mode),
			orDash(printable(wt.Sidecar)), since(wt.Since), strconv.Quote(wt.Info))
	}
	return tw.Flush()
}
