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
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/dlq"
	"github.com/batonhq/baton/ops"
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
	sec, err := dlq.NewSecurity(ops.DLQSecurity(l.Config))
	if err != nil {
		return nil, nil, exitWith(exitFailure, err)
	}
	r, err := dlq.NewReader(dlq.ReaderOptions{Brokers: l.Config.KafkaBrokers, Topic: l.Config.DLQTopic, Security: sec})
	if err != nil {
		return nil, nil, exitWith(exitFailure, err)
	}
	return l, r, nil
}

// newDLQLsCmd is `baton dlq ls`: the dead letters on the topic, each with
// what became of its op on this sidecar (or the raw letters with --json).
func newDLQLsCmd(g *globals) *cobra.Command {
	var (
		maxN   int
		asJSON bool
		group  string
	)
	cmd := &cobra.Command{
		Use:   "ls [--max N] [--group G] [--json]",
		Short: "Print the dead letters without consuming them",
		Long: `ls prints the dead-letter topic from its first offset to the end it has now,
without joining a consumer group or committing anything. One line per
message: PARTITION:OFFSET, key (the object), op id, error class, attempts,
REPLAYED, OP and the last error (quoted, cut at 200 bytes).

REPLAYED is "yes" when the letter was handled by 'baton dlq replay' in group
G (default baton-dlq-replay: its committed offset is past the letter) or the
op was accepted again after the letter was written (replayed by any means),
else "no". OP is the op's current state as the sidecar (sidecar.socket.path)
has it: queued, running, retrying, done, dlq_pending, dead_lettered;
"unknown" when the sidecar does not know the op (another node's, or
purged); "-" when the sidecar cannot be asked (a warning says why).

A message that is not a valid dead letter shows "-" and INVALID with the
reason. --json prints each message's value (the letter's JSON) as it is, one
per line.

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
			var (
				tw *tabwriter.Writer
				st *letterStatus
			)
			if !asJSON {
				committed, err := r.Committed(cmd.Context(), group)
				if err != nil {
					return exitWith(exitUnavailable, kafkaError(l, err))
				}
				c := client.New(l.Config.SocketPath)
				defer c.Close()
				st = &letterStatus{c: c, committed: committed, ops: map[string]*api.Op{}, g: g}
				tw = newTable(g.stdout)
				fmt.Fprintln(tw, "OFFSET\tKEY\tID\tCLASS\tATTEMPTS\tREPLAYED\tOP\tLAST_ERROR")
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
					fmt.Fprintf(tw, "%s\t%s\t-\tINVALID\t-\t-\t-\t%s\n", pos, orDash(printable(string(m.Raw.Key))), quoteCut(m.Err.Error()))
					return nil
				}
				lt := m.Letter
				replayed, state := st.of(cmd.Context(), m)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", pos, printable(lt.Object), printable(lt.ID), orDash(printable(lt.ErrorClass)),
					lt.Attempts, replayed, state, quoteCut(lt.LastError))
				return nil
			})
			if werr != nil {
				return werr
			}
			if err != nil {
				return exitWith(exitUnavailable, kafkaError(l, err))
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
	cmd.Flags().StringVar(&group, "group", dlq.DefaultGroup, "consumer `G`roup of 'baton dlq replay' whose committed offsets mark letters replayed")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw letters, one JSON value per line")
	return cmd
}

// letterStatus says, for dlq ls, whether a letter was replayed and what
// its op's state is now.
type letterStatus struct {
	c         *client.Client
	committed map[int]int64
	ops       map[string]*api.Op // by id; nil = unknown to the sidecar
	down      bool               // the sidecar could not be asked: stop asking
	g         *globals
}

func (st *letterStatus) of(ctx context.Context, m dlq.Message) (replayed, state string) {
	lt := m.Letter
	op, known := st.ops[lt.ID]
	if !known && !st.down {
		ctx, cancel := context.WithTimeout(ctx, clientTimeout)
		got, err := st.c.Op(ctx, lt.ID)
		cancel()
		ae, isAPI := errors.AsType[*client.APIError](err)
		switch {
		case err == nil:
			op = got
		case isAPI && ae.Status == http.StatusNotFound:
		default:
			st.down = true
			fmt.Fprintf(st.g.stderr, "baton: warning: op states not shown (OP -): %v\n", unprefixed(err))
		}
		if !st.down {
			st.ops[lt.ID] = op
		}
	}
	replayed, state = "no", "-"
	if off, ok := st.committed[m.Partition]; ok && off > m.Offset {
		replayed = "yes"
	}
	switch {
	case st.down:
	case op == nil:
		state = "unknown"
	default:
		state = op.State
		if superseded(op, lt) {
			replayed = "yes"
		}
	}
	return replayed, state
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
	requeued   int // POST /v1/ops/{id}/replay accepted
	submitted  int // unknown to the sidecar: submitted anew
	already    int // the op is already queued, running, retrying, done or dlq_pending
	superseded int // the op was accepted again after this letter (a newer letter exists)
	capped     int // the op was replayed --max-replays times in this run already
	wouldDo    int // --dry-run
}

// replayer hands letters to the sidecar. It skips a letter older than the
// op's current acceptance (its seq / accepted_at: the op was replayed since,
// and dead-lettered again or not; the newer letter is the one to act on)
// and replays one op at most max times per run, so that --follow does not
// loop forever on an op that keeps failing.
type replayer struct {
	c        *client.Client
	max      int
	replayed map[string]int
	rc       replayCounts
	pace     *pacer // nil: as fast as the sidecar answers
}

// pacer spaces calls at least interval apart (dlq replay --rate).
type pacer struct {
	interval time.Duration
	next     time.Time
}

// wait blocks until the next call may start, or ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	if p == nil {
		return nil
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now = p.next
	}
	p.next = now.Add(p.interval)
	return nil
}

// parseRate reads --rate: "N/s" (or "N") with N > 0 letters a second; ""
// or "0" means no limit.
func parseRate(s string) (*pacer, error) {
	if s == "" || s == "0" || s == "0/s" {
		return nil, nil
	}
	n, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil || !(n > 0) || n > 1e6 {
		return nil, usageErrorf("--rate %q is not N/s with N from 0 to 1000000 (e.g. 20/s; 0 = no limit)", s)
	}
	return &pacer{interval: time.Duration(float64(time.Second) / n)}, nil
}

func newReplayer(c *client.Client, max int) *replayer {
	return &replayer{c: c, max: max, replayed: map[string]int{}}
}

// superseded reports whether the op as the sidecar has it was accepted after
// the letter was written.
func superseded(op *api.Op, lt dlq.Letter) bool {
	acc := op.AcceptedAt.Time
	if !acc.IsZero() && !lt.AcceptedAt.IsZero() && !acc.Equal(lt.AcceptedAt.Time) {
		return acc.After(lt.AcceptedAt.Time)
	}
	return uint64(op.Seq) > lt.Seq
}

// replay hands one letter to the sidecar and says what happened, or returns
// the refusal.
func (rp *replayer) replay(ctx context.Context, lt dlq.Letter) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, clientTimeout)
	defer cancel()
	c, rc := rp.c, &rp.rc
	cur, gerr := c.Op(ctx, lt.ID)
	if ae, ok := errors.AsType[*client.APIError](gerr); gerr != nil && !(ok && ae.Status == http.StatusNotFound) {
		return "", fmt.Errorf("op %s: reading its state: %w", lt.ID, gerr)
	}
	// The letter of the op's current acceptance can be read before the
	// sidecar has recorded it as published (dlq_pending → dead_lettered):
	// wait for that record rather than count the letter as handled.
	for cur != nil && cur.State == api.OpDLQPending && uint64(cur.Seq) == lt.Seq && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
			if op, err := c.Op(ctx, lt.ID); err == nil {
				cur = op
			}
		}
	}
	if cur != nil && cur.State != api.OpDeadLettered {
		rc.already++
		return fmt.Sprintf("skipped %s (object %s): already %s", lt.ID, lt.Object, cur.State), nil
	}
	if cur != nil && superseded(cur, lt) {
		rc.superseded++
		return fmt.Sprintf("skipped %s (object %s): letter of seq %d, the op was accepted again since (seq %d) and dead-lettered again: "+
			"its newer letter counts",
			lt.ID, lt.Object, lt.Seq, cur.Seq), nil
	}
	if n := rp.replayed[lt.ID]; n >= rp.max {
		rc.capped++
		return fmt.Sprintf("skipped %s (object %s): replayed %d time(s) in this run (--max-replays); it failed again: "+
			"see its last error with baton ops get %s, replay it with baton ops replay %s", lt.ID, lt.Object, n, lt.ID, lt.ID), nil
	}
	if err := rp.pace.wait(ctx); err != nil {
		return "", fmt.Errorf("op %s: %w", lt.ID, err)
	}
	if cur == nil {
		if lt.Elided {
			return "", fmt.Errorf("op %s is unknown to this sidecar and its letter has no payload (elided: %d bytes, sha256 %s): "+
				"replay it on the sidecar that dead-lettered it (%s)", lt.ID, lt.PayloadBytes, lt.PayloadSHA256, orDash(lt.Sidecar))
		}
		ack, err := c.Submit(ctx, api.OpRequest{ID: lt.ID, Object: lt.Object, Info: lt.Info, Payload: lt.Payload})
		if err != nil {
			return "", fmt.Errorf("op %s unknown to the sidecar, submitting it failed: %w", lt.ID, err)
		}
		rp.replayed[lt.ID]++
		rc.submitted++
		return fmt.Sprintf("replayed %s (object %s): unknown to this sidecar, submitted anew (%s)", lt.ID, lt.Object, ack.State), nil
	}
	_, err := c.Replay(ctx, lt.ID)
	if err == nil {
		rp.replayed[lt.ID]++
		rc.requeued++
		return fmt.Sprintf("replayed %s (object %s): queued again", lt.ID, lt.Object), nil
	}
	ae, ok := errors.AsType[*client.APIError](err)
	if ok && ae.Status == http.StatusConflict { // changed state since we read it
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

// replayAll runs a dlq replay: every letter r.Replay passes is handed to
// the sidecar (or printed with DryRun). It returns the counts, the refusal
// that stopped it (if any) and the reader's error.
func replayAll(ctx context.Context, g *globals, r *dlq.Reader, rp *replayer, ro dlq.ReplayOptions) (counts dlq.Counts, refused, err error) {
	counts, err = r.Replay(ctx, ro, func(lt dlq.Letter) error {
		if ro.DryRun {
			rp.rc.wouldDo++
			_, werr := fmt.Fprintf(g.stdout, "would replay %s (object %s, %s, %s)\n",
				printable(lt.ID), printable(lt.Object), count(lt.Attempts, "attempt"), orDash(printable(lt.ErrorClass)))
			return werr
		}
		msg, err := rp.replay(ctx, lt)
		if err != nil {
			refused = err
			return err
		}
		_, werr := fmt.Fprintln(g.stdout, printable(msg))
		return werr
	})
	rc := rp.rc
	fmt.Fprintf(g.stdout, "read %d, replayed %d (%d queued again, %d submitted anew), already handled %d, superseded %d, capped %d, "+
		"other objects %d, would replay %d, committed %d\n",
		counts.Read, rc.requeued+rc.submitted, rc.requeued, rc.submitted, rc.already, rc.superseded, rc.capped,
		counts.Skipped, rc.wouldDo, counts.Committed)
	return counts, refused, err
}

func newDLQReplayCmd(g *globals) *cobra.Command {
	var (
		ro         dlq.ReplayOptions
		maxReplays int
		rate       string
	)
	cmd := &cobra.Command{
		Use:   "replay [--group G] [--object O] [--dry-run] [--follow] [--max-replays N] [--rate N/s]",
		Short: "Queue the dead letters again through the sidecar",
		Long: `replay reads the dead-letter topic as consumer group G (default
baton-dlq-replay), from the group's committed offsets, and hands each letter
to the sidecar: POST /v1/ops/ID/replay, or, when the sidecar does not know
the op (404; e.g. it was dead-lettered on another node or purged), POST
/v1/ops with the letter's id, object, info and payload. A letter whose op
is already queued, running, retrying, done or dlq_pending again (it was
replayed before) needs nothing and counts as handled; so does a letter
older than the op's current acceptance (the op was replayed since: a newer
letter, if any, is the one that counts), and a letter of an op replayed
--max-replays times (default 1) in this run already (it failed again: with
--follow this ends the loop of replaying an op that keeps failing). The
letter's offset is committed only after that, so a later replay in the same
group resumes at the first letter not handled.

It stops at the first refusal (sidecar unreachable, 503, 400, ...): exit
status 1, with the counts. --object replays only that object's letters and
--dry-run only prints what it would do (calling nothing); neither commits.
Without --follow it stops at the end the topic had when it started; with
--follow it keeps reading until SIGINT/SIGTERM. --rate N/s hands at most N
letters a second to the sidecar (replays and submissions; letters skipped
as handled are not paced), so a large backlog does not flood the app.

Exit status 0; 1 on a refusal or an invalid letter; 69 when Kafka cannot be
reached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxReplays < 1 {
				return usageErrorf("--max-replays must be at least 1")
			}
			pace, err := parseRate(rate)
			if err != nil {
				return err
			}
			l, r, err := loadForDLQ(g)
			if err != nil {
				return err
			}
			defer r.Close()
			rp := newReplayer(client.New(l.Config.SocketPath), maxReplays)
			rp.pace = pace
			c := rp.c
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			_, refused, err := replayAll(ctx, g, r, rp, ro)
			switch {
			case refused != nil:
				return exitWith(exitFailure, fmt.Errorf("replay stopped: %w", unprefixed(refused)))
			case err != nil && errors.Is(err, dlq.ErrInvalidLetter):
				return exitWith(exitFailure, fmt.Errorf("replay stopped at an invalid letter: %w", err))
			case err != nil:
				return exitWith(exitUnavailable, kafkaError(l, err))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&ro.Group, "group", dlq.DefaultGroup, "consumer `G`roup whose committed offsets mark what was replayed")
	f.StringVar(&ro.Object, "object", "", "replay only the letters of object `O` (commits nothing)")
	f.BoolVar(&ro.DryRun, "dry-run", false, "print what would be replayed; call nothing, commit nothing")
	f.BoolVar(&ro.Follow, "follow", false, "keep replaying new letters until interrupted")
	f.IntVar(&maxReplays, "max-replays", 1, "replay one op at most `N` times in this run")
	f.StringVar(&rate, "rate", "", "hand at most `N/s` letters a second to the sidecar (e.g. 20/s; default no limit)")
	return cmd
}

// kafkaError says which topic on which brokers could not be read, and where
// kafka.brokers came from: a default of localhost:9092 that nobody set is the
// usual cause (issue 20), and the dial error alone does not say so.
func kafkaError(l *props.Loaded, err error) error {
	src := l.Sources["kafka.brokers"]
	hint := "set kafka.brokers in the properties file (--config) or BATON_KAFKA_BROKERS"
	if src.Kind != props.FromDefault {
		hint = "kafka.brokers is set by " + src.String() + "; check it, or set BATON_KAFKA_BROKERS"
	} else {
		hint = "kafka.brokers is not set, so the default " + strings.Join(l.Config.KafkaBrokers, ",") + " was used: " + hint
	}
	return fmt.Errorf("reading %s from %s: %w (%s)", l.Config.DLQTopic, strings.Join(l.Config.KafkaBrokers, ","), err, hint)
}
