package agent

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// Config is one agent's configuration. It can be read from a JSON or HCL
// file (LoadConfigFile) and overridden by flags; New never modifies it.
type Config struct {
	// Name is the node's unique name (default: the host name).
	Name string `json:"name"`
	// DataDir holds the lock, the control socket, Raft state and
	// checkpoints.
	DataDir string `json:"data_dir"`
	// BindAddr is the one address gossip, Raft and transfers listen on.
	BindAddr string `json:"bind_addr"`
	// AdvertiseAddr is the address peers use (default: BindAddr; must be
	// set when BindAddr is 0.0.0.0 on a multi-homed host).
	AdvertiseAddr string `json:"advertise_addr"`
	Building      string `json:"building"`
	// Role is what the node is for: RoleWorker (the default, also when
	// empty) lends its GPUs and hosts jobs; RoleStorage keeps checkpoints
	// only (a machine-room server or NAS with disk): it hosts no jobs, is
	// never lent or reclaimed, and P2 prefers it as a holder (docs/design.md P2.7).
	Role string `json:"role"`
	// Lab and Pool name failure domains the node shares with others
	// besides its building (a lab's room that closes at night, a spot
	// pool, a power circuit): the leader's priors of which nodes leave
	// together (docs/policy.md, Durability). Empty: none.
	Lab  string `json:"lab"`
	Pool string `json:"pool"`
	// Join lists peers ("host" or "host:gossip-port") to join at start.
	Join         []string `json:"join"`
	GossipPort   int      `json:"gossip_port"`
	RaftPort     int      `json:"raft_port"`
	TransferPort int      `json:"transfer_port"`
	// HTTPAddr serves the status page, /v1 and /metrics; empty disables it.
	HTTPAddr string `json:"http_addr"`
	// GossipKey is the base64 symmetric gossip key (reclaimnet keygen).
	GossipKey string `json:"gossip_key"`
	// GossipKeyFile names a file holding the key instead (so it is not in
	// the process list or the config file); exclusive with GossipKey.
	GossipKeyFile string `json:"gossip_key_file"`
	// TLSDir holds ca.pem, node.pem, node-key.pem (reclaimnet tls ...);
	// with Bootstrap or Token it defaults to DATA_DIR/tls.
	TLSDir string `json:"tls_dir"`
	// Bootstrap starts a new cluster: the first start creates its CA, this
	// node's certificate, the secrets key and the gossip key (0600) in the
	// data dir; later starts use them.
	Bootstrap bool `json:"bootstrap"`
	// Token is a join token ('reclaimnet token create'): the first start
	// enrolls through a Join peer's coordinator port (the CA pinned by the
	// token) and keeps the certificate and gossip key it receives.
	Token string `json:"token"`
	// Admins may create and revoke join tokens and remove nodes through
	// this node's control socket: user names, or "%group" for a Unix
	// group's members. Root and the agent's own user always may.
	Admins []string `json:"admins"`
	// Owners are the machine's owners, who may reclaim it, lend it and
	// flip its kill-switch: user names, or "%group" for a Unix group's
	// members. Root and the agent's own user always may.
	Owners []string `json:"owners"`
	// Dev runs a throwaway single node: temporary data dir, generated key
	// and CA, loopback, fast timings.
	Dev bool `json:"dev"`
	// GPUs declares this node's GPUs ("MODEL:VRAM:CAP[:xN]", as
	// 'reclaimnet gpus --gpu'); empty discovers them (NVML, nvidia-smi).
	GPUs []string `json:"gpus"`
	// LeaveTimeout bounds the graceful part of shutdown.
	LeaveTimeout Duration `json:"leave_timeout"`
	// TelemetryInterval is how often this node gossips its report.
	TelemetryInterval Duration `json:"telemetry_interval"`
	// Enforce selects kernel enforcement (BPF rate ceilings, DSCP,
	// kill-switch, measured bandwidth): "auto" (the default: on when the
	// process may and the node is not on loopback, off otherwise, with the
	// reason in the log and on the status page), "on" (failing to enforce
	// is fatal) or "off".
	Enforce string `json:"enforce"`
	// Iface is the interface the BPF programs attach to (default: the one
	// that holds the advertise or bind address).
	Iface string `json:"iface"`
	// LinkCapacity is the node's access link, bytes/s ("1Gbit" in JSON
	// too); 0 means DefaultLinkCapacity (1 Gbit/s).
	LinkCapacity Rate `json:"link_capacity"`
	// BPFPinDir overrides the bpffs directory the maps are pinned in
	// (default /sys/fs/bpf/reclaimnet/NAME, which 'reclaimnet killswitch
	// --node NAME' finds).
	BPFPinDir string `json:"bpf_pin_dir"`
	// CacheSize caps the checkpoint store under DataDir/ckpt (and is the
	// receiver's disk quota); 0 means DefaultCacheSize (50 GiB).
	CacheSize Size `json:"cache_size"`
	// LocalTimings uses fast gossip and Raft timings (memberlist's and
	// raft's DefaultLocalConfig) for clusters on one machine.
	LocalTimings bool `json:"local_timings"`
	// FixedLoad, when set, is the load this node reports instead of the
	// host's load average per CPU: for campuses simulated on one machine,
	// where the host's load says nothing about any one node (and would
	// make P2 reject every destination on a busy host).
	FixedLoad *float64 `json:"fixed_load"`
	// RaftHeartbeat, when set, overrides the Raft heartbeat and election
	// timeouts (the leader lease is half of it). With LocalTimings they are
	// 50 ms, right for one process but too tight for several agent
	// processes sharing a busy host, where leaders then come and go.
	RaftHeartbeat Duration `json:"raft_heartbeat"`
	// Protocols lists the protocols this node decides with when it leads
	// ("p1,p2,p3"; "none" switches all off; empty means all on): the
	// paper's ablation on real processes. The leader's setting applies to
	// the whole cluster (state.Protocols).
	Protocols string `json:"protocols"`
	// FixedInterval is every job's checkpoint interval while P1 is off;
	// 0 means the policy's default (10 min).
	FixedInterval Duration `json:"fixed_interval"`
	// UplinkCapacity declares the capacity of building uplinks (the
	// building switch's link to the core), bytes/s: key "*" for every
	// building, a building's name for that building. Nobody measures
	// uplinks; undeclared ones keep DefaultUplinkCapacity (10 Gbit/s).
	// Like Protocols it is the leader's setting that counts (its policy
	// graph): give every agent the same list.
	UplinkCapacity UplinkCapacities `json:"uplink_capacity"`
	// Bmin is P3's reservation floor on every link, bytes/s (design P3.2:
	// Bres = max(β3·B, Bmin)); 0 means none. The leader's applies.
	Bmin Rate `json:"bmin"`

	// Sandbox is how guest jobs run: "on" (the default, also when empty):
	// confined (docs/sandbox.md); where confinement cannot be set up, no
	// job starts. "off": unconfined, as the agent's user, for a single
	// trusted lab only; logged and shown by status and the page.
	Sandbox string `json:"sandbox"`
	// GuestUIDs is the uid and gid range guest jobs run as, "FIRST-LAST";
	// empty means sandbox.DefaultFirstUID and DefaultUIDCount
	// (2100000000-2100000999).
	GuestUIDs string `json:"guest_uids"`
	// GuestMemory caps the memory of all guest jobs together; 0 means
	// three quarters of the machine's memory.
	GuestMemory Size `json:"guest_memory"`
	// GuestCPUs caps the CPU time of all guest jobs together, in CPUs; 0
	// means no cap.
	GuestCPUs float64 `json:"guest_cpus"`
	// GuestROPaths are host paths every guest job sees read-only (datasets,
	// shared software).
	GuestROPaths []string `json:"guest_ro_paths"`
	// Owner is the owner's policy (docs/owner.md): lending windows, what
	// owner activity takes the machine back and how, hysteresis and the
	// hourly cap. The zero value is owner.DefaultConfig.
	Owner owner.Config `json:"owner"`
	// OnReclaim is what the agent does once a reclaim made the node leave:
	// "stay" (the default, also when empty): it stays up, reclaimed, out of
	// the cluster with the kill-switch hard, until the owner lends it again
	// or the next lending window opens; "exit": it exits (10), and starting
	// it again lends the node.
	OnReclaim string `json:"on_reclaim"`
	// OwnerCheck is how often the owner policy looks at the machine
	// (default 5s).
	OwnerCheck Duration `json:"owner_check"`
	// LentAhead is, when this node leads, how long a node must stay lent
	// (its owner outlook) to be chosen as a job's destination, standby or
	// holder; 0 means policy.DefaultParams' (15 min).
	LentAhead Duration `json:"lent_ahead"`

	// GPUDevDir is where the GPUs' device nodes are (/dev when empty); a
	// test points it at fake nodes. Not part of the file format.
	GPUDevDir string `json:"-"`
	// OwnerSource, when set, replaces the owner-activity sources (a test's
	// fake GPU process list and input). Not part of the file format.
	OwnerSource OwnerSource `json:"-"`
}

