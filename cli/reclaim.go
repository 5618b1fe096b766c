package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() {
	register(&command{
		name:     "reclaim",
		synopsis: "take this machine back: scheduled (--notice), emergency (--now), --status, --cancel",
		usage: `reclaimnet reclaim --notice DURATION | --now | --status | --cancel
    [--data-dir DIR] [--node NAME | --pin-dir DIR] [--json]

--notice 60s   scheduled: the kill-switch goes soft (no new work), the
               reclaim is announced with its deadline and the command returns
               at once. The cluster hands the jobs off (or marks them for
               degraded recovery); at the deadline the node leaves whatever
               is happening: kill-switch hard, jobs stopped, leave announced.
--status       progress per job that ran here; "complete" only once every one
               has stopped after handing off or being marked degraded. Once
               complete (or after the agent left) it prints the owner's report.
--cancel       withdraws the reclaim; the kill-switch goes back to off.
--now          emergency: first flips the pinned kill-switch hard by itself
               (works with the agent hung or gone), then asks the agent (2 s)
               to stop the jobs and leave without the graceful steps. Exits 1
               if the agent did not answer, after doing what it could.`,
		run: runReclaim,
	})
}

// nowAgentTimeout bounds how long --now waits for the agent (it may be
// hung); the kill-switch was flipped before.
const nowAgentTimeout = 2 * time.Second

func runReclaim(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "reclaim")
	dir := dataDirFlag(fs)
	notice := fs.Duration("notice", 0, "scheduled reclaim: time until the node leaves")
	now := fs.Bool("now", false, "emergency reclaim: isolate and leave at once")
	status := fs.Bool("status", false, "show the reclaim's progress")
	cancelFlag := fs.Bool("cancel", false, "withdraw the pending reclaim")
	node := fs.String("node", "", "node name for the pinned kill-switch (--now; default: the agent's)")
	pinDir := fs.String("pin-dir", "", "bpffs directory of the pinned kill-switch (--now)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	modes := 0
	noticeSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "notice" {
			noticeSet = true
		}
	})
	for _, on := range []bool{noticeSet, *now, *status, *cancelFlag} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return usagef("give exactly one of --notice DURATION, --now, --status, --cancel")
	}
	if noticeSet && *notice <= 0 {
		return usagef("--notice must be positive (use --now for an emergency)")
	}
	if *node != "" && *pinDir != "" {
		return usagef("give --node or --pin-dir, not both")
	}
	dataDir := resolveDataDir(env, *dir)
	switch {
	case *now:
		return reclaimNow(ctx, env, dataDir, *node, *pinDir, *asJSON)
	case *status:
		return reclaimStatus(ctx, env, dataDir, *asJSON)
	case *cancelFlag:
		resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpReclaimCancel})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.Stdout, resp.Reclaim)
		}
		fmt.Fprintf(env.Stdout, "reclaim cancelled; kill-switch %s\n", killSwitchWord(resp.Reclaim))
		return nil
	}
	resp, err := callAgent(ctx, dataDir, localapi.Request{Op: localapi.OpReclaim, Notice: *notice})
	if err != nil {
		return err
	}
	st := resp.Reclaim
	if *asJSON {
		return printJSON(env.Stdout, st)
	}
	fmt.Fprintf(env.Stdout, "reclaim of %s announced: the node leaves at %s (in %s)\n",
		st.Node, st.Deadline.UTC().Format(time.RFC3339), notice.Round(time.Second))
	fmt.Fprintf(env.Stdout, "kill-switch %s; %d job(s) to hand off; follow with 'reclaimnet reclaim --status'\n",
		killSwitchWord(st), len(st.Jobs))
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
	if rep.Isolated {
		fmt.Fprintf(w, "  time to isolate:   %s (kill-switch flip)\n", rep.Isolate)
	} else {
		fmt.Fprintf(w, "  time to isolate:   - (kernel enforcement off: nothing isolated)\n")
	}
	fmt.Fprintf(w, "  jobs moved:        %d %s\n", len(rep.Moved), strings.Join(rep.Moved, " "))
	fmt.Fprintf(w, "  jobs degraded:     %d %s\n", len(rep.Degraded), strings.Join(rep.Degraded, " "))
	if len(rep.Finished) > 0 {
		fmt.Fprintf(w, "  jobs finished:     %d %s\n", len(rep.Finished), strings.Join(rep.Finished, " "))
	}
	fmt.Fprintf(w, "  bytes sent:        %d\n", rep.BytesSent)
	fmt.Fprintf(w, "  machine used for:  %s after the command\n", rep.UsedFor.Round(time.Millisecond))
}

// reclaimNow is the emergency: the kill-switch first, by this process,
// then the agent with a short timeout.
func reclaimNow(ctx context.Context, env *Env, dataDir, node, pinDir string, asJSON bool) error {
	start := time.Now()
	w := env.Stdout
	if node == "" && pinDir == "" {
		if b, err := os.ReadFile(filepath.Join(dataDir, localapi.InfoFile)); err == nil {
			var info localapi.Info
			if json.Unmarshal(b, &info) == nil {
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
	rep := st.Report
	if rep == nil {
		rep = &localapi.ReclaimReport{Node: st.Node, Emergency: true, Announced: start}
	}
	if isolated {
		rep.Isolate, rep.Isolated = isolate, true
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
