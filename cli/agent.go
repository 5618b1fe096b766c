package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reclaimnet/reclaimnet/agent"
	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/state"
)

func init() { register(newAgentCmd) }

// agentOptions are the agent's flags that are not Config fields.
type agentOptions struct {
	configPath, protocols, logLevel, logFormat, printConfig string
}

// Log formats of --log-format.
const (
	logText = "text"
	logJSON = "json"
)

func newAgentCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "run the node agent (gossip, coordinator, control socket, status page)",
		Long: `Runs one node until SIGINT or SIGTERM, then leaves the cluster gracefully and exits 0. A
reclaim of the node (its deadline, or --now) makes it leave too; the agent then stays up,
reclaimed: out of the cluster, kill-switch hard, no guests, until the owner lends it again
('reclaimnet lend') or the next lending window opens. With --on-reclaim exit it exits 10
instead, so that a service manager does not restart it (starting it again lends it).

The owner's policy (docs/owner.md) says when the machine is lent and what takes it back:
lending windows (--lend-window 'Mon-Fri 19:00-08:00' --lend-window 'Sat,Sun', --lend-tz),
announced --lend-lead before a window ends as 'reclaim --notice' would; owner activity
(--owner-gpu, --owner-input, --owner-cpu: off, now or 'notice 2m'); lent again only after the
owner is idle --owner-idle, with at most --owner-max-reclaims automatic reclaims an hour.
--dev runs a complete throwaway node: temporary data
dir, generated gossip key and CA, loopback addresses, and one fake GPU "dev-gpu" unless --gpu
declares some. Flags override the --config file (JSON or HCL, chosen by the file's extension;
'reclaimnet agent --print-config=hcl' prints every option with its value).

Kernel enforcement (BPF programs on --iface: rate ceilings per transfer, traffic classes,
the kill-switch, measured bandwidth per building):
  --enforce auto  on when running as root (or with CAP_BPF and CAP_NET_ADMIN), the node is
                  not bound to loopback and the programs attach; otherwise off, with the
                  reason in the log, on the status page and at /v1/enforce
  --enforce on    failing to enforce is a fatal start-up error
  --enforce off   never load the programs

Protocols (--protocols): the leader decides with its own list, for the whole cluster, so
start every agent with the same one (a node whose list differs warns in its log, and
'reclaimnet status' shows what is in force).
  p1 off  every job checkpoints every --fixed-interval
  p2 off  destinations are chosen at random among the feasible ones
  p3 off  no admission, transfers unpaced, no kernel rate ceilings

Guest jobs run in a sandbox (docs/sandbox.md): their own uid from --guest-uids, their own
cgroup under the node's caps (--guest-memory, --guest-cpus), a mount namespace that shows
the host's system directories read-only, the job's own directories and the --guest-ro-path
ones, never the agent's data dir, keys or control socket. Where confinement cannot be set up
(no root, no cgroups) the node refuses jobs and says why in the log, on the page and in
'reclaimnet status'. --sandbox off runs jobs unconfined, as the agent's user: for a single
trusted lab only; it is logged and shown too.`,
		GroupID: groupNode,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fc := agent.DefaultConfig()
	fc.Name = "" // the host name; not shown as the flag's default
	var o agentOptions
	fs.StringVar(&o.configPath, "config", "", "config `file` (.json or .hcl); flags override it")
	fs.StringVar(&fc.Name, "name", fc.Name, "node `name`, unique in the cluster (default: the host name)")
	fs.StringVar(&fc.DataDir, "data-dir", fc.DataDir, "state `directory` (lock, control socket, Raft log, checkpoints)")
	fs.StringVar(&fc.BindAddr, "bind", fc.BindAddr, "`address` gossip, Raft and transfers listen on")
	fs.StringVar(&fc.AdvertiseAddr, "advertise", fc.AdvertiseAddr, "`address` peers use to reach this node (default: --bind)")
	fs.StringVar(&fc.Building, "building", fc.Building, "`name` of the building this node is in")
	fs.StringVar(&fc.Lab, "lab", fc.Lab, "failure domain `name` this node shares besides its building, e.g. a lab's room (a prior of which nodes leave together)")
	fs.StringVar(&fc.Pool, "pool", fc.Pool, "another failure domain `name`, e.g. a spot pool or a power circuit")
	fs.StringVar(&fc.Role, "role", fc.Role, "node `role`: worker (lends GPUs, hosts jobs) or storage (keeps checkpoints only: hosts no jobs, never lent or reclaimed, preferred as a holder)")
	fs.StringArrayVar(&fc.Join, "join", nil, "`peer` to join, host or host:port (repeatable)")
	fs.StringArrayVar(&fc.GPUs, "gpu", nil, "declare GPUs, `spec` MODEL:VRAM:CAP[:xN], e.g. A100-80GB:80GiB:8.0:x4 (repeatable; default: discover)")
	fs.IntVar(&fc.GossipPort, "gossip-port", fc.GossipPort, "gossip port (TCP and UDP)")
	fs.IntVar(&fc.RaftPort, "raft-port", fc.RaftPort, "Raft port (TCP)")
	fs.IntVar(&fc.TransferPort, "transfer-port", fc.TransferPort, "checkpoint transfer port (QUIC, UDP)")
	fs.StringVar(&fc.HTTPAddr, "http", fc.HTTPAddr, "`address` of the status page, /v1 and /metrics (empty: off)")
	fs.StringVar(&fc.GossipKey, "gossip-key", fc.GossipKey, "base64 gossip `key` (reclaimnet keygen); visible in the process list, prefer --gossip-key-file")
	fs.StringVar(&fc.GossipKeyFile, "gossip-key-file", fc.GossipKeyFile, "`file` holding the base64 gossip key (reclaimnet keygen > FILE; chmod 600)")
	fs.StringVar(&fc.TLSDir, "tls-dir", fc.TLSDir, "`directory` with ca.pem, node.pem, node-key.pem (default with --bootstrap or --token: DATA_DIR/tls)")
	fs.BoolVar(&fc.Bootstrap, "bootstrap", false, "start a new cluster: the first start creates its CA, this node's certificate and the gossip key (0600) in the data dir")
	fs.StringVar(&fc.Token, "token", "", "join `token` ('reclaimnet token create'): the first start enrolls through --join PEER, a member's coordinator address (host[:7947])")
	fs.StringSliceVar(&fc.Owners, "owners", nil, "owners of this machine, who may reclaim it and flip its kill-switch: user `names`, or %group (comma-separated); root and the agent's user always are")
	fs.StringSliceVar(&fc.Admins, "admins", nil, "cluster admins on this node: user `names`, or %group (comma-separated); root and the agent's user always are")
	fs.StringVar(&fc.Enforce, "enforce", fc.Enforce, "kernel enforcement `mode`: auto, on or off")
	fs.StringVar(&fc.Iface, "iface", fc.Iface, "`interface` the kernel programs attach to (default: the one holding the advertise or bind address)")
	fs.Var(&fc.LinkCapacity, "link-capacity", "this node's access link capacity, e.g. 1Gbit, 10Gbit, 125MB (bytes/s)")
	fs.StringVar(&fc.BPFPinDir, "bpf-pin-dir", fc.BPFPinDir, "bpffs `directory` for the pinned maps (default /sys/fs/bpf/reclaimnet/NAME)")
	fs.Var(&fc.CacheSize, "cache-size", "checkpoint store size cap under the data dir, e.g. 500GiB (also the receiver's disk quota)")
	fs.BoolVar(&fc.LocalTimings, "local-timings", fc.LocalTimings, "fast gossip and Raft timings for clusters on one machine (tests)")
	fs.Func("fixed-load", "report this `load` (0..1 per CPU) instead of the host's load average: for campuses simulated on one machine", func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Errorf("want a non-negative number, e.g. 0.1")
		}
		fc.FixedLoad = &x
		return nil
	})
	fs.BoolVar(&fc.Dev, "dev", fc.Dev, "run a throwaway single node on loopback")
	fs.StringVar(&o.protocols, "protocols", fc.Protocols, "comma-separated `list` of the protocols on when this node leads: p1 (checkpoint interval), p2 (destination choice), p3 (traffic admission); empty or none: all off")
	fs.Var(durationFlag(&fc.RaftHeartbeat), "raft-heartbeat", "Raft heartbeat and election timeout; the leader lease is half (default 1s, 50ms with --local-timings)")
	fs.Var(durationFlag(&fc.FixedInterval), "fixed-interval", "every job's checkpoint interval while p1 is off")
	fs.Var(&fc.UplinkCapacity, "uplink-capacity", "building uplink capacities when this node leads: RATE for every building or BUILDING=RATE[,...] (repeatable; undeclared: 10Gbit assumed; give every agent the same)")
	fs.Var(&fc.Bmin, "bmin", "least bandwidth kept for other traffic on every link when this node leads, e.g. 10Mbit (the reservation is the larger of 30 % of the link and this)")
	fs.StringVar(&fc.Sandbox, "sandbox", "on", "guest jobs confined (on) or unconfined as the agent's user (off: a single trusted lab only)")
	fs.StringVar(&fc.GuestUIDs, "guest-uids", "2100000000-2100000999", "uid and gid `range` guest jobs run as, FIRST-LAST (no passwd entries needed)")
	fs.Var(&fc.GuestMemory, "guest-memory", "memory cap on all guest jobs together, e.g. 64GiB (default: three quarters of the machine's)")
	fs.Float64Var(&fc.GuestCPUs, "guest-cpus", 0, "CPU cap on all guest jobs together, in CPUs (default: none)")
	fs.StringArrayVar(&fc.GuestROPaths, "guest-ro-path", nil, "host `path` every guest job sees read-only, e.g. /datasets (repeatable)")
	ownerFlags(fs, &fc)
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", logText, "log line `format`: text (key=value) or json (one object a line)")
	fs.StringVar(&o.printConfig, "print-config", "", "print every option with its effective value, in `format` json or hcl, and exit")
	fs.Lookup("print-config").NoOptDefVal = agent.FormatJSON
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := agentConfig(fs, &fc, o)
		if err != nil {
			return err
		}
		if o.printConfig != "" {
			b, err := agent.MarshalConfig(cfg, o.printConfig)
			if err != nil {
				return err
			}
			_, err = env.Stdout.Write(b)
			return err
		}
		logger, err := newLogger(env.Stderr, o.logLevel, o.logFormat)
		if err != nil {
			return err
		}
		return runAgent(cmd.Context(), env, cfg, logger)
	}
	return cmd
}

