// Command baton is the Baton lock sidecar and its command-line client.
//
// Each subcommand lives in its own file, which appends a constructor to
// [commands] in its init function:
//
//	func init() { commands = append(commands, newLockCmd) }
//
//	func newLockCmd(g *globals) *cobra.Command {
//		return &cobra.Command{Use: "lock OBJECT -- CMD [ARGS]", RunE: func(cmd *cobra.Command, args []string) error {
//			l, err := g.loadProps() // --config, --set, --socket and BATON_ variables applied
//			...
//		}}
//	}
//
// A RunE error ends the process with status 1 and "baton: <err>" on
// stderr; return [exitWith] for another status (and nil to print nothing
// more), [usageErrorf] for a usage error (64). Errors cobra raises itself
// (unknown command or flag, bad arguments) are usage errors too. Commands
// read g.stdin and write g.stdout / g.stderr (or cmd.InOrStdin(),
// cmd.OutOrStdout(), cmd.ErrOrStderr()), never os.Stdout, so tests run them
// in-process through [run]. A command that must react to signals sets up
// signal.NotifyContext(cmd.Context(), ...) itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/props"
)

// Exit statuses (README, `baton lock`).
const (
	exitOK          = 0
	exitFailure     = 1  // the command failed, e.g. an invalid configuration
	exitDrained     = 3  // `baton serve`: drained on an API request (POST /v1/drain); the unit restarts it
	exitUsage       = 64 // EX_USAGE: unknown command or flag, bad arguments
	exitUnavailable = 69 // EX_UNAVAILABLE: sidecar or ZooKeeper unavailable
	exitNotTaken    = 75 // lock not taken in time (`baton lock`, see --conflict-exit-code)
	exitLost        = 76 // lock lost while the command ran (`baton lock`)
	exitNoPerm      = 77 // EX_NOPERM: refused for the caller's uid (403 Forbidden: sidecar.auth.*)
)

// commands holds the constructors of the top-level subcommands. Each
// command's file appends its constructor in init(); the root is built fresh
// from them on every [run].
var commands []func(*globals) *cobra.Command

// globals holds the persistent flags every command takes and the standard
// streams of this run.
type globals struct {
	configFile string   // --config FILE
	set        []string // --set key=value, repeatable, in order
	socket     string   // --socket PATH; see socketSet

	root   *cobra.Command
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// socketSet reports whether --socket was given (even as "").
func (g *globals) socketSet() bool {
	return g.root != nil && g.root.PersistentFlags().Changed("socket")
}

// loadOptions returns the props options of this run: --config, the process
// environment, --set, and --socket as an override of sidecar.socket.path.
func (g *globals) loadOptions() props.LoadOptions {
	opts := props.LoadOptions{File: g.configFile, Env: os.Environ(), Set: g.set}
	if g.socketSet() {
		opts.Flags = append(opts.Flags, props.Flag{Name: "--socket", Key: "sidecar.socket.path", Value: g.socket})
	}
	return opts
}

// loadProps loads and validates the configuration of this run (see
// [props.Load]). Warnings are left to the caller.
func (g *globals) loadProps() (*props.Loaded, error) { return props.Load(g.loadOptions()) }

// exitError ends a command with a chosen exit status. A non-nil err is
// printed to stderr as "baton: <err>".
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitWith returns an error that ends the run with code, printing err if it is not nil.
func exitWith(code int, err error) error { return &exitError{code: code, err: err} }

// usageErrorf returns a usage error (exit 64) found by a command itself.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// argsNamed checks a command's positional arguments by name, so that a
// missing one is "missing OBJECT: baton revoke OBJECT" (as baton lock says)
// instead of cobra's "accepts 1 arg(s), received 0". Names in brackets are
// optional.
func argsNamed(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		usage := cmd.CommandPath() + " " + strings.Join(names, " ")
		required := 0
		for _, n := range names {
			if !strings.HasPrefix(n, "[") {
				required++
			}
		}
		if len(args) < required {
			return usageErrorf("missing %s: %s", names[len(args)], usage)
		}
		if len(args) > len(names) {
			return usageErrorf("too many arguments (%d; unexpected %q): %s", len(args), args[len(names)], usage)
		}
		return nil
	}
}

// runError marks an error returned by a command's RunE, as opposed to one
// cobra raised while parsing the command line (a usage error).
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run runs baton with args (without the program name) and returns the exit
// status. It builds a fresh command tree, so tests call it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(context.Background())
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		if ee.err != nil {
			fmt.Fprintf(stderr, "baton: %s\n", noEscapes(ee.err.Error()))
		}
		if ee.code == exitUsage {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ee.code
	}
	if re, ok := errors.AsType[*runError](err); ok {
		fmt.Fprintf(stderr, "baton: %s\n", noEscapes(re.err.Error()))
		return exitFailure
	}
	fmt.Fprintf(stderr, "baton: %s\nRun '%s --help' for usage.\n", strings.TrimRight(err.Error(), "\n"), cmd.CommandPath())
	return exitUsage
}

// newRoot builds the root command with the persistent flags and every
// registered subcommand.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "baton",
		Short: "Baton: a lock sidecar over ZooKeeper",
		Long: `Baton grants named locks over ZooKeeper to local processes through a unix
socket, and delivers background operations with retries and a dead-letter topic.

Configuration: a Java .properties file (--config, else ./baton.properties if
present), BATON_ environment variables (BATON_ZOOKEEPER_SESSION_TIMEOUT for
zookeeper.session.timeout), then --set key=value; later wins. See
'baton config check'.`,
		SilenceErrors: true, // run prints errors once, with the exit status
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs, // unknown commands are caught below
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), suggestions(cmd, args[0]))
			}
			cmd.SetOut(g.stderr)
			_ = cmd.Usage()
			return usageErrorf("missing command")
		},
	}
	g.root = root
	root.SetIn(g.stdin)
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.configFile, "config", "", "properties `file` (default ./baton.properties if present)")
	pf.StringArrayVar(&g.set, "set", nil, "set a property, `key=value` (repeatable; wins over the file and BATON_ variables)")
	pf.StringVar(&g.socket, "socket", "", "unix socket `path` of the sidecar API (overrides sidecar.socket.path)")
	for _, mk := range commands {
		root.AddCommand(mk(g))
	}
	markRunErrors(root)
	return root
}

// markRunErrors wraps the RunE of c and its descendants so that their
// errors are told apart from cobra's usage errors.
func markRunErrors(c *cobra.Command) {
	if f := c.RunE; f != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			err := f(cmd, args)
			if err == nil {
				return nil
			}
			if _, ok := errors.AsType[*exitError](err); ok {
				return err
			}
			return &runError{err: err}
		}
	}
	for _, sub := range c.Commands() {
		markRunErrors(sub)
	}
}

// groupCommand returns a command that only holds subcommands: run without
// one, or with an unknown one, it is a usage error.
func groupCommand(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), suggestions(cmd, args[0]))
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return usageErrorf("%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", "))
		},
	}
}

// suggestions returns cobra's "did you mean" text for an unknown subcommand of c.
func suggestions(c *cobra.Command, arg string) string {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	s := c.SuggestionsFor(arg)
	if len(s) == 0 {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", s[0])
}
