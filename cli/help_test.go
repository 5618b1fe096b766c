package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite docs/cli.md and the golden files from the command definitions")

// visibleCommands lists the command paths of the tree, root first, the
// way the reference documents them (hidden commands and the shell
// completion's per-shell commands left out).
func visibleCommands(t *testing.T) [][]string {
	t.Helper()
	root := newRoot(&Env{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }})
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		out = append(out, path)
		if c.Name() == "completion" {
			return
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				walk(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	walk(root, nil)
	return out
}

// TestHelp checks every command's help: on stdout with exit 0 and nothing
// on stderr, one usage block, the same from 'help CMD' as from 'CMD
// --help', no protocol section numbers or Greek parameters in it, and
// every flag with two dashes. docs/cli.md is exactly these helps: the
// reference cannot drift from the definitions (-update rewrites it).
func TestHelp(t *testing.T) {
	var ref strings.Builder
	ref.WriteString(referenceIntro)
	for _, path := range visibleCommands(t) {
		name := strings.Join(append([]string{"reclaimnet"}, path...), " ")
		code, out, errOut := runCLI(t, append(path, "--help")...)
		if code != ExitOK || errOut != "" {
			t.Errorf("%s --help: exit %d, stderr %q; want 0 and nothing on stderr", name, code, errOut)
		}
		if n := strings.Count(out, "Usage:"); n != 1 {
			t.Errorf("%s --help: %d usage blocks, want 1:\n%s", name, n, out)
		}
		if len(path) > 0 {
			_, viaHelp, _ := runCLI(t, append([]string{"help"}, path...)...)
			if viaHelp != out {
				t.Errorf("'reclaimnet help %s' differs from '%s --help':\n%s\n---\n%s", strings.Join(path, " "), name, viaHelp, out)
			}
		}
		for _, bad := range []string{"β", "α", "§", "P1.", "P2.", "P3.", "SPEC", "paper"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s --help says %q: help says what a flag does, in words", name, bad)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "-") && !strings.HasPrefix(f[0], "--") && !strings.HasSuffix(f[0], ",") {
				t.Errorf("%s --help: flag line %q has a single-dash long flag", name, line)
			}
		}
		fmt.Fprintf(&ref, "## %s\n\n```text\n%s```\n\n", name, out)
	}
	golden(t, filepath.Join("..", "docs", "cli.md"), strings.TrimRight(ref.String(), "\n")+"\n")
}

const referenceIntro = `# Command reference

Every command's ` + "`--help`" + `, as the binary prints it. The text is generated from the
command definitions in cli/ and checked against them by the cli package's tests
(` + "`go test ./cli -run TestHelp -update`" + ` rewrites it); man pages come from the same
definitions (` + "`reclaimnet man DIR`" + `, a hidden command the packaging runs). Shell
completion: ` + "`reclaimnet completion bash|zsh|fish`" + `.

Exit codes: 0 success, 1 the command ran and failed, 2 the command line was wrong.

`

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run 'go test ./cli -update' to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s is out of date with the command definitions; run 'go test ./cli -update' and review the diff.\nfirst difference at line %d:\n got: %s\nwant: %s",
			path, firstDiffLine(got, string(want)), lineAt(got, firstDiffLine(got, string(want))), lineAt(string(want), firstDiffLine(got, string(want))))
	}
}

func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

func lineAt(s string, n int) string {
	lines := strings.Split(s, "\n")
	if n-1 < len(lines) {
		return lines[n-1]
	}
	return "(end of file)"
}

// TestFlagErrors checks that a wrong value or flag names the command and
// the flag and says what is expected, and exits 2.
func TestFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reclaim", "--notice", "5"}, `reclaimnet reclaim: invalid value "5" for --notice: a duration needs a unit (ns, us, ms, s, m, h)`},
		{[]string{"reclaim", "--notice", "soon"}, `reclaimnet reclaim: invalid value "soon" for --notice: want a duration such as 90s, 10m or 1h30m`},
		{[]string{"run", "--gpus", "two", "--", "true"}, `reclaimnet run: invalid value "two" for --gpus: want a whole number`},
		{[]string{"agent", "--cache-size", "lots"}, `reclaimnet agent: invalid value "lots" for --cache-size: size "lots": want a number with a unit`},
		{[]string{"sim", "-days", "2"}, `reclaimnet sim: unknown flag -days (long flags take two dashes: --days)`},
		{[]string{"members", "--colour"}, `reclaimnet members: unknown flag --colour`},
		{[]string{"logs", "j", "--tail"}, `reclaimnet logs: --tail needs a value`},
		{[]string{"tls", "cert", "create", "--node", "x", "--days", "0", "--ca-dir", dir}, `reclaimnet tls cert create: --days must be positive`},
		{[]string{"statsu"}, `reclaimnet: unknown command "statsu" (did you mean "status"?)`},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
		if code == ExitUsage && tc.args[0] != "statsu" && !strings.Contains(errOut, "usage: reclaimnet ") {
			t.Errorf("%q: stderr %q lacks the usage line", tc.args, errOut)
		}
	}
}