// agentConfig checks the flags and builds the configuration: the defaults,
// the config file over them, the flags given over both.
func agentConfig(fs *pflag.FlagSet, fc *agent.Config, o agentOptions) (agent.Config, error) {
	switch fc.Enforce {
	case enforce.ModeAuto, enforce.ModeOn, enforce.ModeOff:
	default:
		return agent.Config{}, usagef("--enforce %q: want auto, on or off", fc.Enforce)
	}
	switch fc.Sandbox {
	case "on", "off":
	default:
		return agent.Config{}, usagef("--sandbox %q: want on or off", fc.Sandbox)
	}
	if o.printConfig != "" && !slices.Contains(agent.ConfigFormats, o.printConfig) {
		return agent.Config{}, usagef("--print-config=%s: want %s", o.printConfig, strings.Join(agent.ConfigFormats, " or "))
	}
	if _, err := state.ParseProtocols(o.protocols); err != nil {
		return agent.Config{}, usagef("--protocols: %v", err)
	}
	fc.Protocols = strings.TrimSpace(o.protocols)
	if fc.Protocols == "" {
		fc.Protocols = "none" // the flag's empty list: all off (the config's empty means all on)
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return agent.Config{}, err
	}
	if o.logFormat != logText && o.logFormat != logJSON {
		return agent.Config{}, usagef("--log-format %q: want text or json", o.logFormat)
	}
	cfg := agent.DefaultConfig()
	if o.configPath != "" {
		var err error
		if cfg, err = agent.LoadConfigFile(o.configPath, cfg); err != nil {
			return agent.Config{}, err
		}
	}
	fs.Visit(func(f *pflag.Flag) {
		if !applyOwnerFlag(&cfg, fc, f.Name) {
			applyAgentFlag(&cfg, fc, f.Name)
		}
	})
	if cfg.Dev {
		devDefaults(&cfg, fs)
	}
	if err := checkOwnerConfig(cfg); err != nil {
		return agent.Config{}, err
	}
	return cfg, nil
}

