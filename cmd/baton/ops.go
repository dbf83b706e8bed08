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

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

func init() { commands = append(commands, newOpsCmd) }

func newOpsCmd(g *globals) *cobra.Command {
	c := groupCommand("ops", "Submit and inspect background operations")
	c.Long = `ops talks to the sidecar's background-operations API (/v1/ops) over its unix
socket: submit an op, show its state and history, list ops, queue a
dead-lettered op again, or discard one for good.

Exit status 0; 1 when the sidecar refuses (unknown op, 409 conflict); 64 for
bad input; 69 when the sidecar cannot be reached or answers 503 (queue full,
ops disabled, shutting down) or 507 (queue.max.bytes reached).`
	c.AddCommand(newOpsSubmitCmd(g), newOpsGetCmd(g), newOpsLsCmd(g), newOpsReplayCmd(g), newOpsDiscardCmd(g))
	return c
}

func newOpsSubmitCmd(g *globals) *cobra.Command {
	var (
		id, info string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "submit [--id ID] [--info TEXT] OBJECT [PAYLOAD-JSON | -]",
		Short: "Submit a background operation",
		Long: `submit hands an op to the sidecar (POST /v1/ops), which stores it durably
before answering and delivers it to sidecar.app.url under the object's
background lock. PAYLOAD-JSON is any JSON value; "-" reads it from stdin;
without it the payload is null.

--id makes the submission idempotent: the same id and body again answers with
the op's current state and does not run it again; the same id with another
body is refused (exit 1). Without --id the sidecar generates one (UUIDv7).
Prints "ID STATE" (or the JSON answer with --json).`,
		Args: argsNamed("OBJECT", "[PAYLOAD-JSON]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.OpRequest{ID: id, Object: args[0], Info: info}
			if len(args) == 2 {
				raw := []byte(args[1])
				if args[1] == "-" {
					b, err := io.ReadAll(io.LimitReader(g.stdin, api.MaxBody+1))
					if err != nil {
						return fmt.Errorf("reading the payload from stdin: %w", err)
					}
					raw = b
				}
				if !json.Valid(raw) {
					return usageErrorf("PAYLOAD-JSON is not valid JSON: %.80q", raw)
				}
				req.Payload = raw
			}
			return withClient(g, cmd, func(ctx context.Context, c *client.Client) error {
				ack, err := c.Submit(ctx, req)
				if err != nil {
					return clientExit(c, err)
				}
				if asJSON {
					return writeJSON(g.stdout, ack.OpAck)
				}
				note := ""
				if ack.Duplicate {
					note = " (already submitted with this body: not queued again)"
				}
				_, err = fmt.Fprintf(g.stdout, "%s %s%s\n", ack.ID, ack.State, note)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "op `ID` (1-128 of A-Z a-z 0-9 . _ : -), the idempotency key; default generated")
	cmd.Flags().StringVar(&info, "info", "", "free `TEXT` recorded with the op and in its lock node")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newOpsGetCmd(g *globals) *cobra.Command {
	return opIDCmd(g, "get", "Show a background operation's state",
		`get shows an op (GET /v1/ops/ID): object, state (queued, running, retrying,
done, dlq_pending, dead_lettered), failed attempts, last error, next attempt,
accept time and per-object sequence. Finished ops are kept for
queue.retention. Exit status 1 for an unknown op.`,
		(*client.Client).Op, printOp)
}

func newOpsReplayCmd(g *globals) *cobra.Command {
	replay := func(c *client.Client, ctx context.Context, id string) (api.OpAck, error) {
		ack, err := c.Replay(ctx, id)
		if err != nil {
			return api.OpAck{}, err
		}
		return ack.OpAck, nil
	}
	return opIDCmd(g, "replay", "Queue a dead-lettered operation again",
		`replay queues a dead_lettered op again (POST /v1/ops/ID/replay): its attempts
restart and it goes behind the object's newer ops. Exit status 1 for an
unknown op or one that is not dead_lettered (409). To replay from the
dead-letter topic (e.g. on another node), use 'baton dlq replay'.`,
		replay, func(w io.Writer, ack api.OpAck) error {
			_, err := fmt.Fprintf(w, "%s %s\n", ack.ID, ack.State)
			return err
		})
}

func newOpsDiscardCmd(g *globals) *cobra.Command {
	return opIDCmd(g, "discard", "Delete a dead-lettered operation and its payload for good",
		`discard deletes a dead_lettered op and its payload (POST /v1/ops/ID/discard).
It is the way out for an op the sidecar keeps because its dead letter went
out without the payload (too large for the topic; 'baton ops get' shows
"kept"): such an op is never purged, since the sidecar holds the only whole
copy. After a discard the op cannot be replayed by id; the sidecar logs it
(audit, WARN). Prints what was deleted. Exit status 1 for an unknown op or
one that is not dead_lettered (409: an op still to be delivered is never
dropped).`,
		(*client.Client).Discard, func(w io.Writer, d *api.OpDiscarded) error {
			_, err := fmt.Fprintf(w, "%s discarded: %s (payload sha256 %s)\n", d.ID, d.Message, d.PayloadSHA256)
			return err
		})
}

// opIDCmd is `baton ops NAME [--json] ID`: one request about op ID (send,
// a client method), its answer printed by text or, with --json, as the
// API's JSON.
func opIDCmd[T any](g *globals, name, short, long string,
	send func(c *client.Client, ctx context.Context, id string) (T, error), text func(w io.Writer, v T) error) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   name + " ID",
		Short: short,
		Long:  long,
		Args:  argsNamed("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return request(g, cmd, asJSON, func(ctx context.Context, c *client.Client) (T, error) { return send(c, ctx, args[0]) }, text)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func printOp(w io.Writer, op *api.Op) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "id\t%s\n", printable(op.ID))
	fmt.Fprintf(tw, "object\t%s\n", printable(op.Object))
	fmt.Fprintf(tw, "state\t%s\n", op.State)
	fmt.Fprintf(tw, "attempts\t%d failed since accepted\n", op.Attempts)
	fmt.Fprintf(tw, "last_error\t%s\n", orDash(printable(op.LastError)))
	if op.ErrorClass != "" {
		fmt.Fprintf(tw, "error_class\t%s\n", printable(op.ErrorClass))
	}
	fmt.Fprintf(tw, "next_attempt_at\t%s\n", since(op.NextAttemptAt))
	fmt.Fprintf(tw, "accepted_at\t%s\n", since(op.AcceptedAt))
	fmt.Fprintf(tw, "seq\t%d\n", op.Seq)
	fmt.Fprintf(tw, "replays\t%d\n", op.Replays)
	if op.LetterNote != "" {
		fmt.Fprintf(tw, "letter_note\t%s\n", quoteCut(op.LetterNote))
	}
	if op.Kept {
		fmt.Fprintf(tw, "kept\tyes: the dead letter has no payload; kept until 'baton ops replay %s' or 'baton ops discard %s'\n", op.ID, op.ID)
	}
	switch {
	case op.HistoryDropped > 0:
		fmt.Fprintf(tw, "history\t(%s not kept)\n", count(op.HistoryDropped, "older entry"))
	case len(op.History) > 0:
		fmt.Fprintf(tw, "history\t(oldest first)\n") // text in the cell: no padding left at the end of the line
	}
	for _, e := range op.History {
		line := e.Outcome
		if e.ErrorClass != "" {
			line += " " + printable(e.ErrorClass)
		}
		if e.Error != "" {
			line += " " + quoteCut(e.Error)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", e.At.Format(api.TimeFormat), line)
	}
	return tw.Flush()
}

// newOpsLsCmd is `baton ops ls`: the ops of this sidecar's queue, page by
// page, filtered by state and object (see its help).
func newOpsLsCmd(g *globals) *cobra.Command {
	var (
		o      client.OpsOptions
		all    bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls [--state S] [--object O] [--limit N] [--after ID] [--all] [--json]",
		Short: "List background operations",
		Long: `ls lists the sidecar's ops (GET /v1/ops) in id order: generated ids are
UUIDv7, so that is accept order for them, but an op submitted with an --id of
its own sorts by that id wherever it falls. Unfinished ones and finished ones kept for
queue.retention. --state (queued, running, retrying, done, dlq_pending,
dead_lettered) and --object filter; one page holds --limit ops (default 100,
at most 1000) and ends with "next: ID" when there are more: pass it as
--after for the next page, or use --all to read every page.

One line per op: id, object, state, seq, failed attempts since accepted,
replays, accept time and last error (quoted, cut at 200 bytes). --json
prints each page's answer.

Exit status 0; 64 for a bad --state or --limit; 69 when the sidecar cannot
be reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(g, cmd, func(ctx context.Context, c *client.Client) error {
				var tw *tabwriter.Writer
				if !asJSON {
					tw = newTable(g.stdout)
					fmt.Fprintln(tw, "ID\tOBJECT\tSTATE\tSEQ\tATTEMPTS\tREPLAYS\tACCEPTED\tLAST_ERROR")
				}
				n := 0
				for {
					page, err := c.Ops(ctx, o)
					if err != nil {
						if ae, ok := errors.AsType[*client.APIError](err); ok && ae.Status == http.StatusBadRequest {
							return usageErrorf("%s", ae.Message)
						}
						return clientExit(c, err)
					}
					n += len(page.Ops)
					if asJSON {
						if err := writeJSON(g.stdout, page); err != nil {
							return err
						}
					} else {
						for _, op := range page.Ops {
							fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", printable(op.ID), printable(op.Object), op.State, op.Seq, op.Attempts,
								op.Replays, op.AcceptedAt.Format(api.TimeFormat), quoteCut(op.LastError))
						}
					}
					if page.Next == "" || !all {
						if !asJSON {
							if n == 0 {
								_, err := fmt.Fprintln(g.stdout, "no ops")
								return err
							}
							if err := tw.Flush(); err != nil {
								return err
							}
							if page.Next != "" {
								_, err := fmt.Fprintf(g.stdout, "next: %s\n", page.Next)
								return err
							}
						}
						return nil
					}
					o.After = page.Next
				}
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.State, "state", "", "only ops in state `S`")
	f.StringVar(&o.Object, "object", "", "only ops of object `O`")
	f.IntVar(&o.Limit, "limit", 0, "at most `N` ops a page (default 100, at most 1000)")
	f.StringVar(&o.After, "after", "", "start after op `ID` (the previous page's next)")
	f.BoolVar(&all, "all", false, "read every page")
	f.BoolVar(&asJSON, "json", false, "print the API's JSON answers")
	return cmd
}

// count returns "1 attempt", "2 attempts", "0 attempts" (an "entry" becomes
// "entries").
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
