package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newReclaimCmd) }

// nowAgentTimeout bounds how long --now waits for the agent (it may be
// hung); the kill-switch was flipped before.
const nowAgentTimeout = 2 * time.Second

// reclaimOptions are 'reclaimnet reclaim's flags.
type reclaimOptions struct {
	dataDir, node, pinDir          string
	notice                         time.Duration
	noticeSet, now, status, cancel bool
	detach, asJSON                 bool
}

func newReclaimCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reclaim --notice DURATION | --now | --status | --cancel",
		Short: "take this machine back: scheduled (--notice), emergency (--now), --status, --cancel",
		Long: `Takes this machine back from the cluster.

--notice 60s   scheduled: the kill-switch goes soft (no new work), the reclaim is announced
               with its deadline, and the command follows it: each job's hand-off (or
               degraded recovery) and the bytes it has left, until the node leaves at the
               deadline whatever is happening (kill-switch hard, jobs stopped, leave
               announced); then it prints the owner's report. --detach returns once the
               reclaim is announced; Ctrl-C stops following, the reclaim goes on.
--status       progress per job that ran here; "complete" only once every one has stopped
               after handing off or being marked degraded. Once complete (or after the
               agent left) it prints the owner's report.
--cancel       withdraws the reclaim; the kill-switch goes back to off.
--now          emergency: first flips the pinned kill-switch hard by itself (works with the
               agent hung or gone), then asks the agent (2 s) to stop the jobs and leave
               without the graceful steps, and waits until it has (--detach: does not
               wait). Exits 1 if the agent did not answer, after doing what it could.`,
		GroupID: groupOwner,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected arguments %q", args)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	var o reclaimOptions
	dir := dataDirFlag(fs)
	fs.DurationVar(&o.notice, "notice", 0, "scheduled reclaim: time until the node leaves (at most 24h)")
	fs.BoolVar(&o.now, "now", false, "emergency reclaim: isolate and leave at once")
	fs.BoolVar(&o.status, "status", false, "show the reclaim's progress")
	fs.BoolVar(&o.cancel, "cancel", false, "withdraw the pending reclaim")
	fs.BoolVar(&o.detach, "detach", false, "with --notice or --now: return once the agent accepted, without following")
	fs.StringVar(&o.node, "node", "", "node `name` for the pinned kill-switch (--now; default: the agent's)")
	fs.StringVar(&o.pinDir, "pin-dir", "", "bpffs `directory` of the pinned kill-switch (--now)")
	fs.BoolVar(&o.asJSON, "json", false, "print JSON (following: one object a line, as the progress changes)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.dataDir = resolveDataDir(env, *dir)
		o.noticeSet = fs.Changed("notice")
		return runReclaim(cmd.Context(), env, o)
	}
	return cmd
}

func runReclaim(ctx context.Context, env *Env, o reclaimOptions) error {
	modes := 0
	for _, on := range []bool{o.noticeSet, o.now, o.status, o.cancel} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return usagef("give exactly one of --notice DURATION, --now, --status, --cancel")
	}
	if o.noticeSet && o.notice <= 0 {
		return usagef("--notice must be positive (use --now for an emergency)")
	}
	if o.noticeSet && o.notice > localapi.MaxReclaimNotice {
		return usagef("--notice %v: at most %v", o.notice, localapi.MaxReclaimNotice)
	}
	if o.node != "" && o.pinDir != "" {
		return usagef("give --node or --pin-dir, not both")
	}
	if o.detach && (o.status || o.cancel) {
		return usagef("--detach goes with --notice or --now")
	}
	switch {
	case o.now:
		return reclaimNow(ctx, env, o)
	case o.status:
		return reclaimStatus(ctx, env, o.dataDir, o.asJSON)
	case o.cancel:
		resp, err := callAgent(ctx, o.dataDir, localapi.Request{Op: localapi.OpReclaimCancel})
		if err != nil {
			return err
		}
		if o.asJSON {
			return printJSON(env.Stdout, resp.Reclaim)
		}
		fmt.Fprintf(env.Stdout, "reclaim cancelled; kill-switch %s\n", killSwitchWord(resp.Reclaim))
		return nil
	}
	resp, err := callAgent(ctx, o.dataDir, localapi.Request{Op: localapi.OpReclaim, Notice: o.notice})
	if err != nil {
		return err
	}
	st := resp.Reclaim
	if st.Reclaimed {
		return alreadyReclaimed(env.Stdout, st, o.asJSON)
	}
	if o.detach && o.asJSON {
		return printJSON(env.Stdout, st)
	}
	if o.asJSON {
		printJSONLine(env.Stdout, st)
	} else {
		fmt.Fprintf(env.Stdout, "reclaim of %s announced: the node leaves at %s (in %s)\n",
			st.Node, st.Deadline.UTC().Format(time.RFC3339), o.notice.Round(time.Second))
		fmt.Fprintf(env.Stdout, "kill-switch %s; %d job(s) to hand off\n", killSwitchWord(st), len(st.Jobs))
	}
	if o.detach {
		fmt.Fprintln(env.Stdout, "follow with 'reclaimnet reclaim --status'")
		return nil
	}
	return followReclaim(ctx, env, o.dataDir, o.asJSON)
}