func runAgent(ctx context.Context, env *Env, cfg agent.Config, logger *slog.Logger) error {
	agent.Version = Version
	err := agent.Serve(ctx, cfg, logger, func(a *agent.Agent, info localapi.Info) {
		if cfg.Dev {
			fmt.Fprintf(env.Stdout, "ReclaimNet dev agent %q is running (Ctrl-C stops it and deletes its state).\n", info.Node)
		} else {
			fmt.Fprintf(env.Stdout, "ReclaimNet agent %q is running.\n", info.Node)
		}
		if info.HTTPAddr != "" {
			fmt.Fprintf(env.Stdout, "  status page: http://%s/v1/status\n  metrics:     http://%s/metrics\n", info.HTTPAddr, info.HTTPAddr)
		}
		fmt.Fprintf(env.Stdout, "  gossip:      %s\n  data dir:    %s\n", info.GossipAddr, a.DataDir())
		fmt.Fprintf(env.Stdout, "In another terminal:\n  export %s=%s\n  reclaimnet members\n", DataDirEnv, a.DataDir())
	})
	if errors.Is(err, agent.ErrReclaimed) {
		return errReclaimed
	}
	return err
}

func parseLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return level, nil
}

// newLogger is the agent's logger: text (key=value) or JSON lines on w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	l, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == logJSON {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// applyAgentFlag copies one explicitly set flag from fc over cfg.
func applyAgentFlag(cfg, fc *agent.Config, name string) {
	switch name {
	case "name":
		cfg.Name = fc.Name
	case "data-dir":
		cfg.DataDir = fc.DataDir
	case "bind":
		cfg.BindAddr = fc.BindAddr
	case "advertise":
		cfg.AdvertiseAddr = fc.AdvertiseAddr
	case "building":
		cfg.Building = fc.Building
	case "role":
		cfg.Role = fc.Role
	case "lab":
		cfg.Lab = fc.Lab
	case "pool":
		cfg.Pool = fc.Pool
	case "join":
		cfg.Join = fc.Join
	case "gpu":
		cfg.GPUs = fc.GPUs
	case "gossip-port":
		cfg.GossipPort = fc.GossipPort
	case "raft-port":
		cfg.RaftPort = fc.RaftPort
	case "transfer-port":
		cfg.TransferPort = fc.TransferPort
	case "http":
		cfg.HTTPAddr = fc.HTTPAddr
	case "gossip-key":
		cfg.GossipKey = fc.GossipKey
	case "gossip-key-file":
		cfg.GossipKeyFile = fc.GossipKeyFile
	case "tls-dir":
		cfg.TLSDir = fc.TLSDir
	case "bootstrap":
		cfg.Bootstrap = fc.Bootstrap
	case "token":
		cfg.Token = fc.Token
	case "admins":
		cfg.Admins = fc.Admins
	case "owners":
		cfg.Owners = fc.Owners
	case "enforce":
		cfg.Enforce = fc.Enforce
	case "iface":
		cfg.Iface = fc.Iface
	case "link-capacity":
		cfg.LinkCapacity = fc.LinkCapacity
	case "bpf-pin-dir":
		cfg.BPFPinDir = fc.BPFPinDir
	case "cache-size":
		cfg.CacheSize = fc.CacheSize
	case "local-timings":
		cfg.LocalTimings = fc.LocalTimings
	case "fixed-load":
		cfg.FixedLoad = fc.FixedLoad
	case "raft-heartbeat":
		cfg.RaftHeartbeat = fc.RaftHeartbeat
	case "dev":
		cfg.Dev = fc.Dev
	case "protocols":
		cfg.Protocols = fc.Protocols
	case "fixed-interval":
		cfg.FixedInterval = fc.FixedInterval
	case "uplink-capacity":
		cfg.UplinkCapacity = fc.UplinkCapacity
	case "bmin":
		cfg.Bmin = fc.Bmin
	case "sandbox":
		cfg.Sandbox = fc.Sandbox
	case "guest-uids":
		cfg.GuestUIDs = fc.GuestUIDs
	case "guest-memory":
		cfg.GuestMemory = fc.GuestMemory
	case "guest-cpus":
		cfg.GuestCPUs = fc.GuestCPUs
	case "guest-ro-path":
		cfg.GuestROPaths = fc.GuestROPaths
	}
}

