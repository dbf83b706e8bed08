package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
)

// Exit statuses of `baton lock` besides those of main.go, as shells use them.
const (
	exitCannotExec = 126 // CMD exists but cannot be run
	exitNotFound   = 127 // CMD not found
)

// Environment variables `baton lock` sets for CMD.
const (
	envObject       = "BATON_OBJECT"
	envLeaseID      = "BATON_LEASE_ID"
	envFencingToken = "BATON_FENCING_TOKEN"
	// A set (baton lock A B -- CMD): every object's token, "obj=token"
	// separated by spaces, in the order acquired.
	envFencingTokens = "BATON_FENCING_TOKENS"
	// A semaphore (baton lock -n N NAME -- CMD): its name and the permit
	// held (from 0).
	envSemaphore = "BATON_SEMAPHORE"
	envPermit    = "BATON_PERMIT"
)

func init() { commands = append(commands, newLockCmd) }

// lockFlags are the flags of `baton lock`.
type lockFlags struct {
	typ          string
	wait         time.Duration
	waitSet      bool
	forever      bool // --wait forever (waitflag.go)
	lease        time.Duration
	info         string
	killGrace    time.Duration
	conflictCode int
	preemptible  bool
	cleanup      time.Duration
	preempt      bool
	preemptWait  time.Duration
	forceful     bool
	verbose      bool
	lockDelay    time.Duration // --lock-delay, sent when lockDelaySet
	lockDelaySet bool
	permits      int  // -n: a semaphore of that many permits
	shared       bool // --shared: a shared (read) lock
}

