package owner

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// ErrBadConfig is wrapped by the errors Config.Policy returns.
var ErrBadConfig = errors.New("bad owner policy")

// Defaults of the owner policy.
const (
	// DefaultLead is how long before a window ends its reclaim is
	// announced: the jobs' notice.
	DefaultLead = 10 * time.Minute
	// DefaultIdle is how long the owner must have been idle before the
	// machine is lent again (HTCondor's StartIdleTime is 15 min too).
	DefaultIdle = 15 * time.Minute
	// DefaultMaxReclaimsPerHour caps activity reclaims, so an owner who
	// comes and goes does not make jobs hop every few minutes.
	DefaultMaxReclaimsPerHour = 3
	// DefaultCPUThreshold is the owner's CPU load, in cores, that counts
	// as use of the machine.
	DefaultCPUThreshold = 1.0
	// DefaultCPUFor is how long the load must stay above the threshold.
	DefaultCPUFor = 2 * time.Minute
	// DefaultGPUAction: a GPU the owner starts using cannot be shared, so
	// the guests get a short notice to checkpoint and move.
	DefaultGPUAction = "notice 2m"
)

// Kind is a kind of reason to stop lending.
type Kind string

const (
	// KindWindow: a lending window (or a lend --until) ends.
	KindWindow Kind = "window"
	// KindGPU: an owner process on a lent GPU.
	KindGPU Kind = "gpu"
	// KindInput: console input (keyboard, mouse, a login session).
	KindInput Kind = "input"
	// KindCPU: CPU load from the owner's processes.
	KindCPU Kind = "cpu"
	// KindOwner: the owner's own reclaimnet reclaim or lend.
	KindOwner Kind = "owner"
	// KindRate: the hourly cap on automatic reclaims.
	KindRate Kind = "rate"
)

// Action is what an activity kind does to lending: nothing, an emergency
// reclaim, or a reclaim with a notice.
type Action struct {
	// Now: reclaim at once (jobs stopped, recovered elsewhere).
	Now bool
	// Notice, when positive, is the notice of a scheduled reclaim.
	Notice time.Duration
}

// Off reports whether the action ignores its activity.
func (a Action) Off() bool { return !a.Now && a.Notice <= 0 }

// String writes the action as ParseAction reads it.
func (a Action) String() string {
	switch {
	case a.Now:
		return "now"
	case a.Notice > 0:
		return "notice " + a.Notice.String()
	}
	return "off"
}

// ParseAction reads "off", "now" or "notice DURATION" ("notice 2m").
func ParseAction(s string) (Action, error) {
	f := strings.Fields(strings.ToLower(s))
	switch {
	case len(f) == 1 && f[0] == "off":
		return Action{}, nil
	case len(f) == 1 && f[0] == "now":
		return Action{Now: true}, nil
	case len(f) == 2 && f[0] == "notice":
		d, err := time.ParseDuration(f[1])
		if err != nil || d <= 0 {
			return Action{}, fmt.Errorf("action %q: the notice must be a positive duration like 2m", s)
		}
		return Action{Notice: d}, nil
	}
	return Action{}, fmt.Errorf("action %q: want off, now or 'notice DURATION' (e.g. 'notice 2m')", s)
}

// Input sources a policy may use (Config.InputSource).
const (
	InputAuto    = "auto"
	InputDevices = "devices"
	InputLogind  = "logind"
)

// Config is the owner policy as the agent's flags and config file state
// it. Zero fields take the defaults; Policy validates and returns the
// policy without changing the Config.
type Config struct {
	// LendWindows are window specs (ParseWindow); none lends at all times.
	LendWindows []string `json:"lend_windows"`
	// LendTZ is the windows' IANA time zone; empty is the machine's.
	LendTZ string `json:"lend_tz"`
	// LendLead is the notice a window's end gives (default 10m).
	LendLead Duration `json:"lend_lead"`
	// GPU, Input and CPU map each activity to an action (ParseAction):
	// GPU defaults to DefaultGPUAction, Input and CPU to off.
	GPU   string `json:"gpu"`
	Input string `json:"input"`
	CPU   string `json:"cpu"`
	// InputSource picks where input activity is read: auto (the
	// default), devices or logind.
	InputSource string `json:"input_source"`
	// CPUThreshold is the owner's load, in cores, that counts as use
	// (default 1.0); CPUFor how long it must last (default 2m).
	CPUThreshold float64  `json:"cpu_threshold"`
	CPUFor       Duration `json:"cpu_for"`
	// Idle is how long the owner must have been idle before lending
	// again (default 15m).
	Idle Duration `json:"idle"`
	// MaxReclaimsPerHour caps activity reclaims (default 3).
	MaxReclaimsPerHour int `json:"max_reclaims_per_hour"`
}

