//go:build dev

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/props"
	"github.com/batonhq/baton/testenv"
)

// baton dev exists only in builds with the dev tag (make run): release
// builds do not link testenv.
func init() { commands = append(commands, newDevCmd) }

func newDevCmd(g *globals) *cobra.Command {
	var tick time.Duration
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Start a local ZooKeeper, an in-process Kafka broker and the sidecar (development only)",
		Long: `dev starts ZooKeeper (Debian's package, run with java on a free loopback
port), an in-process Kafka-protocol broker (kfake), a demo app that background
ops are delivered to (unless sidecar.app.url is set) and the sidecar, and
prints every setting it overrides, the exports that point the CLI of another
shell at them, and a tour of every feature. The demo app logs each delivery
and answers 200, or what it was told for an object or an op:
  curl -XPOST 'http://127.0.0.1:PORT/answer?object=O&status=503&times=2'
Ctrl-C stops all of them; their data is discarded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDev(ctx, g, tick)
		},
	}
	cmd.Flags().DurationVar(&tick, "tick", 2*time.Second, "ZooKeeper tickTime (session timeouts are clamped to 2–20 ticks)")
	return cmd
}

func runDev(ctx context.Context, g *globals, tick time.Duration) error {
	out := g.stdout
	if removed, err := testenv.ReapStale(); err == nil && len(removed) > 0 {
		fmt.Fprintf(out, "dev: reaped %d stale server(s) of earlier runs\n", len(removed))
	}
	dir, err := os.MkdirTemp("", "baton-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	z, err := testenv.StartZooKeeper(testenv.ZKOptions{TickTime: tick, Dir: filepath.Join(dir, "zookeeper")})
	if err != nil {
		return exitWith(exitUnavailable, err)
	}
	defer z.Stop()
	base, err := g.loadProps()
	if err != nil {
		return err
	}
	k, err := testenv.StartKafka(testenv.KafkaOptions{Topics: []string{base.Config.DLQTopic}})
	if err != nil {
		return exitWith(exitUnavailable, err)
	}
	defer k.Stop()
	overrides := []props.Flag{
		{Name: "baton dev", Key: "zookeeper.servers", Value: z.ConnString()},
		{Name: "baton dev", Key: "zookeeper.tick.time", Value: strconv.FormatInt(tick.Milliseconds(), 10)},
		{Name: "baton dev", Key: "kafka.brokers", Value: k.Addr()},
		{Name: "baton dev", Key: "queue.dir", Value: filepath.Join(dir, "queue")},
	}
	if !g.socketSet() {
		overrides = append(overrides, props.Flag{Name: "baton dev", Key: "sidecar.socket.path", Value: filepath.Join(dir, "baton.sock")})
	}
	// Background ops need an app to deliver to: the demo app, unless the
	// configuration names one.
	var app *demoApp
	if base.Config.AppURL == "" {
		if app, err = startDemoApp(out); err != nil {
			return exitWith(exitUnavailable, err)
		}
		defer app.Close()
		overrides = append(overrides, props.Flag{Name: "baton dev", Key: "sidecar.app.url", Value: app.URL()})
	}
	opts := g.loadOptions()
	opts.Flags = append(overrides, opts.Flags...)
	loaded, err := props.Load(opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "dev: zookeeper %s (tickTime %v, data in %s)\n", z.ConnString(), tick, z.Dir())
	fmt.Fprintf(out, "dev: kafka broker %s (in process, topic %s)\n", k.Addr(), loaded.Config.DLQTopic)
	for _, o := range overrides {
		fmt.Fprintf(out, "dev: override %s=%s\n", o.Key, o.Value)
	}
	if app != nil && loaded.Config.AppTokenFile != "" { // the demo app checks Baton-Token
		tok, err := props.ReadAppToken(loaded.Config.AppTokenFile)
		if err != nil {
			return fmt.Errorf("sidecar.app.token.file %s: %w", loaded.Config.AppTokenFile, err)
		}
		app.setToken(tok)
	}
	if app != nil {
		fmt.Fprintf(out, "dev: demo app %s: logs every delivery (app: lines), answers as told at %s/answer\n", app.URL(), app.Base())
	} else {
		fmt.Fprintf(out, "dev: background ops go to your app at %s (sidecar.app.url)\n", loaded.Config.AppURL)
	}
	appBase := "http://127.0.0.1:PORT"
	if app != nil {
		appBase = app.Base()
	}
	return devServe(ctx, g, loaded, t0, appBase)
}
