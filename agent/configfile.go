package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// Config file formats, chosen by the file's extension. JSON is the
// canonical form (the field names are Config's JSON names); HCL holds the
// same options as NAME = VALUE attributes, with # comments.
const (
	FormatJSON = "json"
	FormatHCL  = "hcl"
)

// ConfigFormats are the formats a config file may have.
var ConfigFormats = []string{FormatJSON, FormatHCL}

// ConfigFormat is the format of a config file, from its extension.
func ConfigFormat(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return FormatJSON, nil
	case ".hcl":
		return FormatHCL, nil
	}
	return "", fmt.Errorf("config file %s: unknown format: name it *.json or *.hcl", path)
}

// configDocs describes each option, by its name in the file. MarshalConfig
// writes them as comments in HCL.
var configDocs = map[string]string{
	"name":               "node name, unique in the cluster (default: the host name)",
	"data_dir":           "state directory: lock, control socket, Raft log, checkpoints",
	"bind_addr":          "address gossip, Raft and transfers listen on",
	"advertise_addr":     "address peers use to reach this node (empty: bind_addr; needed when bind_addr is 0.0.0.0 on a host with several addresses)",
	"building":           "building this node is in (destinations and bandwidth are per building)",
	"role":               "worker (lends GPUs, hosts jobs) or storage (keeps checkpoints only: hosts no jobs, never lent or reclaimed, preferred as a holder)",
	"lab":                "failure domain the node shares besides its building, e.g. a lab's room (prior of nodes leaving together)",
	"pool":               "another such domain, e.g. a spot pool or a power circuit",
	"join":               "peers to join at start, host or host:gossip-port",
	"gossip_port":        "gossip port (TCP and UDP)",
	"raft_port":          "Raft port (TCP)",
	"transfer_port":      "checkpoint transfer port (QUIC, UDP)",
	"http_addr":          "address of the status page, /v1 and /metrics (empty: off)",
	"gossip_key":         "base64 gossip key (reclaimnet keygen); prefer gossip_key_file",
	"gossip_key_file":    "file holding the base64 gossip key (chmod 600)",
	"tls_dir":            "directory with ca.pem, node.pem and node-key.pem (reclaimnet tls)",
	"dev":                "run a throwaway single node: temporary data dir, generated key and CA, loopback",
	"gpus":               "declared GPUs, MODEL:VRAM:CAP[:xN] (empty: discover with NVML or nvidia-smi)",
	"leave_timeout":      "how long a graceful shutdown waits for the cluster",
	"telemetry_interval": "how often this node gossips its load, GPUs and measurements",
	"enforce":            "kernel enforcement (rate ceilings, traffic classes, kill-switch): auto, on or off",
	"iface":              "interface the kernel programs attach to (empty: the one holding the address)",
	"link_capacity":      "this node's access link capacity, e.g. 1Gbit",
	"bpf_pin_dir":        "bpffs directory of the pinned maps (empty: /sys/fs/bpf/reclaimnet/NAME)",
	"cache_size":         "checkpoint store size cap under data_dir (also the receiver's disk quota)",
	"local_timings":      "fast gossip and Raft timings for clusters on one machine (tests)",
	"fixed_load":         "load (0..1 per CPU) to report instead of the host's load average (null: measure)",
	"raft_heartbeat":     "Raft heartbeat and election timeout; the leader lease is half (0s: 1s, 50ms with local_timings)",
	"protocols":          "protocols on when this node leads: p1 (checkpoint interval), p2 (destination choice), p3 (traffic admission); none: all off",
	"fixed_interval":     "every job's checkpoint interval while p1 is off",
	"uplink_capacity":    "building uplink capacities when this node leads: \"*\" for every building, or a building's name (undeclared: 10Gbit assumed)",
	"sandbox":            "guest jobs confined (on, the default) or unconfined as the agent's user (off: a single trusted lab only)",
	"guest_uids":         "uid and gid range guest jobs run as, FIRST-LAST (empty: 2100000000-2100000999)",
	"guest_memory":       "memory cap on all guest jobs together (0: three quarters of the machine's)",
	"guest_cpus":         "CPU cap on all guest jobs together, in CPUs (0: none)",
	"guest_ro_paths":     "host paths every guest job sees read-only (datasets, shared software)",
	"owner":              "the owner's policy (docs/owner.md): lend_windows like \"Mon-Fri 19:00-08:00\", lend_tz, lend_lead, gpu/input/cpu actions (off, now, \"notice 2m\"), input_source, cpu_threshold, cpu_for, idle, max_reclaims_per_hour",
	"on_reclaim":         "once a reclaim made the node leave: stay (up, reclaimed, until lent again) or exit (10)",
	"owner_check":        "how often the owner policy looks at the machine",
	"lent_ahead":         "when this node leads: how long a node must stay lent to take a job, a standby or a copy (0s: 15m)",
	"bmin":               "least bandwidth kept for other traffic on every link when this node leads (the reservation is the larger of 30 % of the link and this)",
}

