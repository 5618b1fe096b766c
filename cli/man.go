package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func init() { register(newManCmd) }

// newManCmd is the hidden 'reclaimnet man DIR': man pages for every
// command, from the same definitions as the help (packaging ships them).
func newManCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "write the man pages (section 1) into DIR",
		Hidden: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("man takes one directory")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeManPages(cmd.Root(), args[0], env)
		},
	}
}

func writeManPages(root *cobra.Command, dir string, env *Env) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	root.DisableAutoGenTag = true // no date: the pages are reproducible
	forEachCommand(root, func(c *cobra.Command) { c.Long = manText(c.Long) })
	header := &doc.GenManHeader{Title: "RECLAIMNET", Section: "1", Source: "ReclaimNet " + Version, Manual: "ReclaimNet Manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "wrote %d man pages to %s\n", len(entries), dir)
	return nil
}

// forEachCommand calls fn on c and every command below it.
func forEachCommand(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		forEachCommand(sub, fn)
	}
}

// manText prepares a command's long help for the man page, where it is
// read as Markdown: a paragraph laid out in columns (a line indented, or
// aligned with runs of spaces) is kept as it is, in a code block; the
// others are reflowed.
func manText(long string) string {
	paras := strings.Split(long, "\n\n")
	for i, p := range paras {
		if strings.Contains(p, "\n ") || strings.HasPrefix(p, " ") || strings.Contains(p, "   ") {
			paras[i] = "```\n" + p + "\n```"
		}
	}
	return strings.Join(paras, "\n\n")
}
