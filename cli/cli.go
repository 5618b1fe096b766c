// Package cli implements the reclaimnet command line on cobra. Each
// subcommand lives in its own file: a constructor that declares the
// command and its flags (registered with register), and a function that
// does the work with the parsed values. Run builds the command tree, runs
// it, and decides the process exit code in one place.
//
// Exit codes: 0 success, 1 the command ran and failed, 2 the command line
// was wrong (unknown command, bad flag or value, missing argument), 10 the
// agent left because its node was reclaimed.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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

// Command groups of the command list.
const (
	groupNode  = "node"
	groupJobs  = "jobs"
	groupOwner = "owner"
	groupSetup = "setup"
	groupTools = "tools"
)

// constructors build the top-level commands; each command file registers
// its own from init. The tree is built anew for every Run, so no flag
// value survives from one run to the next.
var constructors []func(*Env) *cobra.Command

// register adds a top-level command's constructor.
func register(newCmd func(*Env) *cobra.Command) {
	constructors = append(constructors, newCmd)
}

// UsageError reports a wrong command line; Run exits with ExitUsage.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// usagef returns a UsageError with a formatted message.
func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// errSilent marks a failure whose message was already printed (exit 1).
var errSilent = errors.New("silent")

// errReclaimed: the agent left because its node was reclaimed.
var errReclaimed = errors.New("the node was reclaimed and left the cluster; start the agent again to lend it")

// errSilentUsage marks a wrong command line whose explanation was already
// printed (exit 2).
var errSilentUsage = errors.New("silent usage")

// Run runs the command line args (args[0] is the program name) and returns
// the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	return run(ctx, env, args)
}

func run(ctx context.Context, env *Env, args []string) int {
	root := newRoot(env)
	root.SetArgs(args[1:])
	cmd, err := root.ExecuteContextC(ctx)
	if cmd == nil {
		cmd = root
	}
	var usage *UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errSilent):
		return ExitError
	case errors.Is(err, errReclaimed):
		fmt.Fprintf(env.Stderr, "%s: %s\n", cmd.CommandPath(), err)
		return ExitReclaimed
	case errors.Is(err, errSilentUsage):
		return ExitUsage
	case errors.As(err, &usage):
		fmt.Fprintf(env.Stderr, "%s: %s\n", cmd.CommandPath(), usage.Msg)
		if cmd.Runnable() && cmd != root {
			fmt.Fprintf(env.Stderr, "usage: %s\n", cmd.UseLine())
		}
		fmt.Fprintf(env.Stderr, "Run '%s --help' for details.\n", cmd.CommandPath())
		return ExitUsage
	default:
		fmt.Fprintf(env.Stderr, "%s: %s\n", cmd.CommandPath(), err)
		return ExitError
	}
}

// newRoot builds the command tree.
func newRoot(env *Env) *cobra.Command {
	root := &cobra.Command{
		Use:   "reclaimnet",
		Short: "keep borrowed GPU training jobs alive while owners reclaim their machines",
		Long: `reclaimnet keeps borrowed GPU training jobs alive while owners reclaim their machines.

Every lab machine runs 'reclaimnet agent'; the other commands talk to the
local agent through its control socket (--data-dir, or $` + DataDirEnv + `).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Arguments left once no subcommand matched: an unknown command.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %q?)", s[0])
			}
			return usagef("%s", msg)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if v, _ := cmd.Flags().GetBool("version"); v {
				return printVersion(env)
			}
			// No command: the list, on stderr, as a usage error.
			cmd.SetOut(env.Stderr)
			_ = cmd.Help()
			return errSilentUsage
		},
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.Flags().BoolP("version", "v", false, "print the version and exit")
	root.SetFlagErrorFunc(flagError)
	root.SetUsageTemplate(usageTemplate)
	root.SuggestionsMinimumDistance = 2
	root.AddGroup(
		&cobra.Group{ID: groupNode, Title: "Node and cluster:"},
		&cobra.Group{ID: groupJobs, Title: "Jobs:"},
		&cobra.Group{ID: groupOwner, Title: "Machine owner:"},
		&cobra.Group{ID: groupSetup, Title: "Setup:"},
		&cobra.Group{ID: groupTools, Title: "Tools:"},
	)
	root.SetHelpCommand(newHelpCmd())
	root.SetHelpCommandGroupID(groupTools)
	root.SetCompletionCommandGroupID(groupSetup)
	for _, newCmd := range constructors {
		root.AddCommand(newCmd(env))
	}
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.Short = "print the shell completion script (bash, zsh, fish or powershell)"
		c.Long = "Prints a script that completes reclaimnet's commands, flags and job IDs in the shell;\neach shell's --help says how to load it."
	}
	return root
}

// newHelpCmd is 'reclaimnet help [command]': the help of a command, on
// standard output; an unknown command is a usage error.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "show the commands, or one command's help",
		Args:  cobra.ArbitraryArgs,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []cobra.Completion
			target, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			for _, sub := range target.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usagef("unknown command %q", strings.Join(args, " "))
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// noArgs is cobra.NoArgs with the command's name in the message.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.Name(), args[0])
	}
	return nil
}

// usageTemplate is cobra's, with the flags wrapped at helpWidth columns.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}{{$cmds := .Commands}}{{if eq (len .Groups) 0}}

Available Commands:{{range $cmds}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{else}}{{range $group := .Groups}}

{{.Title}}{{range $cmds}}{{if (and (eq .GroupID $group.ID) (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{wrappedFlagUsages .LocalFlags | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{wrappedFlagUsages .InheritedFlags | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`

// helpWidth is the width flag descriptions are wrapped to.
const helpWidth = 100

func init() {
	cobra.AddTemplateFunc("wrappedFlagUsages", func(fs *pflag.FlagSet) string { return fs.FlagUsagesWrapped(helpWidth) })
}