// positiveDuration is a flag over any duration type of the config files
// (agent.Duration, owner.Duration): "10m", and positive.
type positiveDuration[D ~int64] struct{ p *D }

func durationFlag[D ~int64](p *D) positiveDuration[D] { return positiveDuration[D]{p} }

func (d positiveDuration[D]) String() string {
	if d.p == nil || *d.p == 0 {
		return "0"
	}
	return time.Duration(*d.p).String()
}

func (d positiveDuration[D]) Type() string { return "duration" }

func (d positiveDuration[D]) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if x <= 0 {
		return fmt.Errorf("%v: must be positive", x)
	}
	*d.p = D(x)
	return nil
}

// devDefaults: loopback and a temporary data dir unless flags said
// otherwise.
func devDefaults(cfg *agent.Config, fs *pflag.FlagSet) {
	if !fs.Changed("bind") {
		cfg.BindAddr = "127.0.0.1"
	}
	if !fs.Changed("data-dir") {
		cfg.DataDir = "" // agent makes a temporary one
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if len(cfg.GPUs) == 0 {
		// One fake GPU, named so, lets a newcomer's first run place a job
		// on a machine without one (--gpu declares real ones instead).
		cfg.GPUs = []string{DevGPU}
	}
}

// runEnroll is 'join PEER --token T': the agent's first start-up step with
// a token (enrollment into its data dir), taken without starting it, so it
// lives with the agent command, the one that links the node.
func runEnroll(ctx context.Context, env *Env, dataDir string, o joinOptions, peers []string) error {
	if _, err := localapi.Call(ctx, dataDir, localapi.Request{Op: localapi.OpStatus}); err == nil {
		return fmt.Errorf("an agent runs with data dir %s and keeps the identity it has; join by token before it starts, or give another --data-dir", dataDir)
	}
	cfg := agent.DefaultConfig()
	cfg.DataDir, cfg.Token, cfg.Join = dataDir, o.token, peers
	if o.name != "" {
		cfg.Name = o.name
	}
	if o.advertise != "" {
		cfg.AdvertiseAddr = o.advertise
	}
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node name: %w (give --name)", err)
		}
		cfg.Name = h
	}
	if err := agent.Enroll(cfg, slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "Node %s enrolled into %s; start it with: reclaimnet agent --data-dir %s\n", cfg.Name, dataDir, dataDir)
	return nil
}

