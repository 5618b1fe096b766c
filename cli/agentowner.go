package cli

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/reclaimnet/reclaimnet/agent"
	"github.com/reclaimnet/reclaimnet/agent/owner"
)

// ownerFlags adds the owner policy's flags (docs/owner.md) to the agent's.
func ownerFlags(fs *pflag.FlagSet, fc *agent.Config) {
	o := &fc.Owner
	fs.StringArrayVar(&o.LendWindows, "lend-window", nil, "lending `window` in local time, e.g. 'Mon-Fri 19:00-08:00' or 'Sat,Sun' (repeatable; none: lent at all times)")
	fs.StringVar(&o.LendTZ, "lend-tz", "", "IANA time `zone` of the lending windows, e.g. Europe/Berlin (default: the machine's)")
	fs.Var((*ownerDuration)(&o.LendLead), "lend-lead", "notice a lending window's end gives the guests (default 10m)")
	fs.StringVar(&o.GPU, "owner-gpu", o.GPU, "`action` when an owner process uses a lent GPU: off, now or 'notice DURATION'")
	fs.StringVar(&o.Input, "owner-input", o.Input, "`action` on keyboard, mouse or login-session activity: off, now or 'notice DURATION'")
	fs.StringVar(&o.InputSource, "owner-input-source", o.InputSource, "where input is read: auto, devices (/dev/input) or logind")
	fs.StringVar(&o.CPU, "owner-cpu", o.CPU, "`action` on CPU load of processes that are not guests': off, now or 'notice DURATION'")
	fs.Float64Var(&o.CPUThreshold, "owner-cpu-threshold", o.CPUThreshold, "owner CPU load, in `cores`, that counts as use")
	fs.Var((*ownerDuration)(&o.CPUFor), "owner-cpu-for", "how long the owner's CPU load must stay above the threshold (default 2m)")
	fs.Var((*ownerDuration)(&o.Idle), "owner-idle", "how long the owner must be idle before the machine is lent again (default 15m)")
	fs.IntVar(&o.MaxReclaimsPerHour, "owner-max-reclaims", o.MaxReclaimsPerHour, "most automatic reclaims for owner activity in any hour")
	fs.StringVar(&fc.OnReclaim, "on-reclaim", fc.OnReclaim, "once a reclaim made the node leave: stay (up, reclaimed, until 'reclaimnet lend' or the next window) or exit (status 10)")
	fs.Var((*durationFlag)(&fc.OwnerCheck), "owner-check", "how often the owner policy looks at the machine (default 5s)")
}

// applyOwnerFlag copies one explicitly set owner flag from fc over cfg;
// false when name is not one of them.
func applyOwnerFlag(cfg, fc *agent.Config, name string) bool {
	o, f := &cfg.Owner, &fc.Owner
	switch name {
	case "lend-window":
		o.LendWindows = f.LendWindows
	case "lend-tz":
		o.LendTZ = f.LendTZ
	case "lend-lead":
		o.LendLead = f.LendLead
	case "owner-gpu":
		o.GPU = f.GPU
	case "owner-input":
		o.Input = f.Input
	case "owner-input-source":
		o.InputSource = f.InputSource
	case "owner-cpu":
		o.CPU = f.CPU
	case "owner-cpu-threshold":
		o.CPUThreshold = f.CPUThreshold
	case "owner-cpu-for":
		o.CPUFor = f.CPUFor
	case "owner-idle":
		o.Idle = f.Idle
	case "owner-max-reclaims":
		o.MaxReclaimsPerHour = f.MaxReclaimsPerHour
	case "on-reclaim":
		cfg.OnReclaim = fc.OnReclaim
	case "owner-check":
		cfg.OwnerCheck = fc.OwnerCheck
	default:
		return false
	}
	return true
}

// checkOwnerConfig reports a wrong owner policy as a usage error, naming
// every fault.
func checkOwnerConfig(cfg agent.Config) error {
	if _, err := cfg.Owner.Policy(); err != nil {
		return usagef("%v", err)
	}
	switch cfg.OnReclaim {
	case "", agent.OnReclaimStay, agent.OnReclaimExit:
	default:
		return usagef("--on-reclaim %q: want stay or exit", cfg.OnReclaim)
	}
	return nil
}

// ownerDuration is an owner.Duration flag ("10m").
type ownerDuration owner.Duration

func (d *ownerDuration) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}

func (d *ownerDuration) Type() string { return "duration" }

func (d *ownerDuration) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if x <= 0 {
		return fmt.Errorf("%v: must be positive", x)
	}
	*d = ownerDuration(x)
	return nil
}
