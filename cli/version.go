package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version; set at link time with
// -ldflags "-X github.com/reclaimnet/reclaimnet/cli.Version=v0.1.0".
var Version = "v0.1.0-dev"

func init() {
	register(&command{
		name:     "version",
		synopsis: "print the version and build information",
		usage:    "reclaimnet version",
		run:      runVersion,
	})
}

func runVersion(_ context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version takes no arguments")
	}
	cgo := "off"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "CGO_ENABLED" && s.Value == "1" {
				cgo = "on"
			}
		}
	}
	fmt.Fprintf(env.Stdout, "reclaimnet %s (%s, %s/%s, cgo %s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, cgo)
	return nil
}