// DevGPU is the GPU spec agent --dev declares when none is given.
const DevGPU = "dev-gpu:16GiB:8.0"

// ownerFlags adds the owner policy's flags (docs/owner.md) to the agent's.
func ownerFlags(fs *pflag.FlagSet, fc *agent.Config) {
	o := &fc.Owner
	fs.StringArrayVar(&o.LendWindows, "lend-window", nil, "lending `window` in local time, e.g. 'Mon-Fri 19:00-08:00' or 'Sat,Sun' (repeatable; none: lent at all times)")
	fs.StringVar(&o.LendTZ, "lend-tz", "", "IANA time `zone` of the lending windows, e.g. Europe/Berlin (default: the machine's)")
	fs.Var(durationFlag(&o.LendLead), "lend-lead", "notice a lending window's end gives the guests (default 10m)")
	fs.StringVar(&o.GPU, "owner-gpu", o.GPU, "`action` when an owner process uses a lent GPU: off, now or 'notice DURATION'")
	fs.StringVar(&o.Input, "owner-input", o.Input, "`action` on keyboard, mouse or login-session activity: off, now or 'notice DURATION'")
	fs.StringVar(&o.InputSource, "owner-input-source", o.InputSource, "where input is read: auto, devices (/dev/input) or logind")
	fs.StringVar(&o.CPU, "owner-cpu", o.CPU, "`action` on CPU load of processes that are not guests': off, now or 'notice DURATION'")
	fs.Float64Var(&o.CPUThreshold, "owner-cpu-threshold", o.CPUThreshold, "owner CPU load, in `cores`, that counts as use")
	fs.Var(durationFlag(&o.CPUFor), "owner-cpu-for", "how long the owner's CPU load must stay above the threshold (default 2m)")
	fs.Var(durationFlag(&o.Idle), "owner-idle", "how long the owner must be idle before the machine is lent again (default 15m)")
	fs.IntVar(&o.MaxReclaimsPerHour, "owner-max-reclaims", o.MaxReclaimsPerHour, "most automatic reclaims for owner activity in any hour")
	fs.StringVar(&fc.OnReclaim, "on-reclaim", fc.OnReclaim, "once a reclaim made the node leave: stay (up, reclaimed, until 'reclaimnet lend' or the next window) or exit (status 10)")
	fs.Var(durationFlag(&fc.OwnerCheck), "owner-check", "how often the owner policy looks at the machine (default 5s)")
	fs.Var(durationFlag(&fc.LentAhead), "lent-ahead", "when this node leads: how long a node must stay lent to be given a job, a standby or a copy (default 15m)")
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
	case "lent-ahead":
		cfg.LentAhead = fc.LentAhead
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
