package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/localapi"
)

func init() { register(newLendCmd) }

// lendOptions are 'reclaimnet lend's flags.
type lendOptions struct {
	dataDir, until string
	status, asJSON bool
}

func newLendCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lend [--until WHEN] | --status",
		Short: "lend this machine to the cluster now, or show the owner policy in force (--status)",
		Long: `Lends this machine to the cluster on the owner's say-so.

(no flag)      lend now: after a reclaim it withdraws the reclaim, turns the kill-switch off
               and the node rejoins the cluster; then the lending windows apply from here
               (until the current window ends or, outside the windows, until the next one
               ends). It clears the hourly cap on automatic reclaims, and the owner's own
               input and CPU load do not take the machine back until they have been idle
               once (their GPU processes still do).
--until WHEN   lend until WHEN too: 18:00, 'Fri 18:00', 3h or an RFC 3339 time. It adds to
               the windows and never shortens one; an end within the lead time is refused.
--status       the owner policy in force, whether the machine is lent and why, the next
               planned reclaim (and its notice) or when lending may resume.

'reclaimnet reclaim' overrides all of it at once.`,
		GroupID: groupOwner,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected arguments %q", args)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	var o lendOptions
	dir := dataDirFlag(fs)
	fs.StringVar(&o.until, "until", "", "lend until `WHEN`: 18:00, 'Fri 18:00', 3h or an RFC 3339 time")
	fs.BoolVar(&o.status, "status", false, "show the owner policy, the lending state and what comes next")
	fs.BoolVar(&o.asJSON, "json", false, "print the lending status as JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.dataDir = resolveDataDir(env, *dir)
		if o.status && fs.Changed("until") {
			return usagef("--status and --until do not go together")
		}
		if fs.Changed("until") && o.until == "" {
			return usagef("--until needs a time: 18:00, 'Fri 18:00', 3h or an RFC 3339 time")
		}
		// The syntax does not depend on the agent's time zone (the agent
		// reads the time in its policy's): a wrong one is the command
		// line's fault.
		if p, err := (owner.Config{}).Policy(); err == nil && o.until != "" {
			if _, err := p.ParseUntil(o.until, time.Now()); err != nil {
				return usagef("--until: %v", err)
			}
		}
		return runLend(cmd.Context(), env, o)
	}
	return cmd
}

func runLend(ctx context.Context, env *Env, o lendOptions) error {
	req := localapi.Request{Op: localapi.OpLend, Until: o.until}
	if o.status {
		req = localapi.Request{Op: localapi.OpLendStatus}
	}
	resp, err := callAgent(ctx, o.dataDir, req)
	if err != nil {
		return err
	}
	var st owner.Status
	if len(resp.Lend) == 0 {
		return fmt.Errorf("the agent sent no lending status")
	}
	if err := json.Unmarshal(resp.Lend, &st); err != nil {
		return fmt.Errorf("the agent's lending status: %w", err)
	}
	if o.asJSON {
		return printJSON(env.Stdout, st)
	}
	if !o.status {
		fmt.Fprintln(env.Stdout, "lent; the node rejoins the cluster if it was reclaimed")
	}
	fmt.Fprint(env.Stdout, st.String())
	return nil
}