// alreadyReclaimed answers a reclaim of a node that is out of the cluster
// already: nothing runs there; the owner's reclaim now also holds it back
// from its next lending window.
func alreadyReclaimed(w io.Writer, st *localapi.ReclaimStatus, asJSON bool) error {
	if asJSON {
		return printJSON(w, st)
	}
	fmt.Fprintf(w, "%s is already reclaimed (out of the cluster, no jobs); it stays so until 'reclaimnet lend'\n", st.Node)
	return nil
}

func killSwitchWord(st *localapi.ReclaimStatus) string {
	if st == nil || !st.Enforcement {
		return "not enforced (kernel enforcement is off on this node)"
	}
	return st.KillSwitch
}

func reclaimStatus(ctx context.Context, env *Env, dataDir string, asJSON bool) error {
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpReclaimStatus})
	if err != nil {
		if !errors.Is(err, localapi.ErrNoAgent) {
			return err
		}
		// The agent left (the deadline) or never ran: the stored report.
		rep, rerr := localapi.ReadReport(dataDir)
		if rerr != nil || rep == nil {
			return err
		}
		if asJSON {
			return printJSON(env.Stdout, localapi.ReclaimStatus{Node: rep.Node, Complete: true, Report: rep})
		}
		fmt.Fprintf(env.Stdout, "the agent has left; last reclaim:\n")
		printReport(env.Stdout, rep)
		return nil
	}
	st := resp.Reclaim
	if asJSON {
		return printJSON(env.Stdout, st)
	}
	w := env.Stdout
	if st.Reclaimed {
		fmt.Fprintf(w, "%s is reclaimed: out of the cluster until 'reclaimnet lend' (or its next lending window)\n", st.Node)
		if st.Report != nil {
			fmt.Fprintln(w, "last reclaim:")
			printReport(w, st.Report)
		}
		return nil
	}
	if !st.Active {
		fmt.Fprintf(w, "no reclaim under way on %s\n", st.Node)
		if st.Report != nil {
			fmt.Fprintln(w, "last reclaim:")
			printReport(w, st.Report)
		}
		return nil
	}
	state := "in progress"
	if st.Complete {
		state = "complete"
	}
	fmt.Fprintf(w, "reclaim of %s: %s; the node leaves at %s (in %s)\n", st.Node, state,
		st.Deadline.UTC().Format(time.RFC3339), max(time.Until(st.Deadline), 0).Round(time.Second))
	if len(st.Jobs) == 0 {
		fmt.Fprintln(w, "  no jobs ran here")
	}
	for _, j := range st.Jobs {
		fmt.Fprintf(w, "  %-20s %s\n", j.Job, j.Detail)
	}
	if st.Complete && st.Report != nil {
		printReport(w, st.Report)
	}
	return nil
}

