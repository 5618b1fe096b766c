package cli

import (
	"context"
	"fmt"
)

func init() {
	register(&command{
		name:     "help",
		synopsis: "show the commands, or one command's usage",
		usage:    "reclaimnet help [command]",
		run:      runHelp,
	})
}

func runHelp(ctx context.Context, env *Env, args []string) error {
	switch len(args) {
	case 0:
		printCommandList(env.Stdout)
		return nil
	case 1:
		cmd, ok := commands[args[0]]
		if !ok {
			return usagef("unknown command %q", args[0])
		}
		fmt.Fprintf(env.Stdout, "%s\n\nusage: %s\n", cmd.synopsis, cmd.usage)
		// Print the command's flags by asking it for its help.
		if cmd.name != "help" {
			_ = cmd.run(ctx, &Env{Stdin: env.Stdin, Stdout: env.Stdout, Stderr: env.Stdout, Getenv: env.Getenv}, []string{"-h"})
		}
		return nil
	default:
		return usagef("help takes at most one command name")
	}
}
