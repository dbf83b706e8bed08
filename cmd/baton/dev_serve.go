//go:build dev

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/props"
)

// devName is the source label of the settings `baton dev` overrides.
const devName = "baton dev"

// devServe runs the real sidecar (and the background operations) on the
// dev configuration, exactly as `baton serve` does, until ctx ends or
// SIGTERM/SIGINT arrives; SIGHUP reloads with the same overrides.
func devServe(ctx context.Context, g *globals, loaded *props.Loaded, t0 time.Time) error {
	opts := devLoadOptions(g, loaded)
	return serveLoaded(ctx, g, loaded, opts, func(sock string) {
		out := g.stdout
		fmt.Fprintf(out, "dev: ready in %v; socket %s\n", time.Since(t0).Round(time.Millisecond), sock)
		fmt.Fprintf(out, "dev: try  curl --unix-socket %s -XPOST -d '{\"lease_ms\":60000}' http://baton/v1/locks/P1/acquire\n", sock)
		fmt.Fprintln(out, "dev:      (the sidecar releases a lease as soon as the process that took it exits, so the")
		fmt.Fprintln(out, "dev:      curl answer shows a grant that is released right after; to hold a lock from a")
		fmt.Fprintf(out, "dev:      shell: baton --socket %s lock P1 -- CMD)\n", sock)
		fmt.Fprintf(out, "dev:      curl --unix-socket %s http://baton/readyz\n", sock)
		fmt.Fprintln(out, "dev: Ctrl-C stops")
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
