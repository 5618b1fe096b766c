package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/bpf"
)

func init() { register(newKillSwitchCmd) }

var killSwitchActions = []string{"status", "off", "soft", "hard"}

func newKillSwitchCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "killswitch status|off|soft|hard",
		Short: "show or flip the node's kill-switch (works without the agent)",
		Long: `Reads or sets the kill-switch mode in the BPF maps the agent pinned, so it works even when
the agent is hung or gone. soft drops new connections (TCP SYN, QUIC Initial) to the node's
protected ports (transfer listener, job ports); hard drops all traffic to them; off passes
everything. Other ports (SSH, web, gossip, Raft) are never touched. Without --node or
--pin-dir the only node pinned under ` + bpf.DefaultPinRoot + ` is used.`,
		GroupID:   groupOwner,
		ValidArgs: killSwitchActions,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("missing action: status, off, soft or hard")
			case len(args) > 1:
				return usagef("unexpected arguments %q", args[1:])
			case !slices.Contains(killSwitchActions, args[0]):
				return usagef("unknown action %q: want status, off, soft or hard", args[0])
			}
			return nil
		},
	}
	fs := cmd.Flags()
	node := fs.String("node", "", "node `name`: use "+bpf.DefaultPinRoot+"/NAME")
	pinDir := fs.String("pin-dir", "", "bpffs `dir`ectory the agent pinned its maps in")
	asJSON := fs.Bool("json", false, "status: print JSON (the kill-switch fields of GET /v1/enforce)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *node != "" && *pinDir != "" {
			return usagef("give --node or --pin-dir, not both")
		}
		return runKillSwitch(env, args[0], *node, *pinDir, *asJSON)
	}
	return cmd
}

func runKillSwitch(env *Env, action, node, pinDir string, asJSON bool) error {
	var mode bpf.Mode
	if action != "status" {
		m, err := bpf.ParseMode(action)
		if err != nil {
			return usagef("unknown action %q: want status, off, soft or hard", action)
		}
		mode = m
	}
	dir, err := killSwitchPinDir(node, pinDir)
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

	if action == "status" {
		st, err := readKillSwitch(maps, dir)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(env.Stdout, st)
		}
		printKillSwitchStatus(env, st)
		return nil
	}
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

// KillSwitchView is 'reclaimnet killswitch status --json'. The fields it
// shares with GET /v1/enforce have the same names and types there; the
// others are read from the maps only.
type KillSwitchView struct {
	PinDir     string `json:"pin_dir"`
	KillSwitch string `json:"kill_switch"`
	// Protected are the ports the kill-switch guards ("7948/udp").
	Protected          []string `json:"protected"`
	KillSwitchDrops    uint64   `json:"kill_switch_drops"`
	KillSwitchDropSYN  uint64   `json:"kill_switch_drop_syn"`
	KillSwitchDropQUIC uint64   `json:"kill_switch_drop_quic"`
	KillSwitchDropHard uint64   `json:"kill_switch_drop_hard"`
	// IngressLinkPinned: the program is attached with a pinned TCX link
	// (otherwise with cls_bpf, or not at all).
	IngressLinkPinned bool `json:"ingress_link_pinned"`
	// PacketsSeen counts the packets the program ran on; PassProtected
	// the packets to a protected port it passed (soft mode); PassUnparsed
	// those it could not parse (passed).
	PacketsSeen   uint64 `json:"packets_seen"`
	PassProtected uint64 `json:"pass_protected"`
	PassUnparsed  uint64 `json:"pass_unparsed"`
}

func readKillSwitch(maps *bpf.Maps, dir string) (KillSwitchView, error) {
	mode, err := maps.KillSwitch()
	if err != nil {
		return KillSwitchView{}, err
	}
	ports, err := maps.ProtectedPorts()
	if err != nil {
		return KillSwitchView{}, err
	}
	st, err := maps.KillSwitchStats()
	if err != nil {
		return KillSwitchView{}, err
	}
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = p.String()
	}
	slices.Sort(names)
	return KillSwitchView{
		PinDir: dir, KillSwitch: mode.String(), Protected: names,
		KillSwitchDrops: st.Dropped(), KillSwitchDropSYN: st.DroppedSYN, KillSwitchDropQUIC: st.DroppedQUIC, KillSwitchDropHard: st.DroppedHard,
		IngressLinkPinned: ingressAttached(dir), PacketsSeen: st.Seen, PassProtected: st.PassProtected, PassUnparsed: st.PassUnparsed,
	}, nil
}

func printKillSwitchStatus(env *Env, st KillSwitchView) {
	attached := "ingress link pinned (tcx)"
	if !st.IngressLinkPinned {
		attached = "no pinned tcx link (attached with cls_bpf, or not attached)"
	}
	w := env.Stdout
	fmt.Fprintf(w, "pin dir:         %s\n", st.PinDir)
	fmt.Fprintf(w, "mode:            %s\n", st.KillSwitch)
	fmt.Fprintf(w, "program:         %s\n", attached)
	fmt.Fprintf(w, "protected ports: %s\n", strings.Join(st.Protected, " "))
	fmt.Fprintf(w, "packets seen:    %d\n", st.PacketsSeen)
	fmt.Fprintf(w, "dropped:         %d (syn %d, quic initial %d, hard %d)\n", st.KillSwitchDrops, st.KillSwitchDropSYN, st.KillSwitchDropQUIC, st.KillSwitchDropHard)
	fmt.Fprintf(w, "passed:          %d to protected ports, %d unparseable or fragments\n", st.PassProtected, st.PassUnparsed)
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