func newLockCmd(g *globals) *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "lock [flags] OBJECT... [-- CMD [ARGS]]",
		Short: "Run a command while holding an object's lock",
		Long: `lock takes the lock on OBJECT through the sidecar, runs CMD while holding it
and releases it when CMD exits (like flock(1), etcdctl lock, consul lock).
Without "-- CMD" it holds the lock until SIGINT (Ctrl-C) or SIGTERM, as
etcdctl lock does: it prints BATON_OBJECT=, BATON_LEASE_ID=,
BATON_FENCING_TOKEN= and BATON_NODE= lines on stdout once granted, and exits
0 after releasing (76 if the lock was lost first).
The lease is renewed in the background and the sidecar is long-polled for a
loss. CMD gets BATON_OBJECT, BATON_LEASE_ID and BATON_FENCING_TOKEN (hand the
token to the storage with every write; inherited values are replaced).

Without -- CMD, it holds the lock until SIGINT (Ctrl-C) or SIGTERM, as
etcdctl lock does: it prints the lease (id, token) on stdout, renews it,
and releases it on the signal (exit 0); if the lock is lost meanwhile it
says why and exits 76.

Several objects before -- (baton lock A B C -- CMD) are taken all or
nothing, within one --wait, as one lease (in a canonical order, so that two
such commands naming the same objects in other orders never deadlock); the
loss of any of them is the loss of the lock. CMD gets BATON_FENCING_TOKENS,
"OBJECT=TOKEN" for each object separated by spaces (fence each object's
writes with its own token), and BATON_OBJECT and BATON_FENCING_TOKEN of the
first. A set is not preemptible, and is held only with a command.

With -n N, NAME is a counting semaphore of N permits: at most N holders at
once across every sidecar (every holder gives the same N). CMD gets
BATON_SEMAPHORE=NAME, BATON_PERMIT (the permit held, from 0), and
BATON_OBJECT and BATON_FENCING_TOKEN of that permit's lock. Not preemptible.

Run by a baton lock holding the same OBJECT (BATON_OBJECT and BATON_LEASE_ID
in the environment), it re-enters that lease instead of waiting on its
parent: same token, one more hold, released when CMD exits.

With --shared the lock is a shared (read) lock: any number of shared holders
together, none with an exclusive one (a plain baton lock); requests are
served in line, so a waiting exclusive one is not starved by later shared
ones. It needs zookeeper.lock.protocol=native on the sidecar (a plugin-protocol
sidecar refuses it: exit 64). Several objects with --shared are each taken
shared; not with -n. Run inside a baton lock of the same object, the mode
must be the parent's (no upgrade: release the shared lock, then take it
exclusive).

With --wait forever it waits until granted, for a leader election (hold a
lock for as long as a server runs; observers run baton watch OBJECT): it
asks the sidecar for its longest wait (10 minutes) again and again, queueing
again at the end each time.

With --preemptible, a foreground baton lock --preempt (any sidecar) can ask
CMD to yield: CMD gets SIGTERM at once and has --cleanup to exit (then exit
76); the lock's validity is never told more than --cleanup ahead. With
--preempt, a preemptible holder is asked to yield; --forceful takes the lock
from one that did not within its cleanup, else 75 once --preempt-wait is
over. --wait and --preempt-wait must each cover the holder's cleanup + 1s
(else the sidecar refuses the request, naming the one that is short); when
this baton lock gives up (timeout, SIGINT), the holder is told it may go on.

The lease is bound to this process ("bind":"process"): if baton lock dies,
the sidecar releases the lock at once (and the kernel kills CMD). Its
validity is counted from when the acquire was sent plus the time the
sidecar waited for the grant, so a long --wait does not shorten it.

CMD runs in its own process group; signals go to that whole group:
  - the lock is lost (the sidecar says so), or the sidecar is unreachable
    and the last confirmed validity minus --kill-grace is reached: SIGTERM,
    then SIGKILL after --kill-grace, or 100ms before the end of the last
    confirmed validity if that comes first (at once if it ran out
    unconfirmed);
  - ZooKeeper is unreachable (the sidecar reports the lock suspect: its
    validity is no longer extended): SIGTERM at that validity minus
    --kill-grace, SIGKILL 100ms before it; if ZooKeeper answers again
    first, nothing is sent (or the SIGKILL is called off);
  - the sidecar drains (SIGTERM to it, baton drain): the lock stays valid
    until the end of sidecar.shutdown.grace; SIGTERM at that end minus
    --kill-grace, SIGKILL 100ms before it, unless CMD finishes first;
  - SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to baton lock are forwarded
    (one that baton lock started with ignored, as under nohup, stays
    ignored for both).
When CMD exits, whatever it left running in its group is killed (SIGKILL)
before the lock is released: a process meant to outlive the lock must leave
the group (setsid). Being in its own group, CMD cannot read from the
terminal.

Exit status:
  CMD's own       CMD exited (128+n if it died of signal n)
  75              lock not taken within --wait (see --conflict-exit-code)
  76              lock lost while CMD ran, or CMD stopped because the lock's
                  validity was ending (ZooKeeper unreachable, sidecar
                  draining or unreachable)
  69              sidecar or ZooKeeper unavailable, or a cap of your uid
                  reached (429: retry later)
  77              not allowed for your uid (403, e.g. --forceful without
                  being an admin: sidecar.auth.admin.uids)
  64              usage error (bad flags or arguments, invalid configuration)
  127             CMD not found: not on $PATH, or a path that does not exist
                  (no lock is taken; as POSIX shells do)
  126             CMD found but cannot be run: not executable, a directory
                  (no lock is taken)
  128+n           baton lock got signal n while waiting for the lock`,
		Example: `  baton lock --wait 30s article-42 -- ./reindex.sh 42
  baton lock --type background --info "nightly" report-7 -- sh -c 'run-report --token "$BATON_FENCING_TOKEN"'
  baton lock --wait 10s article-42        # hold until Ctrl-C; prints the lease
  baton lock --wait forever leader -- ./server   # leader election: serve while elected (observers: baton watch leader)
  baton lock article-42 category-7 -- ./move-article.sh   # both or neither; BATON_FENCING_TOKENS
  baton lock -n 3 --wait 1m reindex-pool -- ./reindex.sh  # at most 3 at once; BATON_PERMIT
  baton lock --shared article-1 -- cat /data/article-1.json   # readers together, never with a writer (native protocol)`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.waitSet = cmd.Flags().Changed("wait")
			f.lockDelaySet = cmd.Flags().Changed("lock-delay")
			objs, argv, err := lockArgs(cmd.ArgsLenAtDash(), args)
			if err != nil {
				return err
			}
			if err := f.check(cmd.Flags().Changed("lease")); err != nil {
				return err
			}
			if err := f.checkRecipe(objs, argv == nil); err != nil {
				return err
			}
			return runLock(cmd.Context(), g, objs, argv, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.typ, "type", api.Foreground, "lock `type`: foreground or background")
	fl.Var(waitValue{&f.wait, &f.forever}, "wait", "how long to wait for the lock (0 = try once; forever = until granted, for a leader election); default: the type's zookeeper.*.task.timeout")
	fl.DurationVar(&f.lease, "lease", 0, "lease length, renewed in the background; default: sidecar.lease.default")
	fl.StringVar(&f.info, "info", "", "`text` recorded in the lock's node, shown by baton locks")
	fl.DurationVar(&f.killGrace, "kill-grace", client.DefaultStopGrace, "time between SIGTERM and SIGKILL when the lock is lost")
	fl.IntVar(&f.conflictCode, "conflict-exit-code", exitNotTaken, "exit status when the lock is not taken in time")
	fl.BoolVar(&f.preemptible, "preemptible", false, "let a --preempt request ask CMD to yield: SIGTERM, then --cleanup to exit")
	fl.DurationVar(&f.cleanup, "cleanup", 0, "with --preemptible: time CMD has to roll back and exit once preempted (default 5s)")
	fl.BoolVar(&f.preempt, "preempt", false, "(foreground) ask a preemptible holder, on any sidecar, to yield")
	fl.DurationVar(&f.preemptWait, "preempt-wait", 0, "with --preempt: how long to wait for the holder to yield before giving up, at least its cleanup + 1s (default: --wait)")
	fl.BoolVar(&f.forceful, "forceful", false, "with --preempt: take the lock from a holder that did not yield in time")
	fl.DurationVar(&f.lockDelay, "lock-delay", 0, "after a holder vanished without releasing, wait this long before taking the lock (0 = none); default: zookeeper.lock.delay")
	fl.BoolVar(&f.shared, "shared", false, "a shared (read) lock: held together with other shared holders, never with an exclusive one (needs zookeeper.lock.protocol=native)")
	fl.IntVarP(&f.permits, "permits", "n", 0, "NAME is a counting semaphore of `N` permits: at most N holders at once (1 to 256)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "say on stderr what the wait is for (who holds the lock, how many wait); on by default when stderr is a terminal")
	return cmd
}

