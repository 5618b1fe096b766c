package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
)

// fullConfig sets every option of Config to a value other than its default
// and its zero value, so a format that dropped or mangled one would show.
func fullConfig() Config {
	load := 0.25
	return Config{
		Name: "gpu-07", DataDir: "/srv/reclaimnet", BindAddr: "10.0.0.7", AdvertiseAddr: "192.0.2.7", Building: "physics", Role: RoleStorage, Lab: "optics", Pool: "spot-a",
		Join: []string{"10.0.0.1", "10.0.0.2:8000"}, GossipPort: 8001, RaftPort: 8002, TransferPort: 8003, HTTPAddr: "127.0.0.1:9000",
		GossipKey: "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U=", GossipKeyFile: "/etc/reclaimnet/gossip.key", TLSDir: "/etc/reclaimnet/tls",
		Bootstrap: true, Token: "rn1.0123456789abcdef.0123456789abcdef0123456789abcdef." + strings.Repeat("ab", 32),
		Admins: []string{"alice", "%labadmins"}, Owners: []string{"bob"},
		Dev: true, GPUs: []string{"A100-80GB:80GiB:8.0:x4"}, LeaveTimeout: Duration(7 * time.Second), TelemetryInterval: Duration(1500 * time.Millisecond),
		Enforce: "on", Iface: "eth1", LinkCapacity: Rate(10e9 / 8), BPFPinDir: "/sys/fs/bpf/x", CacheSize: Size(1536 << 20),
		LocalTimings: true, FixedLoad: &load, RaftHeartbeat: Duration(750 * time.Millisecond), Protocols: "p1,p3",
		FixedInterval: Duration(90 * time.Second), UplinkCapacity: UplinkCapacities{"*": Rate(60e6 / 8), "chemistry": Rate(1e9 / 8)},
		Bmin: Rate(10e6 / 8), Sandbox: "off", GuestUIDs: "3000000-3000099", GuestMemory: Size(64 << 30), GuestCPUs: 12,
		GuestROPaths: []string{"/datasets", "/opt/sw"},
		Owner: owner.Config{LendWindows: []string{"Mon-Fri 19:00-08:00", "Sat,Sun"}, LendTZ: "Europe/Berlin", LendLead: owner.Duration(20 * time.Minute),
			GPU: "now", Input: "notice 5m", CPU: "notice 3m", InputSource: owner.InputLogind, CPUThreshold: 2.5,
			CPUFor: owner.Duration(3 * time.Minute), Idle: owner.Duration(20 * time.Minute), MaxReclaimsPerHour: 2},
		OnReclaim: OnReclaimExit, OwnerCheck: Duration(2 * time.Second), LentAhead: Duration(20 * time.Minute),
	}
}

// TestConfigEveryOptionRoundTrips: every Config field is set in
// fullConfig (checked by reflection), appears in the output of each
// format with a comment in HCL, and reads back as the same Config.
func TestConfigEveryOptionRoundTrips(t *testing.T) {
	t.Parallel()
	full := fullConfig()
	v, def := reflect.ValueOf(full), reflect.ValueOf(DefaultConfig())
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if v.Type().Field(i).Tag.Get("json") == "-" { // not an option of the file
			continue
		}
		if v.Field(i).IsZero() || reflect.DeepEqual(v.Field(i).Interface(), def.Field(i).Interface()) {
			t.Errorf("fullConfig leaves %s at its zero or default value", name)
		}
	}
	for _, format := range ConfigFormats {
		t.Run(format, func(t *testing.T) {
			b, err := MarshalConfig(full, format)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range configFields() {
				if !strings.Contains(string(b), name) {
					t.Errorf("%s output lacks %s:\n%s", format, name, b)
				}
				if format == FormatHCL && !strings.Contains(string(b), "# "+configDocs[name]+"\n"+name+" ") {
					t.Errorf("HCL output: %s has no comment before it:\n%s", name, b)
				}
			}
			path := filepath.Join(t.TempDir(), "agent."+format)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadConfigFile(path, DefaultConfig())
			if err != nil {
				t.Fatalf("reading back:\n%s\n%v", b, err)
			}
			if !reflect.DeepEqual(got, full) {
				t.Errorf("round trip through %s:\n got %+v\nwant %+v\nfile:\n%s", format, got, full, b)
			}
		})
	}
	// The defaults too: zero rates, an empty uplink map, no fixed load.
	for _, format := range ConfigFormats {
		b, err := MarshalConfig(DefaultConfig(), format)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "agent."+format)
		os.WriteFile(path, b, 0o600)
		got, err := LoadConfigFile(path, Config{})
		if err != nil || !reflect.DeepEqual(got, DefaultConfig()) {
			t.Errorf("defaults through %s: got %+v (%v), want %+v\n%s", format, got, err, DefaultConfig(), b)
		}
	}
}

