//go:build dev

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton/props"
)

// devServe runs until ctx ends. (The sidecar joins here once it exists.)
func devServe(ctx context.Context, g *globals, loaded *props.Loaded, t0 time.Time) error {
	fmt.Fprintf(g.stdout, "dev: ready in %v; Ctrl-C stops\n", time.Since(t0).Round(time.Millisecond))
	<-ctx.Done()
	fmt.Fprintln(g.stdout, "dev: stopping")
	return nil
}