// lockArgs splits "OBJECT... -- CMD [ARGS]"; dash is cobra's ArgsLenAtDash.
// "OBJECT" alone holds the lock without a command (argv nil).
func lockArgs(dash int, args []string) (objs []string, argv []string, err error) {
	switch {
	case dash < 0 && len(args) == 0:
		return nil, nil, usageErrorf("missing OBJECT: baton lock OBJECT [-- CMD [ARGS]]")
	case dash < 0 && len(args) == 1:
		return args[:1], nil, nil
	case dash < 0:
		return nil, nil, usageErrorf("missing -- before the command: baton lock OBJECT... -- CMD [ARGS]")
	case dash == 0:
		return nil, nil, usageErrorf("missing OBJECT: baton lock OBJECT... -- CMD [ARGS]")
	case len(args) == dash:
		return nil, nil, usageErrorf("missing CMD after --: baton lock OBJECT... -- CMD [ARGS]")
	case dash > api.MaxObjectsPerAcquire:
		return nil, nil, usageErrorf("%d objects before --, at most %d", dash, api.MaxObjectsPerAcquire)
	}
	return args[:dash], args[dash:], nil
}

// checkRecipe validates -n and several objects against the other flags.
func (f *lockFlags) checkRecipe(objs []string, hold bool) error {
	what := ""
	switch {
	case f.permits != 0 && (f.permits < 1 || f.permits > api.MaxPermits):
		return usageErrorf("-n: %d is not between 1 and %d", f.permits, api.MaxPermits)
	case f.permits != 0 && len(objs) > 1:
		return usageErrorf("-n: a semaphore has one NAME, got %d (%s)", len(objs), strings.Join(objs, " "))
	case f.permits != 0 && f.shared:
		return usageErrorf("--shared: not with -n (a semaphore's permits are exclusive)")
	case f.permits != 0:
		what = "-n (a semaphore)"
	case len(objs) > 1:
		what = "several objects"
		if hold {
			return usageErrorf("several objects are held only with a command: baton lock OBJECT... -- CMD [ARGS]")
		}
	default:
		return nil
	}
	for _, fl := range []struct {
		name string
		set  bool
	}{{"--preemptible", f.preemptible}, {"--preempt", f.preempt}, {"--forceful", f.forceful}} {
		if fl.set {
			return usageErrorf("%s: not with %s", fl.name, what)
		}
	}
	return nil
}