// DefaultConfig is the policy of an owner who states nothing: lent at all
// times, taken back with a 2-minute notice when the owner uses a lent GPU.
func DefaultConfig() Config {
	return Config{
		LendLead:           Duration(DefaultLead),
		GPU:                DefaultGPUAction,
		Input:              "off",
		CPU:                "off",
		InputSource:        InputAuto,
		CPUThreshold:       DefaultCPUThreshold,
		CPUFor:             Duration(DefaultCPUFor),
		Idle:               Duration(DefaultIdle),
		MaxReclaimsPerHour: DefaultMaxReclaimsPerHour,
	}
}

// Policy validates the config and returns the policy it states.
func (c Config) Policy() (*Policy, error) {
	d := DefaultConfig()
	p := &Policy{
		Lead:               time.Duration(orDefault(c.LendLead, d.LendLead)),
		CPUThreshold:       c.CPUThreshold,
		CPUFor:             time.Duration(orDefault(c.CPUFor, d.CPUFor)),
		Idle:               time.Duration(orDefault(c.Idle, d.Idle)),
		MaxReclaimsPerHour: c.MaxReclaimsPerHour,
		InputSource:        c.InputSource,
	}
	if p.CPUThreshold == 0 {
		p.CPUThreshold = d.CPUThreshold
	}
	if p.MaxReclaimsPerHour == 0 {
		p.MaxReclaimsPerHour = d.MaxReclaimsPerHour
	}
	if p.InputSource == "" {
		p.InputSource = d.InputSource
	}
	var errs []error
	sched, err := ParseSchedule(c.LendWindows, c.LendTZ)
	if err != nil {
		errs = append(errs, err)
	}
	p.Schedule = sched
	for _, a := range []struct {
		name, spec, def string
		dst             *Action
	}{
		{"gpu", c.GPU, d.GPU, &p.GPU},
		{"input", c.Input, d.Input, &p.Input},
		{"cpu", c.CPU, d.CPU, &p.CPU},
	} {
		if a.spec == "" {
			a.spec = a.def
		}
		act, err := ParseAction(a.spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("owner %s: %w", a.name, err))
		}
		*a.dst = act
	}
	if p.Lead <= 0 {
		errs = append(errs, fmt.Errorf("lend lead %v: must be positive", p.Lead))
	}
	if p.Idle < 0 {
		errs = append(errs, fmt.Errorf("owner idle %v: must not be negative", p.Idle))
	}
	if p.CPUFor < 0 {
		errs = append(errs, fmt.Errorf("owner cpu for %v: must not be negative", p.CPUFor))
	}
	if p.CPUThreshold < 0 || math.IsNaN(p.CPUThreshold) || math.IsInf(p.CPUThreshold, 0) {
		errs = append(errs, fmt.Errorf("owner cpu threshold %v: want a positive number of cores", p.CPUThreshold))
	}
	if p.MaxReclaimsPerHour < 0 {
		errs = append(errs, fmt.Errorf("max reclaims per hour %d: must be positive", p.MaxReclaimsPerHour))
	}
	switch p.InputSource {
	case InputAuto, InputDevices, InputLogind:
	default:
		errs = append(errs, fmt.Errorf("input source %q: want auto, devices or logind", p.InputSource))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, errors.Join(errs...))
	}
	return p, nil
}

func orDefault(v, def Duration) Duration {
	if v == 0 {
		return def
	}
	return v
}

// Duration is a time.Duration that reads and writes "10m" in JSON and
// flags.
type Duration time.Duration

// String writes the duration as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// Set parses a duration ("10m"): Duration is a flag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes "10m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "10m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"10m\": %w", err)
	}
	return d.Set(s)
}
