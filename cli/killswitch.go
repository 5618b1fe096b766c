package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/reclaimnet/reclaimnet/bpf"
)

func init() {
	register(&command{
		name:     "killswitch",
		synopsis: "show or flip the node's kill-switch (works without the agent)",
		usage: `reclaimnet killswitch status|off|soft|hard [--node NAME | --pin-dir DIR]

Reads or sets the kill-switch mode in the BPF maps the agent pinned, so it
works even when the agent is hung or gone. soft drops new connections (TCP
SYN, QUIC Initial) to the node's protected ports (transfer listener, job
ports); hard drops all traffic to them; off passes everything. Other ports
(SSH, web, gossip, Raft) are never touched. Without --node or --pin-dir the
only node pinned under ` + bpf.DefaultPinRoot + ` is used.`,
		run: runKillSwitch,
	})
}

func runKillSwitch(_ context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "killswitch")
	node := fs.String("node", "", "node name: use "+bpf.DefaultPinRoot+"/NAME")
	pinDir := fs.String("pin-dir", "", "bpffs directory the agent pinned its maps in")
	// Accept the action before or after the flags.
	var action string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		action, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if action == "" && len(rest) > 0 {
		action, rest = rest[0], rest[1:]
	}
	if action == "" {
		return usagef("missing action: status, off, soft or hard")
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	var mode bpf.Mode
	if action != "status" {
		m, err := bpf.ParseMode(action)
		if err != nil {
			return usagef("unknown action %q: want status, off, soft or hard", action)
		}
		mode = m
	}
	if *node != "" && *pinDir != "" {
		return usagef("give --node or --pin-dir, not both")
	}
	dir, err := killSwitchPinDir(*node, *pinDir)
	if err != nil {
		return err
	}
	maps, err := bpf.OpenPinned(dir)
	if err != nil {
		if errors.Is(err, bpf.ErrNotPinned) {
			return fmt.Errorf("%w (is the agent running? no enforcer pinned at %s)", err, dir)
		}
		return err
	}
	defer maps.Close()

	if action != "status" {
		old, err := maps.KillSwitch()
		if err != nil {
			return err
		}
		if err := maps.SetKillSwitch(mode); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "kill-switch %s (was %s) at %s\n", mode, old, dir)
		if !ingressAttached(dir) {
			fmt.Fprintf(env.Stderr, "warning: no pinned TCX ingress link at %s: the switch is enforced only if the program is attached with cls_bpf\n", dir)
		}
		return nil
	}
	return printKillSwitchStatus(env, maps, dir)
}

func printKillSwitchStatus(env *Env, maps *bpf.Maps, dir string) error {
	mode, err := maps.KillSwitch()
	if err != nil {
		return err
	}
	ports, err := maps.ProtectedPorts()
	if err != nil {
		return err
	}
	st, err := maps.KillSwitchStats()
	if err != nil {
		return err
	}
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = p.String()
	}
	slices.Sort(names)
	attached := "ingress link pinned (tcx)"
	if !ingressAttached(dir) {
		attached = "no pinned tcx link (attached with cls_bpf, or not attached)"
	}
	w := env.Stdout
	fmt.Fprintf(w, "pin dir:         %s\n", dir)
	fmt.Fprintf(w, "mode:            %s\n", mode)
	fmt.Fprintf(w, "program:         %s\n", attached)
	fmt.Fprintf(w, "protected ports: %s\n", strings.Join(names, " "))
	fmt.Fprintf(w, "packets seen:    %d\n", st.Seen)
	fmt.Fprintf(w, "dropped:         %d (syn %d, quic initial %d, hard %d)\n", st.Dropped(), st.DroppedSYN, st.DroppedQUIC, st.DroppedHard)
	fmt.Fprintf(w, "passed:          %d to protected ports, %d unparseable or fragments\n", st.PassProtected, st.PassUnparsed)
	return nil
}

func ingressAttached(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "link_ingress"))
	return err == nil
}

// killSwitchPinDir resolves the pin directory: --pin-dir, else --node,
// else the only node pinned under the default root.
func killSwitchPinDir(node, pinDir string) (string, error) {
	if pinDir != "" {
		return pinDir, nil
	}
	if node != "" {
		dir, err := bpf.DefaultPinDir(node)
		if err != nil {
			return "", usagef("%v", err)
		}
		return dir, nil
	}
	nodes, err := bpf.PinnedNodes(bpf.DefaultPinRoot)
	if err != nil {
		return "", err
	}
	switch len(nodes) {
	case 0:
		return "", fmt.Errorf("%w under %s (is the agent running? give --node or --pin-dir)", bpf.ErrNotPinned, bpf.DefaultPinRoot)
	case 1:
		return filepath.Join(bpf.DefaultPinRoot, nodes[0]), nil
	}
	return "", usagef("several nodes pinned under %s (%s): choose one with --node", bpf.DefaultPinRoot, strings.Join(nodes, ", "))
}
