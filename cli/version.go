package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is the release version; set at link time with
// -ldflags "-X github.com/reclaimnet/reclaimnet/cli.Version=v0.1.0".
var Version = "v0.1.0-dev"

func init() { register(newVersionCmd) }

func newVersionCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "print the version and build information",
		GroupID: groupTools,
		Args:    noArgs,
		RunE:    func(*cobra.Command, []string) error { return printVersion(env) },
	}
}

func printVersion(env *Env) error {
	cgo := "off"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "CGO_ENABLED" && s.Value == "1" {
				cgo = "on"
			}
		}
	}
	_, err := fmt.Fprintf(env.Stdout, "reclaimnet %s (%s, %s/%s, cgo %s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, cgo)
	return err
}
