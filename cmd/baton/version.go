package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at build time:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)" ./cmd/baton
//
// When empty, they come from the module version and the VCS stamp that go
// build records (see [debug.ReadBuildInfo]).
var (
	version = ""
	commit  = ""
)

func init() { commands = append(commands, newVersionCmd) }

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, c := buildVersion()
			_, err := fmt.Fprintf(g.stdout, "version: %s\ncommit: %s\ngo: %s %s/%s\n", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// buildVersion returns the version and commit: the -X values if set, else
// the build info ("(devel)" and "unknown" when it has none; "-dirty" is
// appended to a commit built from a modified tree).
func buildVersion() (ver, rev string) {
	ver, rev = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" {
			ver = bi.Main.Version
		}
		if rev == "" {
			modified := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if rev != "" && modified {
				rev += "-dirty"
			}
		}
	}
	if ver == "" {
		ver = "(devel)"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev
}