// check validates the flags (the sidecar validates again).
func (f *lockFlags) check(leaseSet bool) error {
	switch {
	case f.typ != api.Foreground && f.typ != api.Background:
		return usageErrorf("--type: %q is not %s or %s", f.typ, api.Foreground, api.Background)
	case f.waitSet && (f.wait < 0 || f.wait > api.MaxWaitMS*time.Millisecond):
		return usageErrorf("--wait: %v is not between 0 and %v", f.wait, api.MaxWaitMS*time.Millisecond)
	case leaseSet && f.lease <= 0:
		return usageErrorf("--lease: %v is not a positive duration", f.lease)
	case f.killGrace < 0:
		return usageErrorf("--kill-grace: %v is negative", f.killGrace)
	case f.conflictCode < 0 || f.conflictCode > 255:
		return usageErrorf("--conflict-exit-code: %d is not between 0 and 255", f.conflictCode)
	}
	return nil
}

// killMargin is how long before the end of the lock's validity a CMD that
// must be stopped by then gets SIGKILL: the time for the kernel to end it
// and for us to be scheduled.
const killMargin = 100 * time.Millisecond

// forwarded are the signals baton lock passes on to CMD's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func runLock(ctx context.Context, g *globals, objs []string, argv []string, f lockFlags) error {
	l, err := g.loadProps()
	if fe, ok := unreadableConfig(err); ok {
		return exitWith(exitUsage, fe)
	}
	if err != nil {
		fmt.Fprintln(g.stderr, err)
		return exitWith(exitUsage, errors.New("invalid configuration"))
	}
	for _, w := range l.Warnings {
		fmt.Fprintf(g.stderr, "baton: warning: %s\n", w)
	}
	hold := argv == nil
	if hold {
		// Held without a command: the supervisor runs a placeholder that
		// waits for a signal, so every stop-by rule of a command applies.
		argv = []string{"sleep", "infinity"}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		// As POSIX shells do: 127 when CMD is not found (not on $PATH, or a
		// path that does not exist), 126 when it exists but cannot be run.
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitWith(exitNotFound, fmt.Errorf("%s: command not found (%w); no lock taken", argv[0], err))
		}
		return exitWith(exitCannotExec, fmt.Errorf("%s: cannot be run (%w); no lock taken", argv[0], err))
	}

	// Signals are caught from here on: while waiting they abandon the wait,
	// while CMD runs they are forwarded. One ignored at start (nohup, a
	// background job of a non-interactive shell) stays ignored, for CMD too.
	sigc := make(chan os.Signal, 8)
	for _, s := range forwarded {
		if !signal.Ignored(s) {
			signal.Notify(sigc, s)
		}
	}
	defer signal.Stop(sigc)

	c := client.New(l.Config.SocketPath)
	defer c.Close()
	if !f.verbose {
		f.verbose = isTerminal(g.stderr)
	}
	lease, err := acquireForLock(ctx, c, objs, f, sigc, g.stderr)
	if err != nil {
		return err
	}
	obj := lockName(objs, f)
	h := &holder{g: g, lease: lease, obj: obj, grace: f.killGrace}
	if !hold {
		return h.run(ctx, path, argv, sigc)
	}
	fmt.Fprintf(g.stdout, "%s=%s\n%s=%s\n%s=%d\nBATON_NODE=%s\n",
		envObject, lease.Object(), envLeaseID, lease.ID(), envFencingToken, lease.Token(), lease.Node())
	for _, kv := range recipeEnv(lease) {
		fmt.Fprintln(g.stdout, kv)
	}
	fmt.Fprintf(g.stderr, "baton: holding %q %s (token %d) until SIGINT (Ctrl-C) or SIGTERM\n", obj, lease.Mode(), lease.Token())
	err = h.run(ctx, path, argv, sigc)
	if ee, ok := errors.AsType[*exitError](err); ok {
		switch ee.code {
		case 128 + int(syscall.SIGINT), 128 + int(syscall.SIGTERM), 128 + int(syscall.SIGHUP):
			fmt.Fprintf(g.stderr, "baton: released %q\n", obj)
			return nil // the way a hold is meant to end
		}
	}
	return err
}