// What the agent does once a reclaim made the node leave (Config.OnReclaim).
const (
	OnReclaimStay = "stay"
	OnReclaimExit = "exit"
)

// DefaultOwnerCheck is how often the owner policy looks at the machine.
const DefaultOwnerCheck = 5 * time.Second

// UplinkCapacities maps a building ("*": every building not listed) to
// its uplink capacity. As a flag it reads "60Mbit" (every building) or
// "a=60Mbit,b=1Gbit" (repeatable; later entries win).
type UplinkCapacities map[string]Rate

// String writes the map as Set reads it, buildings sorted.
func (u UplinkCapacities) String() string {
	keys := make([]string, 0, len(u))
	for k := range u {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		if k == "*" {
			parts = append(parts, u[k].String())
			continue
		}
		parts = append(parts, k+"="+u[k].String())
	}
	return strings.Join(parts, ",")
}

// Type names the flag's value in the help.
func (u *UplinkCapacities) Type() string { return "rates" }

// Set implements flag.Value: "RATE" or "BUILDING=RATE[,BUILDING=RATE...]".
func (u *UplinkCapacities) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("uplink capacity: want RATE or BUILDING=RATE[,BUILDING=RATE...], e.g. 10Gbit or a=1Gbit,b=10Gbit")
	}
	out := UplinkCapacities{}
	for part := range strings.SplitSeq(v, ",") {
		building, rate, named := strings.Cut(strings.TrimSpace(part), "=")
		if !named {
			building, rate = "*", building
		}
		building = strings.TrimSpace(building)
		if building == "" {
			return fmt.Errorf("uplink capacity %q: empty building name", part)
		}
		r, err := ParseRate(rate)
		if err != nil {
			return fmt.Errorf("uplink capacity of %s: %w", building, err)
		}
		out[building] = r
	}
	if *u == nil {
		*u = UplinkCapacities{}
	}
	maps.Copy(*u, out)
	return nil
}

