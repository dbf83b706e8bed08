package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newConfigCmd) }

func newConfigCmd(g *globals) *cobra.Command {
	c := groupCommand("config", "Inspect the configuration")
	c.AddCommand(newConfigCheckCmd(g))
	return c
}

func newConfigCheckCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration and print the effective values",
		Long: `Validate the configuration without connecting anywhere.

Prints one "key=value  # source" line per key on stdout, sorted by key; the
source is "default", FILE:LINE, "env BATON_...", "--set" or "--socket". The
value of zookeeper.auth.digest is printed as <redacted>. Warnings (unknown
keys, duplicates) go to stderr. Exit status 1 if the configuration is
invalid, with every error on stderr as FILE:LINE: KEY: "VALUE" is not ...`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := g.loadProps()
			if err != nil {
				return configError(g, err)
			}
			for _, w := range l.Warnings {
				fmt.Fprintf(g.stderr, "warning: %s\n", w)
			}
			for _, line := range l.Lines() {
				if _, err := fmt.Fprintln(g.stdout, line); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