// lockName names what baton lock takes, in its messages: the object, the
// objects of a set, or the semaphore.
func lockName(objs []string, f lockFlags) string {
	if f.permits > 0 {
		return "semaphore " + objs[0]
	}
	return strings.Join(objs, ", ")
}

// acquireForLock takes the lock (a set, a semaphore's permit), abandoning
// the wait on a signal.
func acquireForLock(ctx context.Context, c *client.Client, objs []string, f lockFlags, sigc <-chan os.Signal,
	stderr io.Writer) (*client.Lease, error) {
	obj := lockName(objs, f)
	opts := []client.Option{client.WithType(f.typ)}
	if f.info != "" {
		opts = append(opts, client.WithInfo(f.info))
	}
	if f.waitSet {
		opts = append(opts, client.WithWait(f.wait))
	}
	if f.lease > 0 {
		opts = append(opts, client.WithLease(f.lease))
	}
	if f.preemptible {
		opts = append(opts, client.WithPreemptible(f.cleanup))
	}
	if f.preempt {
		opts = append(opts, client.WithPreempt(f.preemptWait, f.forceful))
	}
	if f.lockDelaySet {
		opts = append(opts, client.WithLockDelay(f.lockDelay))
	}
	if f.shared {
		opts = append(opts, client.WithShared())
	}
	if id := os.Getenv(envLeaseID); id != "" && len(objs) == 1 && f.permits == 0 && os.Getenv(envObject) == obj {
		// Run by a baton lock (or an op handler) already holding obj:
		// re-enter its lease instead of waiting on ourselves.
		opts = append(opts, client.WithReentry(id))
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type result struct {
		l   *client.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := acquireWaiting(actx, f.forever, func(ctx context.Context) (*client.Lease, error) {
			switch {
			case f.permits > 0:
				return c.AcquirePermit(ctx, objs[0], f.permits, opts...)
			case len(objs) > 1:
				return c.AcquireAll(ctx, objs, opts...)
			}
			return c.Acquire(ctx, obj, opts...)
		})
		done <- result{l, err}
	}()
	var tell <-chan time.Time // --verbose: say what the wait is for, now and then
	if f.verbose {
		tk := time.NewTicker(waitReport)
		defer tk.Stop()
		tell = tk.C
	}
	var got os.Signal
	said := ""
	for {
		select {
		case <-tell:
			if msg := waitingForAny(actx, c, objs, f); msg != "" && msg != said {
				fmt.Fprintln(stderr, msg)
				said = msg
			}
			continue
		case s := <-sigc:
			if got == nil {
				got = s
				cancel(fmt.Errorf("interrupted by %v", s))
			}
			continue
		case r := <-done:
			if got != nil {
				if r.l != nil { // granted as the wait was abandoned
					rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					_ = r.l.Release(rctx)
					rcancel()
				}
				return nil, exitWith(128+sigNum(got), fmt.Errorf("lock %q: interrupted by %v while waiting", obj, got))
			}
			if r.err != nil {
				return nil, acquireExit(r.err, f)
			}
			return r.l, nil
		}
	}
}

// acquireExit maps an acquire error to its exit status (README, `baton lock`).
func acquireExit(err error, f lockFlags) error {
	if msg, ok := sidecarUnreachable(err); ok {
		return exitWith(exitUnavailable, msg)
	}
	err = unprefixed(err)
	if _, ok := errors.AsType[*client.InstanceLockError](err); ok {
		return exitWith(f.conflictCode, err)
	}
	if ae, ok := errors.AsType[*client.APIError](err); ok && ae.Status >= 400 && ae.Status < 500 {
		switch ae.Status {
		case http.StatusForbidden: // not allowed for this uid (sidecar.auth.*)
			return exitWith(exitNoPerm, err)
		case http.StatusTooManyRequests: // a per-uid cap: retry later
			return exitWith(exitUnavailable, err)
		}
		if flag, ok := lockFlagOf[ae.Field]; ok {
			// The sidecar names its API field; the user gave a flag.
			return exitWith(exitUsage, &trimmedError{msg: flag + ": " + flagProblem(ae, f), err: err})
		}
		return exitWith(exitUsage, err) // the sidecar rejected the request: bad object name, ...
	}
	return exitWith(exitUnavailable, err)
}

// lockFlagOf maps the fields of an acquire request the sidecar may reject
// to the flags of `baton lock` that set them.
var lockFlagOf = map[string]string{"lease_ms": "--lease", "wait_ms": "--wait", "type": "--type", "info": "--info",
	"lock_delay_ms": "--lock-delay", "permits": "-n", "mode": "--shared"}

// flagProblem says what the sidecar found wrong with a flag's value: for
// a millisecond field out of range, the bounds its answer gives.
func flagProblem(ae *client.APIError, f lockFlags) string {
	if ae.MinMS == nil || ae.MaxMS == nil {
		return "rejected by the sidecar: " + ae.Message
	}
	lo, hi := time.Duration(*ae.MinMS)*time.Millisecond, time.Duration(*ae.MaxMS)*time.Millisecond
	switch ae.Field {
	case "lease_ms":
		return fmt.Sprintf("%v is not between %v and %v (the sidecar's sidecar.lease.max)", f.lease, lo, hi)
	case "wait_ms":
		return fmt.Sprintf("%v is not between %v and %v", f.wait, lo, hi)
	case "lock_delay_ms":
		return fmt.Sprintf("%v is not between %v and %v", f.lockDelay, lo, hi)
	}
	return fmt.Sprintf("not between %v and %v", lo, hi)
}

// sigNum returns a signal's number (0 if it is not a syscall.Signal).
func sigNum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}

