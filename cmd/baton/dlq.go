package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/props"
)

func init() { commands = append(commands, newDLQCmd) }

func newDLQCmd(g *globals) *cobra.Command {
	c := groupCommand("dlq", "List and replay the dead-letter topic")
	c.Long = `dlq reads the dead-letter topic (kafka.dlq.topic on kafka.brokers), where
the sidecars publish the background ops that failed for good.`
	c.AddCommand(newDLQLsCmd(g), newDLQReplayCmd(g))
	return c
}

// loadForDLQ loads the configuration (warnings to stderr) and returns it
// with a reader of the dead-letter topic.
func loadForDLQ(g *globals) (*props.Loaded, *dlq.Reader, error) {
	l, err := g.loadProps()
	if err != nil {
		return nil, nil, configError(g, err)
	}
	for _, w := range l.Warnings {
		fmt.Fprintf(g.stderr, "baton: warning: %s\n", w)
	}
	r, err := dlq.NewReader(dlq.ReaderOptions{Brokers: l.Config.KafkaBrokers, Topic: l.Config.DLQTopic})
	if err != nil {
		return nil, nil, exitWith(exitFailure, err)
	}
	return l, r, nil
}

func newDLQLsCmd(g *globals) *cobra.Command {
	var (
		maxN   int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls [--max N] [--json]",
		Short: "Print the dead letters without consuming them",
		Long: `ls prints the dead-letter topic from its first offset to the end it has now,
without joining a consumer group or committing anything. One line per
message: PARTITION:OFFSET, key (the object), op id, error class, attempts
and the last error (quoted, cut at 200 bytes). A message that is not a valid
dead letter shows "-" and INVALID with the reason. --json prints each
message's value (the letter's JSON) as it is, one per line.

Exit status 0; 69 when Kafka cannot be reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxN < 0 {
				return usageErrorf("--max must not be negative")
			}
			l, r, err := loadForDLQ(g)
			if err != nil {
				return err
			}
			defer r.Close()
			var tw *tabwriter.Writer
			if !asJSON {
				tw = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "OFFSET\tKEY\tID\tCLASS\tATTEMPTS\tLAST_ERROR")
			}
			var werr error
			n, err := r.List(cmd.Context(), maxN, func(m dlq.Message) error {
				if asJSON {
					v := m.Raw.Value
					if len(v) == 0 || v[len(v)-1] != '\n' {
						v = append(v[:len(v):len(v)], '\n')
					}
					_, werr = g.stdout.Write(v)
					return werr
				}
				pos := fmt.Sprintf("%d:%d", m.Partition, m.Offset)
				if m.Err != nil {
					fmt.Fprintf(tw, "%s\t%s\t-\tINVALID\t-\t%s\n", pos, orDash(string(m.Raw.Key)), quoteCut(m.Err.Error()))
					return nil
				}
				lt := m.Letter
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", pos, lt.Object, lt.ID, orDash(lt.ErrorClass), lt.Attempts, quoteCut(lt.LastError))
				return nil
			})
			if werr != nil {
				return werr
			}
			if err != nil {
				return exitWith(exitUnavailable, fmt.Errorf("reading %s from %s: %w", l.Config.DLQTopic, strings.Join(l.Config.KafkaBrokers, ","), err))
			}
			if asJSON {
				return nil
			}
			if n == 0 {
				_, err := fmt.Fprintf(g.stdout, "no dead letters in %s\n", l.Config.DLQTopic)
				return err
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&maxN, "max", 0, "print at most `N` messages (0 = all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw letters, one JSON value per line")
	return cmd
}

// quoteCut quotes s for one line, cut at 200 bytes.
func quoteCut(s string) string {
	if s == "" {
		return "-"
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strconv.Quote(s)
}

// replayCounts is what a dlq replay did, beyond dlq.Counts.
type replayCounts struct {
	requeued  int // POST /v1/ops/{id}/replay accepted
	submitted int // unknown to the sidecar: submitted anew
	already   int // the op is already queued, running, retrying, done or dlq_pending
	wouldDo   int // --dry-run
}

func newDLQReplayCmd(g *globals) *cobra.Command {
	var ro dlq.ReplayOptions
	cmd := &cobra.Command{
		Use:   "replay [--group G] [--object O] [--dry-run] [--follow]",
		Short: "Queue the dead letters again through the sidecar",
		Long: `replay reads the dead-letter topic as consumer group G (default
baton-dlq-replay), from the group's committed offsets, and hands each letter
to the sidecar: POST /v1/ops/ID/replay, or, when the sidecar does not know
the op (404; e.g. it was dead-lettered on another node or purged), POST
/v1/ops with the letter's id, object, info and payload. A letter whose op
is already queued, running, retrying, done or dlq_pending again (409: it
was replayed before) needs nothing and counts as handled. The letter's
offset is committed only after that, so a later replay in the same group
resumes at the first letter not handled.

It stops at the first refusal (sidecar unreachable, 503, 400, ...): exit
status 1, with the counts. --object replays only that object's letters and
--dry-run only prints what it would do (calling nothing); neither commits.
Without --follow it stops at the end the topic had when it started; with
--follow it keeps reading until SIGINT/SIGTERM.

Exit status 0; 1 on a refusal or an invalid letter; 69 when Kafka cannot be
reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, r, err := loadForDLQ(g)
			if err != nil {
				return err
			}
			defer r.Close()
			c := client.New(l.Config.SocketPath)
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			var rc replayCounts
			var refused error
			counts, err := r.Replay(ctx, ro, func(lt dlq.Letter) error {
				if ro.DryRun {
					rc.wouldDo++
					_, werr := fmt.Fprintf(g.stdout, "would replay %s (object %s, %d attempts, %s)\n", lt.ID, lt.Object, lt.Attempts, orDash(lt.ErrorClass))
					return werr
				}
				msg, err := replayLetter(ctx, c, lt, &rc)
				if err != nil {
					refused = err
					return err
				}
				_, werr := fmt.Fprintln(g.stdout, msg)
				return werr
			})
			fmt.Fprintf(g.stdout, "read %d, replayed %d (%d queued again, %d submitted anew), already handled %d, other objects %d, would replay %d, committed %d\n",
				counts.Read, rc.requeued+rc.submitted, rc.requeued, rc.submitted, rc.already, counts.Skipped, rc.wouldDo, counts.Committed)
			switch {
			case refused != nil:
				return exitWith(exitFailure, fmt.Errorf("replay stopped: %w", unprefixed(refused)))
			case err != nil && errors.Is(err, dlq.ErrInvalidLetter):
				return exitWith(exitFailure, fmt.Errorf("replay stopped at an invalid letter: %w", err))
			case err != nil:
				return exitWith(exitUnavailable, fmt.Errorf("reading %s from %s: %w", l.Config.DLQTopic, strings.Join(l.Config.KafkaBrokers, ","), err))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&ro.Group, "group", dlq.DefaultGroup, "consumer `G`roup whose committed offsets mark what was replayed")
	f.StringVar(&ro.Object, "object", "", "replay only the letters of object `O` (commits nothing)")
	f.BoolVar(&ro.DryRun, "dry-run", false, "print what would be replayed; call nothing, commit nothing")
	f.BoolVar(&ro.Follow, "follow", false, "keep replaying new letters until interrupted")
	return cmd
}

// replayLetter hands one letter to the sidecar and says what happened, or
// returns the refusal.
func replayLetter(ctx context.Context, c *client.Client, lt dlq.Letter, rc *replayCounts) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, clientTimeout)
	defer cancel()
	_, err := c.Replay(ctx, lt.ID)
	if err == nil {
		rc.requeued++
		return fmt.Sprintf("replayed %s (object %s): queued again", lt.ID, lt.Object), nil
	}
	ae, ok := errors.AsType[*client.APIError](err)
	switch {
	case ok && ae.Status == http.StatusNotFound:
		ack, err := c.Submit(ctx, api.OpRequest{ID: lt.ID, Object: lt.Object, Info: lt.Info, Payload: lt.Payload})
		if err != nil {
			return "", fmt.Errorf("op %s unknown to the sidecar, submitting it failed: %w", lt.ID, err)
		}
		rc.submitted++
		return fmt.Sprintf("replayed %s (object %s): unknown to this sidecar, submitted anew (%s)", lt.ID, lt.Object, ack.State), nil
	case ok && ae.Status == http.StatusConflict:
		op, gerr := c.Op(ctx, lt.ID)
		if gerr != nil {
			return "", fmt.Errorf("op %s: %w (and reading its state failed: %v)", lt.ID, err, gerr)
		}
		if op.State == api.OpDeadLettered {
			return "", fmt.Errorf("op %s: %w", lt.ID, err)
		}
		rc.already++
		return fmt.Sprintf("skipped %s (object %s): already %s", lt.ID, lt.Object, op.State), nil
	}
	return "", fmt.Errorf("op %s: %w", lt.ID, err)
}
