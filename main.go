// Command reclaimnet keeps borrowed GPU training jobs alive while lab owners
// take their machines back. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/reclaimnet/reclaimnet/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