// TestFlagsAnywhere: flags may come after the arguments.
func TestFlagsAnywhere(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runCLI(t, "logs", "loop1", "--data-dir", dir)
	if code != ExitError || !strings.Contains(errOut, "no agent running with data dir "+dir) {
		t.Errorf("logs JOB --data-dir D: exit %d, stderr %q; want the agent looked for in %s", code, errOut, dir)
	}
	// run's flags end at the job's command: what follows is the job's.
	code, _, errOut = runCLI(t, "run", "--data-dir", dir, "python3", "train.py", "--gpus", "0")
	if code != ExitError || !strings.Contains(errOut, "no agent running") {
		t.Errorf("run CMD --gpus 0: exit %d, stderr %q; want --gpus left to the job and the agent looked for", code, errOut)
	}
}

// TestCompletion: the shell completion scripts name the program.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_reclaimnet", "zsh": "#compdef reclaimnet", "fish": "complete -c reclaimnet"} {
		code, out, errOut := runCLI(t, "completion", shell)
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes; want a script with %q", shell, code, errOut, len(out), want)
		}
	}
	// The completion protocol itself: subcommands, then a flag's values.
	_, out, _ := runCLI(t, "__complete", "killswitch", "")
	for _, want := range killSwitchActions {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("completing killswitch: %q lacks %q", out, want)
		}
	}
	_, out, _ = runCLI(t, "__complete", "rec")
	if !strings.HasPrefix(out, "reclaim\t") {
		t.Errorf("completing 'rec': got %q, want reclaim", out)
	}
}

// TestManPages: one page per visible command, none for hidden ones, and
// the pages are reproducible (no generation date).
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runCLI(t, "man", dir); code != ExitOK {
		t.Fatalf("man: exit %d: %s", code, errOut)
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	names := map[string]bool{}
	for _, p := range pages {
		names[filepath.Base(p)] = true
	}
	for _, want := range []string{"reclaimnet.1", "reclaimnet-agent.1", "reclaimnet-reclaim.1", "reclaimnet-tls-cert-create.1", "reclaimnet-trace-export.1"} {
		if !names[want] {
			t.Errorf("no %s among %v", want, names)
		}
	}
	if names["reclaimnet-demo-job.1"] || names["reclaimnet-man.1"] {
		t.Errorf("hidden commands got man pages: %v", names)
	}
	b, err := os.ReadFile(filepath.Join(dir, "reclaimnet-reclaim.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".TH \"RECLAIMNET\" \"1\"", `\fB--detach\fP`, "follows it"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("reclaim's man page lacks %q", want)
		}
	}
	other := t.TempDir()
	runCLI(t, "man", other)
	b2, _ := os.ReadFile(filepath.Join(other, "reclaimnet-reclaim.1"))
	if !bytes.Equal(b, b2) {
		t.Errorf("two runs wrote different man pages")
	}
}

// TestCommandLineErrorsGoToStderr: 'reclaimnet' alone lists the commands
// on stderr and exits 2; --help and help list them on stdout.
func TestCommandList(t *testing.T) {
	code, out, errOut := runCLI(t)
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "Jobs:") {
		t.Errorf("no command: exit %d, stdout %q; want exit 2 and the list on stderr", code, out)
	}
	_, viaFlag, _ := runCLI(t, "--help")
	_, viaHelp, _ := runCLI(t, "help")
	if viaFlag != viaHelp || !strings.Contains(viaFlag, "reclaim ") {
		t.Errorf("--help and help differ, or lack reclaim:\n%s\n---\n%s", viaFlag, viaHelp)
	}
	if _, out, _ := runCLI(t, "-v"); !strings.HasPrefix(out, "reclaimnet v") {
		t.Errorf("-v: got %q, want the version", out)
	}
	_ = context.Background
}
