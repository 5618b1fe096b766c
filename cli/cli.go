// Package cli implements the reclaimnet command line. Each subcommand lives
// in its own file and registers itself with register; Run parses the
// subcommand name, runs it, and decides the process exit code in one place.
//
// Exit codes: 0 success, 1 the command ran and failed, 2 the command line
// was wrong (unknown subcommand, bad flag, missing argument), 10 the agent
// left because its node was reclaimed.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit codes shared by every subcommand.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
	// ExitReclaimed is how 'reclaimnet agent' exits when a reclaim made
	// the node leave: the owner's wish, which a service manager must not
	// undo by restarting it (the systemd unit lists it in
	// RestartPreventExitStatus).
	ExitReclaimed = 10
)

// Env is what a subcommand may touch of the outside world. Tests build one
// with buffers; main passes the process's standard streams.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads an environment variable (os.Getenv in production).
	Getenv func(string) string
}

// command is one subcommand.
type command struct {
	name     string
	synopsis string // one line for the command list
	usage    string // shown by "reclaimnet help NAME" and on a usage error
	// run executes the command with the arguments after its name. A
	// UsageError (or a flag parsing error) exits 2, any other error 1.
	run func(ctx context.Context, env *Env, args []string) error
	// hidden commands are not listed (internal helpers re-exec'd by tests).
	hidden bool
}

var commands = map[string]*command{}

// register adds a subcommand; each command file calls it from init.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("cli: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// UsageError reports a wrong command line; Run exits with ExitUsage.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// usagef returns a UsageError with a formatted message.
func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// errSilent marks an error whose message was already printed.
var errSilent = errors.New("silent")

// errReclaimed: the agent left because its node was reclaimed.
var errReclaimed = errors.New("the node was reclaimed and left the cluster; start the agent again to lend it")

// Run runs the command line args (args[0] is the program name) and returns
// the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	return run(ctx, env, args)
}

func run(ctx context.Context, env *Env, args []string) int {
	if len(args) < 2 {
		printCommandList(env.Stderr)
		return ExitUsage
	}
	name, rest := args[1], args[2:]
	switch name {
	case "-h", "-help", "--help":
		printCommandList(env.Stdout)
		return ExitOK
	case "-v", "-version", "--version":
		name = "version"
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(env.Stderr, "reclaimnet: unknown command %q\nRun 'reclaimnet help' for the list of commands.\n", name)
		return ExitUsage
	}
	err := cmd.run(ctx, env, rest)
	var usage *UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errSilent):
		return ExitError
	case errors.Is(err, errReclaimed):
		fmt.Fprintf(env.Stderr, "reclaimnet %s: %s\n", cmd.name, err)
		return ExitReclaimed
	case errors.As(err, &usage):
		fmt.Fprintf(env.Stderr, "reclaimnet %s: %s\n", cmd.name, usage.Msg)
		if cmd.usage != "" {
			fmt.Fprintf(env.Stderr, "usage: %s\n", firstLine(cmd.usage))
		}
		fmt.Fprintf(env.Stderr, "Run 'reclaimnet help %s' for details.\n", cmd.name)
		return ExitUsage
	case isFlagError(err):
		// The flag package already printed the problem and the defaults.
		return ExitUsage
	default:
		fmt.Fprintf(env.Stderr, "reclaimnet %s: %s\n", cmd.name, err)
		return ExitError
	}
}

// flagError wraps errors returned by flag.FlagSet.Parse so Run can tell them
// apart from runtime failures.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

func isFlagError(err error) bool {
	var fe *flagError
	return errors.As(err, &fe)
}

// newFlagSet returns a FlagSet for a subcommand that reports errors instead
// of exiting, and prints its usage to env.Stderr.
func newFlagSet(env *Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("reclaimnet "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	if cmd, ok := commands[name]; ok && cmd.usage != "" {
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "usage: %s\n", cmd.usage)
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args with fs and wraps a parse failure so Run exits 2.
// -h and --help return flag.ErrHelp (exit 0) after the usage is printed.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &flagError{err: err}
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func printCommandList(w io.Writer) {
	fmt.Fprintln(w, "reclaimnet keeps borrowed GPU training jobs alive while owners reclaim their machines.")
	fmt.Fprintln(w, "\nusage: reclaimnet <command> [flags] [arguments]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for name, c := range commands {
		if !c.hidden {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-12s %s\n", name, commands[name].synopsis)
	}
	fmt.Fprintln(w, "\nRun 'reclaimnet help <command>' for a command's flags.")
}
