//go:build dev

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonhq/baton/props"
)

// devName is the source label of the settings `baton dev` overrides.
const devName = "baton dev"

// devServe runs the real sidecar (and the background operations) on the
// dev configuration, exactly as `baton serve` does, until ctx ends or
// SIGTERM/SIGINT arrives; SIGHUP reloads with the same overrides.
func devServe(ctx context.Context, g *globals, loaded *props.Loaded, t0 time.Time, appBase string) error {
	opts := devLoadOptions(g, loaded)
	return serveLoaded(ctx, g, loaded, opts, func(sock string) {
		exe, err := os.Executable()
		if err != nil {
			exe = "baton"
		}
		if abs, err := filepath.Abs(sock); err == nil {
			sock = abs
		}
		fmt.Fprintf(g.stdout, "dev: ready in %v; socket %s\n", time.Since(t0).Round(time.Millisecond), sock)
		printDevTour(g.stdout, exe, sock, strings.Join(loaded.Config.KafkaBrokers, ","), appBase)
	})
}

// devLoadOptions rebuilds the options runDev loaded with: the command's own
// options with the dev overrides (recorded in loaded's sources) before the
// command-line flags, so a reload keeps them.
func devLoadOptions(g *globals, loaded *props.Loaded) props.LoadOptions {
	opts := g.loadOptions()
	var dev []props.Flag
	for _, k := range props.Keys() {
		if src := loaded.Sources[k.Key]; src.Kind == props.FromFlag && src.Name == devName {
			dev = append(dev, props.Flag{Name: devName, Key: k.Key, Value: loaded.Values[k.Key]})
		}
	}
	opts.Flags = append(dev, opts.Flags...)
	return opts
}
