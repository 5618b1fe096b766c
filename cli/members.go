package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

func init() { register(newMembersCmd) }

func newMembersCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "members",
		Short:   "list the cluster's nodes as the local agent sees them",
		Long:    "Lists the cluster's nodes as the local agent sees them: building, gossip state, Raft role,\nfree GPUs, emergency hazard, available bandwidth, address, kill-switch and eligibility.\nHAZARD is the leader's published upper bound λ̂⁺ of the node's emergency hazard now, per hour\n(the status page's figure); ELIGIBLE says whether the node takes jobs, standbys and copies,\nand if not, why.",
		GroupID: groupNode,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	dir := dataDirFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON (the document of GET /v1/members)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runMembers(cmd.Context(), env, resolveDataDir(env, *dir), *asJSON)
	}
	return cmd
}

func runMembers(ctx context.Context, env *Env, dataDir string, asJSON bool) error {
	if asJSON {
		doc, err := statusDocument(ctx, dataDir)
		if err != nil {
			return err
		}
		return printJSON(env.Stdout, web.MembersResponse{GeneratedAt: doc.GeneratedAt, Node: doc.Node, Cluster: doc.Cluster})
	}
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpMembers})
	if err != nil {
		return err
	}
	printMembers(env.Stdout, resp.Status.Members)
	return nil
}

// printMembers writes the members table.
func printMembers(w io.Writer, members []localapi.MemberView) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBUILDING\tSTATE\tRAFT\tGPUS\tHAZARD\tBANDWIDTH\tLENDING\tADDRESS\tKILL-SWITCH\tELIGIBLE")
	for _, m := range members {
		building := m.Building
		if building == "" {
			building = "-"
		}
		gpus := fmt.Sprintf("%d/%d", m.FreeGPUs, m.GPUs)
		if m.GPUModel != "" {
			gpus += " " + m.GPUModel
		}
		eligible := "yes"
		if !m.Eligible {
			eligible = "no: " + cmp.Or(m.IneligibleReason, "unknown")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, building, m.State, m.Role, gpus,
			formatHazard(m.Hazard), formatBandwidth(m.Bandwidth), formatLending(m.Lending), m.Addr, m.KillSwitch, eligible)
	}
	tw.Flush()
}

// formatLending shows a node's lending in one cell: its state and the
// next planned reclaim or when it may be lent again, then its windows
// ("lent until 2026-03-03T07:00Z [Mon-Fri 19:00-08:00 (Europe/Berlin)]").
func formatLending(l *localapi.Lending) string {
	if l == nil {
		return "-"
	}
	s := l.State
	if s == "" {
		s = "-"
	}
	switch {
	case !l.Until.IsZero():
		s += " until " + l.Until.UTC().Format("2006-01-02T15:04Z")
	case !l.From.IsZero():
		s += " from " + l.From.UTC().Format("2006-01-02T15:04Z")
	}
	if l.Windows != "" {
		s += " [" + l.Windows + "]"
	}
	return s
}

// formatHazard shows a rate in 1/s as events per hour, the unit people
// read ("0.99/h").
func formatHazard(perSecond float64) string {
	if perSecond == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3g/h", perSecond*3600)
}

// formatBandwidth lists available bandwidth per destination building in
// Mbit/s.
func formatBandwidth(bw []localapi.BuildingBandwidth) string {
	if len(bw) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(bw))
	for _, b := range bw {
		parts = append(parts, fmt.Sprintf("%s:%.0fMb/s", b.Building, b.Available*8/1e6))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
