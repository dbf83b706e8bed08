package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

func init() { commands = append(commands, newWatchCmd) }

func newWatchCmd(g *globals) *cobra.Command {
	var (
		asJSON bool
		count  int
	)
	cmd := &cobra.Command{
		Use:   "watch [--json] [--count N] OBJECT",
		Short: "Print every change of an object's holder and queue",
		Long: `watch prints OBJECT's holder and queue, then one line per change (etcd's
Election.Observe): who holds it (node, sidecar, type, info), its fencing
token and since when, and who waits, in grant order. It long-polls the
sidecar (GET /v1/locks/OBJECT?wait=change), passing each answer's version
back, so it prints every state the sidecar saw, in order; a state that
lasted less than a ZooKeeper round trip may not have been seen. Observers
of a leader elected with "baton lock --wait forever NAME -- server" run it.

Each line is the time the change was seen, the object, then "held" or
"free" and key=value fields (info quoted, as Go quotes strings); with
shared holders, holders= lists every one (node@sidecar), and a shared
waiter of queue= is marked (shared):
  2026-11-26T10:00:00.000Z leader held token=8589934602 node=A-0000000003 sidecar=node-1 type=foreground mode=exclusive since=2026-11-26T09:59:59.812Z info="node-a" waiters=1 queue=A-0000000004@node-2 version=8589934604
  2026-11-26T10:00:05.000Z leader free waiters=0 version=8589934610
With --json, each answer of the API (a LockWatch) on one line.

It runs until SIGINT or SIGTERM (exit 0), or until --count lines were
printed (exit 0). Once it got a first answer, an unavailable sidecar or
ZooKeeper is retried every second (said once on stderr) and the watch
goes on from the last state printed. Exit status: 0; 64 usage error (bad
object name); 69 sidecar or ZooKeeper unavailable at the start; 77 not
allowed for your uid.`,
		Example: `  baton watch leader
  baton watch --count 2 leader    # the current holder and the next change, then exit
  baton watch --json leader | jq -r .holder.sidecar`,
		Args: argsNamed("OBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 0 {
				return usageErrorf("--count: %d is negative", count)
			}
			c, err := newClient(g)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runWatch(ctx, c, g.stdout, g.stderr, args[0], asJSON, count)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each answer of the API as one JSON line")
	cmd.Flags().IntVar(&count, "count", 0, "exit after printing `N` lines (0 = until SIGINT or SIGTERM)")
	return cmd
}

// runWatch prints obj's states until ctx ends or count lines are printed.
func runWatch(ctx context.Context, c *client.Client, stdout, stderr io.Writer, obj string, asJSON bool, count int) error {
	version, printed, said := "", 0, ""
	for {
		for st, err := range c.Watch(ctx, obj, version) {
			if err != nil {
				if version == "" || !watchRetryable(err) {
					return clientExit(c, err)
				}
				if msg := unprefixed(err).Error(); msg != said {
					fmt.Fprintf(stderr, "baton: watch %s: %s; retrying every second\n", strconv.Quote(obj), msg)
					said = msg
				}
				break
			}
			if said != "" {
				fmt.Fprintf(stderr, "baton: watch %s: answering again\n", strconv.Quote(obj))
				said = ""
			}
			version = st.Version
			if err := printWatch(stdout, st, asJSON); err != nil {
				return err
			}
			if printed++; count > 0 && printed >= count {
				return nil
			}
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// watchRetryable: the sidecar or ZooKeeper was unavailable, or a cap of
// the caller's uid was reached: worth asking again.
func watchRetryable(err error) bool {
	if errors.Is(err, client.ErrUnavailable) {
		return true
	}
	ae, ok := errors.AsType[*client.APIError](err)
	return ok && (ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusServiceUnavailable)
}

// printWatch prints one state: a line of key=value fields, or the JSON.
func printWatch(w io.Writer, st *api.LockWatch, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var b strings.Builder
	b.WriteString(time.Now().UTC().Format(api.TimeFormat) + " " + watchField(st.Object))
	if h := st.Holder; h != nil {
		fmt.Fprintf(&b, " held token=%d node=%s sidecar=%s type=%s mode=%s since=%s info=%s", h.Token, watchField(h.Node),
			watchField(h.Sidecar), watchField(h.Type), watchField(modeOf(h.Mode)), h.Since.Format(api.TimeFormat), strconv.Quote(h.Info))
		if h.Orphan {
			b.WriteString(" orphan=true")
		}
		if len(st.Holders) > 1 { // shared holders: every one, the first included
			hs := make([]string, len(st.Holders))
			for i, o := range st.Holders {
				hs[i] = watchField(o.Node) + "@" + watchField(o.Sidecar)
			}
			b.WriteString(" holders=" + strings.Join(hs, ","))
		}
	} else {
		b.WriteString(" free")
	}
	fmt.Fprintf(&b, " waiters=%d", len(st.Waiters))
	if len(st.Waiters) > 0 {
		q := make([]string, len(st.Waiters))
		for i, wt := range st.Waiters {
			q[i] = watchField(wt.Node) + "@" + watchField(wt.Sidecar)
			if wt.Mode == api.ModeShared {
				q[i] += "(shared)"
			}
		}
		b.WriteString(" queue=" + strings.Join(q, ","))
	}
	b.WriteString(" version=" + st.Version + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// watchField is a value of a watch line as one field: quoted (as Go quotes)
// if it has a space, a quote, "=" or a character that is not printable; "-"
// when empty.
func watchField(s string) string {
	if s == "" {
		return "-"
	}
	if strings.ContainsAny(s, " \"=,@") || printable(s) != s {
		return strconv.Quote(s)
	}
	return s
}