// Of returns building's declared uplink capacity (bytes/s) and whether
// one was declared.
func (u UplinkCapacities) Of(building string) (float64, bool) {
	if r, ok := u[building]; ok {
		return float64(r), true
	}
	if r, ok := u["*"]; ok {
		return float64(r), true
	}
	return 0, false
}

// Switches returns the protocol switches of c.Protocols (all on when it
// is empty).
func (c Config) Switches() (policy.Switches, error) {
	if strings.TrimSpace(c.Protocols) == "" {
		return policy.DefaultParams().Switches, nil
	}
	return state.ParseProtocols(c.Protocols)
}

// Duration is a time.Duration that reads "5s" from JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Size is a byte count that reads "50GiB" from flags and JSON.
type Size int64

// String writes the size in the largest binary unit that holds it exactly
// ("50GiB", "1536MiB", "1000B"), so it reads back as the same size.
func (s Size) String() string {
	n := int64(s)
	for _, u := range []struct {
		name  string
		bytes int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.bytes == 0 {
			return strconv.FormatInt(n/u.bytes, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// Type names the flag's value in the help.
func (s *Size) Type() string { return "size" }

// Set parses a size with a unit ("50GiB", "500GB").
func (s *Size) Set(v string) error {
	n, err := gpu.ParseBytes(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

func (s *Size) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("size: want a string like \"50GiB\": %w", err)
	}
	return s.Set(v)
}

// DefaultConfig returns the defaults of a production node; the caller sets
// at least the gossip key and TLS dir.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Name:              host,
		DataDir:           "/var/lib/reclaimnet",
		BindAddr:          "0.0.0.0",
		GossipPort:        localapi.DefaultGossipPort,
		RaftPort:          localapi.DefaultRaftPort,
		TransferPort:      localapi.DefaultTransferPort,
		HTTPAddr:          localapi.DefaultHTTPAddr,
		LeaveTimeout:      Duration(5 * time.Second),
		TelemetryInterval: Duration(time.Second),
		Enforce:           enforce.ModeAuto,
		LinkCapacity:      DefaultLinkCapacity,
		CacheSize:         DefaultCacheSize,
		Protocols:         "p1,p2,p3",
		FixedInterval:     Duration(policy.DefaultParams().FixedInterval),
		UplinkCapacity:    UplinkCapacities{},
		Sandbox:           "on",
		GuestUIDs:         "2100000000-2100000999",
		Role:              RoleWorker,
		Owner:             owner.DefaultConfig(),
		OnReclaim:         OnReclaimStay,
		OwnerCheck:        Duration(DefaultOwnerCheck),
	}
}

// The node roles (Config.Role).
const (
	RoleWorker  = "worker"
	RoleStorage = "storage"
)

// Storage reports whether the node runs in the storage role.
func (c Config) Storage() bool { return c.Role == RoleStorage }

// Validate reports the first problem with c. A Dev config may leave out
// the gossip key and TLS dir.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("node name is empty (set --name)")
	}
	if c.DataDir == "" && !c.Dev {
		return errors.New("data dir is empty (set --data-dir)")
	}
	if net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("bind address %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return fmt.Errorf("advertise address %q is not an IP address", c.AdvertiseAddr)
	}
	for name, p := range map[string]int{"gossip": c.GossipPort, "raft": c.RaftPort, "transfer": c.TransferPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("%s port %d out of range", name, p)
		}
	}
	if c.HTTPAddr != "" {
		if _, err := netip.ParseAddrPort(c.HTTPAddr); err != nil {
			return fmt.Errorf("http address %q: want ip:port: %w", c.HTTPAddr, err)
		}
	}
	if c.GossipKey != "" {
		if _, err := DecodeGossipKey(c.GossipKey); err != nil {
			return err
		}
	} else if !c.Dev && c.GossipKeyFile == "" {
		return errors.New("no gossip key (create one with 'reclaimnet keygen' and pass --gossip-key-file or --gossip-key)")
	}
	if c.TLSDir == "" && !c.Dev {
		return errors.New("no TLS dir (create one with 'reclaimnet tls ca create' and 'reclaimnet tls cert create', pass --tls-dir)")
	}
	var specs gpu.SpecList
	for _, g := range c.GPUs {
		if err := specs.Set(g); err != nil {
			return fmt.Errorf("gpu %q: %w", g, err)
		}
	}
	for _, p := range c.Join {
		if p == "" {
			return errors.New("empty --join address")
		}
	}
	switch c.Role {
	case "", RoleWorker, RoleStorage:
	default:
		return fmt.Errorf("role %q: want worker or storage", c.Role)
	}
	if len(c.Lab) > mesh.MaxDomainLen || len(c.Pool) > mesh.MaxDomainLen {
		return fmt.Errorf("lab %q or pool %q: longer than %d bytes", c.Lab, c.Pool, mesh.MaxDomainLen)
	}
	if len(c.Building) > mesh.MaxBuildingLen {
		return fmt.Errorf("building %q: longer than %d bytes", c.Building, mesh.MaxBuildingLen)
	}
	// The paths travel in the gossip metadata, which has a fixed budget.
	paths := 0
	for _, p := range c.GuestROPaths {
		paths += len(filepath.Clean(p)) + 1
	}
	if paths > mesh.MaxPathsBytes {
		return fmt.Errorf("guest read-only paths %q: %d bytes together (each path's bytes plus one), over the %d a node's gossip metadata has room for",
			c.GuestROPaths, paths, mesh.MaxPathsBytes)
	}
	switch c.Enforce {
	case "", enforce.ModeAuto, enforce.ModeOn, enforce.ModeOff:
	default:
		return fmt.Errorf("enforce %q: want auto, on or off", c.Enforce)
	}
	if c.LinkCapacity < 0 {
		return fmt.Errorf("link capacity %v: want a positive rate such as 1Gbit", float64(c.LinkCapacity))
	}
	if c.CacheSize < 0 {
		return fmt.Errorf("cache size %d: must not be negative", c.CacheSize)
	}
	if _, err := c.Switches(); err != nil {
		return err
	}
	if c.RaftHeartbeat < 0 || (c.RaftHeartbeat > 0 && time.Duration(c.RaftHeartbeat) < 10*time.Millisecond) {
		return fmt.Errorf("raft heartbeat %v: must be at least 10ms", time.Duration(c.RaftHeartbeat))
	}
	if c.FixedInterval < 0 {
		return fmt.Errorf("fixed interval %v: must not be negative", time.Duration(c.FixedInterval))
	}
	for b, r := range c.UplinkCapacity {
		if !(r > 0) || math.IsInf(float64(r), 0) {
			return fmt.Errorf("uplink capacity of %s %v: want a positive rate such as 10Gbit", b, float64(r))
		}
	}
	if !(c.Bmin >= 0) || math.IsInf(float64(c.Bmin), 0) {
		return fmt.Errorf("bmin %v: want a non-negative rate such as 10Mbit", float64(c.Bmin))
	}
	if c.LeaveTimeout < 0 || c.TelemetryInterval < 0 {
		return errors.New("negative duration")
	}
	if _, err := c.sandboxConfig(); err != nil {
		return err
	}
	if _, err := c.Owner.Policy(); err != nil {
		return err
	}
	switch c.OnReclaim {
	case "", OnReclaimStay, OnReclaimExit:
	default:
		return fmt.Errorf("on reclaim %q: want stay or exit", c.OnReclaim)
	}
	if c.LentAhead < 0 {
		return fmt.Errorf("lent ahead %v: must not be negative", time.Duration(c.LentAhead))
	}
	if c.OwnerCheck < 0 {
		return fmt.Errorf("owner check %v: must not be negative", time.Duration(c.OwnerCheck))
	}
	return nil
}

// ReadGossipKeyFile reads a base64 gossip key from path (surrounding
// white space ignored) and checks it. A file other users may read or
// write, or owned by another user, is refused with the command that fixes
// it: the key admits anyone to the cluster's gossip.
func ReadGossipKeyFile(path string) (string, error) {
	b, err := pki.ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("gossip key file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if _, err := DecodeGossipKey(key); err != nil {
		return "", fmt.Errorf("gossip key file %s: %w", path, err)
	}
	return key, nil
}

// DecodeGossipKey parses a base64 gossip key of 16, 24 or 32 bytes.
func DecodeGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	if n := len(k); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("gossip key is %d bytes, want 16, 24 or 32 (create one with 'reclaimnet keygen')", n)
	}
	return k, nil
}

// joinAddr adds the default gossip port to a bare host.
func joinAddr(peer string) string {
	if _, _, err := net.SplitHostPort(peer); err == nil {
		return peer
	}
	return net.JoinHostPort(peer, strconv.Itoa(localapi.DefaultGossipPort))
}