// TestConfigDocsMatchFields: every option has a description and every
// description an option.
func TestConfigDocsMatchFields(t *testing.T) {
	t.Parallel()
	fields := configFields()
	for _, f := range fields {
		if configDocs[f] == "" {
			t.Errorf("option %s has no description in configDocs", f)
		}
	}
	if len(configDocs) != len(fields) {
		t.Errorf("configDocs has %d entries for %d options", len(configDocs), len(fields))
	}
}

// TestConfigFileHCL reads a hand-written HCL file with comments over the
// defaults; errors name the file, line and option.
func TestConfigFileHCL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.hcl")
	src := `# a lab machine in physics
name     = "gpu-07"
building = "physics" // trailing comments too
join     = ["10.0.0.1", "10.0.0.2"]
gossip_port = 8000
fixed_load  = 0.1
uplink_capacity = { "*" = "60Mbit", chemistry = "1Gbit" }
cache_size = "500GiB"
`
	os.WriteFile(path, []byte(src), 0o600)
	cfg, err := LoadConfigFile(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "gpu-07" || cfg.Building != "physics" || len(cfg.Join) != 2 || cfg.GossipPort != 8000 ||
		cfg.FixedLoad == nil || *cfg.FixedLoad != 0.1 || cfg.CacheSize != 500<<30 ||
		cfg.UplinkCapacity["*"] != Rate(60e6/8) || cfg.UplinkCapacity["chemistry"] != Rate(1e9/8) {
		t.Errorf("loaded %+v", cfg)
	}
	if cfg.RaftPort != DefaultConfig().RaftPort || cfg.Protocols != "p1,p2,p3" {
		t.Errorf("options absent from the file lost their defaults: %+v", cfg)
	}
	for _, tc := range []struct{ src, want string }{
		{"name = \"a\"\nnmae = \"typo\"\n", `agent.hcl:2,1-5: unknown option "nmae"`},
		{"gossip_port = \"many\"\n", "agent.hcl:1,15-21: gossip_port"},
		{"cache_size = \"lots\"\n", `size "lots"`},
		{"name = var.x\n", "agent.hcl:1"},
		{"agent {\n name = \"x\"\n}\n", `block "agent": options are written NAME = VALUE`},
		{"name = \n", "agent.hcl:1"},
	} {
		os.WriteFile(path, []byte(tc.src), 0o600)
		if _, err := LoadConfigFile(path, DefaultConfig()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error with %q", tc.src, err, tc.want)
		}
	}
	if _, err := LoadConfigFile(filepath.Join(dir, "agent.conf"), DefaultConfig()); err == nil || !strings.Contains(err.Error(), "*.json or *.hcl") {
		t.Errorf("unknown extension: got %v", err)
	}
}

// TestConfigFileKeepsBase: a file that sets some uplinks adds to the
// base's, and never changes the base's map.
func TestConfigFileKeepsBase(t *testing.T) {
	t.Parallel()
	base := DefaultConfig()
	base.UplinkCapacity = UplinkCapacities{"a": Rate(1e6)}
	path := filepath.Join(t.TempDir(), "agent.json")
	os.WriteFile(path, []byte(`{"uplink_capacity":{"b":"1Gbit"}}`), 0o600)
	cfg, err := LoadConfigFile(path, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.UplinkCapacity) != 2 || len(base.UplinkCapacity) != 1 {
		t.Errorf("loaded %v over base %v: want both uplinks loaded and the base untouched", cfg.UplinkCapacity, base.UplinkCapacity)
	}
	var js map[string]any
	b, _ := MarshalConfig(cfg, FormatJSON)
	if err := json.Unmarshal(b, &js); err != nil || len(js) != len(configFields()) {
		t.Errorf("JSON output has %d options (%v), want %d", len(js), err, len(configFields()))
	}
}

// TestSizeString: sizes print in the largest exact binary unit.
func TestSizeString(t *testing.T) {
	t.Parallel()
	for n, want := range map[Size]string{0: "0B", 1000: "1000B", 1024: "1KiB", 50 << 30: "50GiB", 1536 << 20: "1536MiB", 3 << 40: "3TiB"} {
		if got := n.String(); got != want {
			t.Errorf("Size(%d) = %q, want %q", int64(n), got, want)
		}
		var back Size
		if err := back.Set(n.String()); err != nil || back != n {
			t.Errorf("Size(%d) reads back as %d (%v)", int64(n), int64(back), err)
		}
	}
}