// configFields lists Config's options by their name in the file, in the
// struct's order.
func configFields() []string {
	t := reflect.TypeFor[Config]()
	out := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" { // not part of the file format
			continue
		}
		out = append(out, name)
	}
	return out
}

// MarshalConfig writes every option of c in format (FormatJSON or
// FormatHCL): what --print-config prints, and a file LoadConfigFile reads
// back as c.
func MarshalConfig(c Config, format string) ([]byte, error) {
	// An empty list prints as one, not as null.
	if c.Join == nil {
		c.Join = []string{}
	}
	if c.GPUs == nil {
		c.GPUs = []string{}
	}
	if c.GuestROPaths == nil {
		c.GuestROPaths = []string{}
	}
	js, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	switch format {
	case FormatJSON:
		return append(js, '\n'), nil
	case FormatHCL:
	default:
		return nil, fmt.Errorf("config format %q: want %s", format, strings.Join(ConfigFormats, " or "))
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return nil, err
	}
	f := hclwrite.NewEmptyFile()
	body := f.Body()
	for i, name := range configFields() {
		if i > 0 {
			body.AppendNewline()
		}
		if doc := configDocs[name]; doc != "" {
			body.AppendUnstructuredTokens(hclwrite.Tokens{{Type: hclsyntax.TokenComment, Bytes: []byte("# " + doc + "\n")}})
		}
		v, err := goToCty(values[name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		body.SetAttributeValue(name, v)
	}
	return f.Bytes(), nil
}

// LoadConfigFile reads a config file over base (options absent from the
// file keep base's value), in the format its extension names. Unknown
// options are an error, so a typo is not silently ignored.
func LoadConfigFile(path string, base Config) (Config, error) {
	format, err := ConfigFormat(path)
	if err != nil {
		return base, err
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("read config: %w", err)
	}
	cfg := base
	cfg.Join = slices.Clone(base.Join)
	cfg.GPUs = slices.Clone(base.GPUs)
	cfg.GuestROPaths = slices.Clone(base.GuestROPaths)
	if base.UplinkCapacity != nil {
		cfg.UplinkCapacity = UplinkCapacities{}
		for k, v := range base.UplinkCapacity {
			cfg.UplinkCapacity[k] = v
		}
	}
	if format == FormatHCL {
		if err := decodeHCL(src, path, &cfg); err != nil {
			return base, err
		}
	} else {
		dec := json.NewDecoder(bytes.NewReader(src))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return base, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	// An empty list is no list, as in DefaultConfig.
	if len(cfg.Join) == 0 {
		cfg.Join = nil
	}
	if len(cfg.GPUs) == 0 {
		cfg.GPUs = nil
	}
	if len(cfg.GuestROPaths) == 0 {
		cfg.GuestROPaths = nil
	}
	return cfg, nil
}

// decodeHCL reads an HCL config: each attribute is evaluated (constants
// only: no variables or functions) and decoded as the JSON field of the
// same name, so both formats read values the same way. Errors name the
// file, line and column.
func decodeHCL(src []byte, path string, cfg *Config) error {
	file, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return fmt.Errorf("config file %s", diags.Error())
	}
	body := file.Body.(*hclsyntax.Body)
	if len(body.Blocks) > 0 {
		b := body.Blocks[0]
		return fmt.Errorf("config file %s: block %q: options are written NAME = VALUE", b.DefRange(), b.Type)
	}
	known := configFields()
	attrs := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
	for _, a := range body.Attributes {
		attrs = append(attrs, a)
	}
	slices.SortFunc(attrs, func(a, b *hclsyntax.Attribute) int { return a.SrcRange.Start.Byte - b.SrcRange.Start.Byte })
	for _, a := range attrs {
		if !slices.Contains(known, a.Name) {
			return fmt.Errorf("config file %s: unknown option %q", a.NameRange, a.Name)
		}
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			return fmt.Errorf("config file %s", diags.Error())
		}
		g, err := ctyToGo(v)
		if err != nil {
			return fmt.Errorf("config file %s: %s: %w", a.Expr.Range(), a.Name, err)
		}
		js, err := json.Marshal(map[string]any{a.Name: g})
		if err != nil {
			return fmt.Errorf("config file %s: %s: %w", a.Expr.Range(), a.Name, err)
		}
		if err := json.Unmarshal(js, cfg); err != nil {
			return fmt.Errorf("config file %s: %s: %w", a.Expr.Range(), a.Name, err)
		}
	}
	return nil
}

// ctyToGo converts an HCL value to the value encoding/json would decode
// from the same JSON.
func ctyToGo(v cty.Value) (any, error) {
	if v.IsNull() {
		return nil, nil
	}
	if !v.IsWhollyKnown() {
		return nil, fmt.Errorf("value not known")
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return v.AsString(), nil
	case t == cty.Number:
		return json.Number(v.AsBigFloat().Text('g', -1)), nil
	case t == cty.Bool:
		return v.True(), nil
	case t.IsListType() || t.IsTupleType() || t.IsSetType():
		out := []any{}
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			g, err := ctyToGo(e)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
		return out, nil
	case t.IsMapType() || t.IsObjectType():
		out := map[string]any{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			g, err := ctyToGo(e)
			if err != nil {
				return nil, err
			}
			out[k.AsString()] = g
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value of type %s", t.FriendlyName())
}

// goToCty converts a decoded JSON value (numbers as json.Number) to HCL.
func goToCty(v any) (cty.Value, error) {
	switch x := v.(type) {
	case nil:
		return cty.NullVal(cty.DynamicPseudoType), nil
	case string:
		return cty.StringVal(x), nil
	case bool:
		return cty.BoolVal(x), nil
	case json.Number:
		f, _, err := big.ParseFloat(string(x), 10, 512, big.ToNearestEven)
		if err != nil {
			return cty.NilVal, err
		}
		return cty.NumberVal(f), nil
	case []any:
		if len(x) == 0 {
			return cty.EmptyTupleVal, nil
		}
		elems := make([]cty.Value, len(x))
		for i, e := range x {
			c, err := goToCty(e)
			if err != nil {
				return cty.NilVal, err
			}
			elems[i] = c
		}
		return cty.TupleVal(elems), nil
	case map[string]any:
		if len(x) == 0 {
			return cty.EmptyObjectVal, nil
		}
		attrs := make(map[string]cty.Value, len(x))
		for k, e := range x {
			c, err := goToCty(e)
			if err != nil {
				return cty.NilVal, err
			}
			attrs[k] = c
		}
		return cty.ObjectVal(attrs), nil
	}
	return cty.NilVal, fmt.Errorf("unsupported value %T", v)
}