// lockEnv returns base without inherited BATON_OBJECT, BATON_LEASE_ID,
// BATON_FENCING_TOKEN, BATON_FENCING_TOKENS, BATON_SEMAPHORE and
// BATON_PERMIT, plus this lock's values and extra ("NAME=value": a set's or
// a semaphore's, recipeEnv).
func lockEnv(base []string, obj, leaseID string, token int64, extra ...string) []string {
	out := make([]string, 0, len(base)+3+len(extra))
	for _, kv := range base {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case envObject, envLeaseID, envFencingToken, envFencingTokens, envSemaphore, envPermit:
			continue
		}
		out = append(out, kv)
	}
	out = append(out, envObject+"="+obj, envLeaseID+"="+leaseID, envFencingToken+"="+strconv.FormatInt(token, 10))
	return append(out, extra...)
}

// recipeEnv is what a set's lease (BATON_FENCING_TOKENS) or a semaphore's
// (BATON_SEMAPHORE, BATON_PERMIT) adds to CMD's environment.
func recipeEnv(l *client.Lease) []string {
	if objs := l.Objects(); objs != nil {
		pairs := make([]string, len(objs))
		for i, o := range objs {
			pairs[i] = o.Object + "=" + strconv.FormatInt(o.Token, 10)
		}
		return []string{envFencingTokens + "=" + strings.Join(pairs, " ")}
	}
	if name := l.Semaphore(); name != "" {
		return []string{envSemaphore + "=" + name, envPermit + "=" + strconv.Itoa(l.Permit())}
	}
	return nil
}

// holder runs CMD while the lease is held: it starts CMD, and follows the
// lease's stop-by signal (client.StopBy) with SIGTERM and SIGKILL.
type holder struct {
	g     *globals
	lease *client.Lease
	obj   string
	grace time.Duration

	pgid     int
	doomed   error     // why CMD is being stopped (nil: it is not)
	killAt   time.Time // when SIGKILL goes to the group
	killT    *time.Timer
	released bool // the lease was released by someone else (CMD itself, with BATON_LEASE_ID)
}

// exitResult is how CMD ended.
type exitResult struct {
	state *os.ProcessState
	err   error
}

