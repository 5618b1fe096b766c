package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/agent"
	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/state"
)

func init() {
	register(&command{
		name:     "agent",
		synopsis: "run the node agent (gossip, coordinator, control socket, status)",
		usage: `reclaimnet agent [--dev] [--name NAME] [--data-dir DIR] [--bind IP] [--building B] [--join PEER]... [flags]

Runs one node until SIGINT or SIGTERM, then leaves the cluster gracefully
and exits 0. A reclaim of the node (its deadline, or --now) makes it leave
too, and it exits 10, so that a service manager does not restart it.
--dev runs a complete throwaway node: temporary data dir, generated gossip
key and CA, loopback addresses. Flags override the --config file (JSON,
field names as in 'reclaimnet agent --print-config').

Kernel enforcement (BPF on --iface: per-transfer rate ceilings, DSCP marks,
the kill-switch, measured bandwidth per building):
  --enforce auto  on when running as root (or with CAP_BPF+CAP_NET_ADMIN),
                  the node is not bound to loopback and the programs attach;
                  otherwise off, with the reason in the log, on the status
                  page (kill-switch "disabled") and at /v1/enforce
  --enforce on    failing to enforce is a fatal start-up error
  --enforce off   never load the programs
--dev without root runs with enforcement off and says so.

Protocol switches (the paper's ablation on real processes):
  --protocols p1,p2,p3   the protocols this node decides with when it
                         leads (default all three; "" or none: all off).
                         P1 off: every job checkpoints at --fixed-interval;
                         P2 off: destinations at random among feasible ones;
                         P3 off: no admission, transfers unpaced, no kernel
                         ceilings. The leader's setting applies to the whole
                         cluster: start every agent with the same list (a
                         node whose list differs warns in its log, and
                         'reclaimnet status' shows the switches in force).
  --fixed-interval 10m   the checkpoint interval while P1 is off`,
		run: runAgent,
	})
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func runAgent(ctx context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "agent")
	fc := agent.DefaultConfig()
	var joins listFlag
	configPath := fs.String("config", "", "JSON config file; flags override it")
	fs.StringVar(&fc.Name, "name", fc.Name, "node name, unique in the cluster")
	fs.StringVar(&fc.DataDir, "data-dir", fc.DataDir, "state directory (lock, control socket, raft, checkpoints)")
	fs.StringVar(&fc.BindAddr, "bind", fc.BindAddr, "address gossip, raft and transfers listen on")
	fs.StringVar(&fc.AdvertiseAddr, "advertise", fc.AdvertiseAddr, "address peers use to reach this node (default: --bind)")
	fs.StringVar(&fc.Building, "building", fc.Building, "building this node is in")
	fs.Var(&joins, "join", "peer to join, host or host:port (repeatable)")
	var gpus listFlag
	fs.Var(&gpus, "gpu", "declare GPUs as MODEL:VRAM:CAP[:xN], e.g. A100-80GB:80GiB:8.0:x4 (repeatable; default: discover)")
	fs.IntVar(&fc.GossipPort, "gossip-port", fc.GossipPort, "gossip port (TCP and UDP)")
	fs.IntVar(&fc.RaftPort, "raft-port", fc.RaftPort, "raft port (TCP)")
	fs.IntVar(&fc.TransferPort, "transfer-port", fc.TransferPort, "checkpoint transfer port (QUIC/UDP)")
	fs.StringVar(&fc.HTTPAddr, "http", fc.HTTPAddr, "status and metrics address (empty: off)")
	fs.StringVar(&fc.GossipKey, "gossip-key", fc.GossipKey, "base64 gossip key (reclaimnet keygen); visible in the process list, prefer --gossip-key-file")
	fs.StringVar(&fc.GossipKeyFile, "gossip-key-file", fc.GossipKeyFile, "file holding the base64 gossip key (reclaimnet keygen > FILE; chmod 600)")
	fs.StringVar(&fc.TLSDir, "tls-dir", fc.TLSDir, "directory with ca.pem, node.pem, node-key.pem")
	fs.StringVar(&fc.Enforce, "enforce", fc.Enforce, "kernel enforcement: auto, on or off")
	fs.StringVar(&fc.Iface, "iface", fc.Iface, "interface the BPF programs attach to (default: the one holding the advertise/bind address)")
	fs.Var(&fc.LinkCapacity, "link-capacity", "the node's access link capacity, e.g. 1Gbit, 10Gbit, 125MB (bytes/s)")
	fs.StringVar(&fc.BPFPinDir, "bpf-pin-dir", fc.BPFPinDir, "bpffs directory for the pinned maps (default /sys/fs/bpf/reclaimnet/NAME)")
	fs.Var(&fc.CacheSize, "cache-size", "checkpoint store size cap under the data dir, e.g. 50GiB (also the receiver's disk quota)")
	fs.BoolVar(&fc.LocalTimings, "local-timings", fc.LocalTimings, "fast gossip and raft timings for one machine (tests)")
	fs.Func("fixed-load", "report this load (0..1 per CPU) instead of the host's load average: for campuses simulated on one machine", func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Errorf("want a non-negative number, e.g. 0.1")
		}
		fc.FixedLoad = &x
		return nil
	})
	fs.BoolVar(&fc.Dev, "dev", fc.Dev, "run a throwaway single node on loopback")
	protocols := fs.String("protocols", "p1,p2,p3", "protocols on when this node leads: comma list of p1,p2,p3; empty or none: all off")
	fs.Var((*durationFlag)(&fc.RaftHeartbeat), "raft-heartbeat", "Raft heartbeat and election timeout (default 1s; 50ms with --local-timings); the leader lease is half")
	fs.Var((*durationFlag)(&fc.FixedInterval), "fixed-interval", "checkpoint interval while P1 is off (default 10m)")
	fs.Var(&fc.UplinkCapacity, "uplink-capacity", "building uplink capacity for P2/P3 when this node leads: RATE for every building or BUILDING=RATE[,...] (repeatable; default 10Gbit; give every agent the same)")
	fs.Var(&fc.Bmin, "bmin", "P3's reservation floor per link when this node leads, e.g. 10Mbit (Bres = max(0.3·capacity, bmin); default 0)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	printConfig := fs.Bool("print-config", false, "print the effective configuration as JSON and exit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	switch fc.Enforce {
	case enforce.ModeAuto, enforce.ModeOn, enforce.ModeOff:
	default:
		return usagef("--enforce %q: want auto, on or off", fc.Enforce)
	}
	fc.Join = joins
	fc.GPUs = gpus
	if _, err := state.ParseProtocols(*protocols); err != nil {
		return usagef("--protocols: %v", err)
	}
	fc.Protocols = strings.TrimSpace(*protocols)
	if fc.Protocols == "" {
		fc.Protocols = "none" // the flag's empty list: all off (the config's empty means all on)
	}
	if fc.FixedInterval < 0 {
		return usagef("--fixed-interval %v: must be positive", time.Duration(fc.FixedInterval))
	}

	cfg := agent.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = agent.LoadConfigFile(*configPath, cfg); err != nil {
			return err
		}
	}
	fs.Visit(func(f *flag.Flag) { applyAgentFlag(&cfg, &fc, f.Name) })
	if cfg.Dev {
		devDefaults(&cfg, fs)
	}
	if *printConfig {
		return printJSON(env.Stdout, cfg)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	logger := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	agent.Version = Version
	a, err := agent.New(cfg, logger)
	if err != nil {
		return err
	}
	err = a.Run(ctx, func(info localapi.Info) {
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
	if err == nil && a.Reclaimed() {
		return errReclaimed
	}
	return err
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
	}
}

// durationFlag is an agent.Duration flag ("10m").
type durationFlag agent.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }
func (d *durationFlag) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if x <= 0 {
		return fmt.Errorf("%v: must be positive", x)
	}
	*d = durationFlag(x)
	return nil
}

// devDefaults: loopback and a temporary data dir unless flags said
// otherwise.
func devDefaults(cfg *agent.Config, fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["bind"] {
		cfg.BindAddr = "127.0.0.1"
	}
	if !set["data-dir"] {
		cfg.DataDir = "" // agent makes a temporary one
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
}