func printReport(w io.Writer, rep *localapi.ReclaimReport) {
	kind := "scheduled"
	if rep.Emergency {
		kind = "emergency"
	}
	fmt.Fprintf(w, "owner's report (%s reclaim of %s, %s):\n", kind, rep.Node, rep.Announced.UTC().Format(time.RFC3339))
	if rep.Reason != "" {
		fmt.Fprintf(w, "  why:               %s\n", rep.Reason)
	}
	if rep.Isolated {
		fmt.Fprintf(w, "  time to isolate:   %s (kill-switch flip)\n", rep.Isolate)
	} else {
		fmt.Fprintf(w, "  time to isolate:   - (kernel enforcement off: nothing isolated)\n")
	}
	fmt.Fprintf(w, "  jobs moved:        %d %s\n", len(rep.Moved), strings.Join(rep.Moved, " "))
	for _, d := range rep.Downtimes {
		switch {
		case d.Downtime == 0:
			fmt.Fprintf(w, "    %-16s down until its start on the new node (not recorded yet)", d.Job)
		default:
			fmt.Fprintf(w, "    %-16s down %s", d.Job, d.Downtime.Round(time.Millisecond))
		}
		if d.Limit > 0 {
			fmt.Fprintf(w, " (limit %s)", d.Limit.Round(time.Millisecond))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  jobs degraded:     %d %s\n", len(rep.Degraded), strings.Join(rep.Degraded, " "))
	if len(rep.Finished) > 0 {
		fmt.Fprintf(w, "  jobs finished:     %d %s\n", len(rep.Finished), strings.Join(rep.Finished, " "))
	}
	fmt.Fprintf(w, "  bytes sent:        %d\n", rep.BytesSent)
	fmt.Fprintf(w, "  machine used for:  %s after the command\n", rep.UsedFor.Round(time.Millisecond))
	if rep.LendingAfter != "" {
		again := "only by 'reclaimnet lend'"
		if !rep.LendableFrom.IsZero() {
			again = "from " + rep.LendableFrom.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  afterwards:        %s; lendable again %s\n", rep.LendingAfter, again)
	}
}

// reclaimNow is the emergency: the kill-switch first, by this process,
// then the agent with a short timeout.
func reclaimNow(ctx context.Context, env *Env, o reclaimOptions) error {
	dataDir, node, pinDir, asJSON := o.dataDir, o.node, o.pinDir, o.asJSON
	start := time.Now()
	w := env.Stdout
	if b, err := os.ReadFile(filepath.Join(dataDir, localapi.InfoFile)); err == nil {
		var info localapi.Info
		if json.Unmarshal(b, &info) == nil {
			if info.Storage {
				// Isolating it would cut every job's copies off; it is
				// never lent, so there is nothing to take back.
				return errors.New("this is a storage node (agent --role storage): it is never lent, so it cannot be reclaimed")
			}
			if node == "" && pinDir == "" {
				node = info.Node
			}
		}
	}
	isolate, isolated := time.Duration(0), false
	dir, err := killSwitchPinDir(node, pinDir)
	if err == nil {
		var maps *bpf.Maps
		maps, err = bpf.OpenPinned(dir)
		if err == nil {
			err = maps.SetKillSwitch(bpf.ModeHard)
			maps.Close()
			if err == nil {
				isolate, isolated = time.Since(start), true
				fmt.Fprintf(w, "kill-switch hard at %s (%s after the command)\n", dir, isolate)
			}
		}
	}
	switch {
	case isolated:
	case errors.Is(err, bpf.ErrNotPinned):
		fmt.Fprintf(w, "kernel enforcement is off (no pinned kill-switch: %v): nothing to isolate; continuing\n", err)
	default:
		fmt.Fprintf(env.Stderr, "kill-switch: %v; continuing\n", err)
	}

	actx, cancel := context.WithTimeout(ctx, nowAgentTimeout)
	defer cancel()
	resp, err := localapi.Call(actx, dataDir, localapi.Request{Op: localapi.OpReclaimNow})
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		return fmt.Errorf("the agent did not stop the jobs (%w); the kill-switch step above is all that was done", err)
	}
	st := resp.Reclaim
	if st.Reclaimed {
		return alreadyReclaimed(w, st, asJSON)
	}
	rep := st.Report
	if rep == nil {
		rep = &localapi.ReclaimReport{Node: st.Node, Emergency: true, Announced: start}
	}
	if isolated {
		rep.Isolate, rep.Isolated = isolate, true
	}
	if o.detach {
		if asJSON {
			return printJSON(w, st)
		}
		fmt.Fprintf(w, "agent accepted the emergency; it stops its %d job(s) and leaves without waiting for the cluster\n", len(st.Jobs))
		return nil
	}
	// The jobs run until the agent has stopped them and exited (it removes
	// its info file last): that is how long the machine was still used.
	deadline := time.Now().Add(60 * time.Second)
	gone := false
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dataDir, localapi.InfoFile)); errors.Is(err, os.ErrNotExist) {
			gone = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rep.UsedFor = time.Since(start)
	if asJSON {
		return printJSON(w, rep)
	}
	if gone {
		fmt.Fprintf(w, "agent stopped its %d job(s) and left without waiting for the cluster\n", len(st.Jobs))
	} else {
		fmt.Fprintf(w, "agent accepted the emergency but had not exited after 60s (jobs may still be stopping)\n")
	}
	printReport(w, rep)
	return nil
}