// run starts CMD, watches the lease and the sidecar until CMD exits, then
// releases the lease and returns the exit status.
func (h *holder) run(ctx context.Context, path string, argv []string, sigc <-chan os.Signal) error {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = lockEnv(os.Environ(), h.lease.Object(), h.lease.ID(), h.lease.Token(), recipeEnv(h.lease)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = h.g.stdin, h.g.stdout, h.g.stderr
	cmd.SysProcAttr = childAttr()
	cmd.WaitDelay = time.Second // for stdio that is not a file (in-process runs): stop copying after CMD exits

	started := make(chan error, 1)
	exited := make(chan exitResult, 1)
	go func() {
		// The parent-death signal is tied to the thread that started the
		// child: keep it until the child is reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		exited <- exitResult{cmd.ProcessState, err}
	}()
	if err := <-started; err != nil {
		h.release(ctx, releaseTimeout)
		return exitWith(exitCannotExec, err)
	}
	h.pgid = cmd.Process.Pid

	stop := h.lease.StopBy(h.grace)
	defer stop.Close()
	h.killT = time.NewTimer(time.Hour)
	h.killT.Stop()
	defer h.killT.Stop()
	var res exitResult
wait:
	for {
		select {
		case res = <-exited:
			break wait
		case ev := <-stop.Events():
			h.follow(ev)
		case s := <-sigc:
			h.signal(s.(syscall.Signal))
		case <-h.killT.C:
			fmt.Fprintf(h.g.stderr, "baton: the command did not exit within the kill grace; sending SIGKILL to process group %d\n", h.pgid)
			h.signal(syscall.SIGKILL)
		}
	}
	if h.doomed == nil && !h.released {
		if err := h.lease.Err(); err != nil && !errors.Is(err, client.ErrNoNode) {
			h.doomed = fmt.Errorf("lock %q lost: %w", h.obj, err) // lost as CMD exited
		}
	}
	// Nothing CMD started in its process group may run on without the lock.
	if err := syscall.Kill(-h.pgid, syscall.SIGKILL); err == nil {
		fmt.Fprintf(h.g.stderr, "baton: killed what the command left running in its process group %d\n", h.pgid)
	}
	if h.doomed != nil {
		h.release(ctx, 2*time.Second) // best effort: the lock is gone or the sidecar unreachable
		return exitWith(exitLost, fmt.Errorf("%w; the command was stopped (%s)", h.doomed, describeExit(res)))
	}
	if !h.released {
		if err := h.releaseErr(ctx, releaseTimeout); err != nil {
			switch {
			case errors.Is(err, client.ErrLockLost):
				return exitWith(exitLost, fmt.Errorf("lock %q lost before the command exited: %w", h.obj, err))
			case errors.Is(err, client.ErrNoNode): // released by CMD
			default:
				fmt.Fprintf(h.g.stderr, "baton: releasing lock %q: %v (the sidecar frees it when this process exits)\n", h.obj, err)
			}
		}
	}
	if code := exitCode(res); code != 0 {
		return exitWith(code, nil)
	}
	return nil
}

// follow acts on one event of the lease's stop-by signal: says what it
// schedules, sends SIGTERM when told to stop (SIGKILL at the event's By,
// but no later than 100ms before the validity ends), calls a SIGKILL off.
func (h *holder) follow(ev client.StopEvent) {
	until := func(t time.Time) time.Duration { return max(0, time.Until(t)).Round(time.Millisecond) }
	switch ev.Kind {
	case client.StopScheduled:
		fmt.Fprintf(h.g.stderr, "baton: lock %q: %s; it ends in %v: the command gets SIGTERM in %v unless it finishes, SIGKILL in %v\n",
			h.obj, ev.Cause, time.Until(ev.End).Round(time.Millisecond), until(ev.At), until(ev.End.Add(-killMargin)))
	case client.StopNow:
		var why error
		switch ev.Cause {
		case client.CauseLost:
			why = fmt.Errorf("lock %q lost: %w", h.obj, ev.Err)
		case client.CausePreempted:
			why = fmt.Errorf("lock %q %s; the command has until its validity ends, in %v", h.obj, printable(h.lease.Last().Reason),
				time.Until(ev.End).Round(time.Millisecond))
		case client.CauseUnreachable:
			why = fmt.Errorf("lock %q: the sidecar is unreachable and the lock's validity ends in %v", h.obj, time.Until(ev.End).Round(time.Millisecond))
		default:
			why = fmt.Errorf("lock %q: %s, and the lock's validity ends in %v", h.obj, ev.Cause, time.Until(ev.End).Round(time.Millisecond))
		}
		killAt := ev.By
		if end := ev.End.Add(-killMargin); end.Before(killAt) {
			killAt = end
		}
		if now := time.Now(); killAt.Before(now) {
			killAt = now
		}
		h.doom(why, killAt)
	case client.StopCalledOff:
		switch {
		case ev.Cause == client.CausePreempted:
			fmt.Fprintf(h.g.stderr, "baton: lock %q: the preemption was withdrawn (its requester gave up): the lock is held again; "+
				"SIGKILL to the command called off (it got SIGTERM; a command that trapped it may go on)\n", h.obj)
		case ev.Stopped:
			fmt.Fprintf(h.g.stderr, "baton: lock %q is held again (%s no more)\n", h.obj, ev.Cause)
			fmt.Fprintf(h.g.stderr, "baton: SIGKILL to the command called off: the lock is held\n")
		default:
			fmt.Fprintf(h.g.stderr, "baton: lock %q is held again (%s no more)\n", h.obj, ev.Cause)
		}
		if ev.Stopped {
			h.killT.Stop()
			h.doomed, h.killAt = nil, time.Time{}
		}
	case client.StopReleased:
		// Released with the lease id (by CMD, most likely): CMD chose to go
		// on without the lock; do not stop it.
		h.released = true
		fmt.Fprintf(h.g.stderr, "baton: lock %q released by someone else while the command runs; not stopping it\n", h.obj)
	}
}

// doom stops CMD because the lock is lost or cannot be confirmed: SIGTERM
// to its group now (once), SIGKILL at killAt (the earliest asked for).
func (h *holder) doom(why error, killAt time.Time) {
	if h.doomed == nil {
		h.doomed = why
		fmt.Fprintf(h.g.stderr, "baton: %v; sending SIGTERM to the command (process group %d), SIGKILL in %v\n",
			why, h.pgid, time.Until(killAt).Round(time.Millisecond))
		h.signal(syscall.SIGTERM)
	} else if !killAt.Before(h.killAt) {
		return
	}
	h.killAt = killAt
	h.killT.Reset(time.Until(killAt))
}

// signal sends s to CMD's process group.
func (h *holder) signal(s syscall.Signal) {
	if err := syscall.Kill(-h.pgid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(h.g.stderr, "baton: sending %v to process group %d: %v\n", s, h.pgid, err)
	}
}

// releaseTimeout bounds the release after CMD exited.
const releaseTimeout = 10 * time.Second

func (h *holder) releaseErr(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return h.lease.Release(rctx)
}

// release releases the lease, ignoring errors (a lost lease, or one the
// sidecar frees when this process exits).
func (h *holder) release(ctx context.Context, timeout time.Duration) { _ = h.releaseErr(ctx, timeout) }

// exitCode is CMD's exit status: its own, or 128+n if signal n killed it.
func exitCode(r exitResult) int {
	if r.state == nil {
		return exitFailure
	}
	if ws, ok := r.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return r.state.ExitCode()
}

func describeExit(r exitResult) string {
	if r.state == nil {
		return fmt.Sprintf("%v", r.err)
	}
	return r.state.String()
}

// waitReport is how often baton lock --verbose says what it waits for (only
// when that changed): the first time once the wait has lasted that long.
const waitReport = time.Second

// waitingForAny is waitingFor for what baton lock takes: a semaphore (its
// held permits and waiters), or the first object of a set that is held.
func waitingForAny(ctx context.Context, c *client.Client, objs []string, f lockFlags) string {
	if f.permits > 0 {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := c.Semaphore(ictx, objs[0])
		if err != nil {
			return ""
		}
		return fmt.Sprintf("baton: waiting for semaphore %q: %d of %d permits held; %d waiting", objs[0], len(st.Holders), f.permits, len(st.Waiters))
	}
	for _, o := range objs {
		if msg := waitingFor(ctx, c, o); msg != "" {
			return msg
		}
	}
	return ""
}

// waitingFor describes what an acquire of obj waits for: the holder and the
// queue, as GET /v1/locks/{object} shows them ("" if that cannot be read).
func waitingFor(ctx context.Context, c *client.Client, obj string) string {
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.Inspect(ictx, obj)
	if err != nil || st.Holder == nil {
		return ""
	}
	h := st.Holder
	held := ""
	if n := len(st.Holders); n > 1 {
		held = fmt.Sprintf(" and %d other shared holders", n-1)
	}
	return fmt.Sprintf("baton: waiting for %q: held by %s on sidecar %s (%s, %s, token %d, since %s, info %s)%s; %d waiting",
		obj, orDash(printable(h.Node)), orDash(printable(h.Sidecar)), orDash(printable(h.Type)), modeOf(h.Mode), h.Token, h.Since.Format(api.TimeFormat),
		strconv.Quote(h.Info), held, len(st.Waiters))
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
