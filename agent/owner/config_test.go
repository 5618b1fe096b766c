package owner

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// The config file entries docs/owner.md shows.
const docsConfig = `{
  "lend_windows": ["Mon-Fri 19:00-08:00", "Sat,Sun"],
  "lend_tz": "Europe/Berlin",
  "lend_lead": "10m",
  "gpu": "notice 2m",
  "input": "notice 5m",
  "input_source": "auto",
  "cpu": "notice 5m",
  "cpu_threshold": 2,
  "cpu_for": "3m",
  "idle": "20m",
  "max_reclaims_per_hour": 2
}`

func TestConfigFromJSON(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(docsConfig), &c); err != nil {
		t.Fatal(err)
	}
	p := policy(t, c)
	if got := p.Schedule.String(); got != "Mon-Fri 19:00-08:00; Sat,Sun (Europe/Berlin)" {
		t.Errorf("schedule %q", got)
	}
	if p.Lead != 10*time.Minute || p.GPU != (Action{Notice: 2 * time.Minute}) || p.Input != (Action{Notice: 5 * time.Minute}) ||
		p.CPU != (Action{Notice: 5 * time.Minute}) || p.CPUThreshold != 2 || p.CPUFor != 3*time.Minute ||
		p.Idle != 20*time.Minute || p.MaxReclaimsPerHour != 2 || p.InputSource != InputAuto {
		t.Errorf("policy %+v", p)
	}
	// What it marshals reads back the same.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var again Config
	if err := json.Unmarshal(b, &again); err != nil || policy(t, again).String() != p.String() {
		t.Errorf("round trip through %s: %v", b, err)
	}
}

func TestConfigDefaults(t *testing.T) {
	zero := policy(t, Config{})
	def := policy(t, DefaultConfig())
	if zero.String() != def.String() {
		t.Errorf("the zero config:\n%s\nthe default:\n%s", zero, def)
	}
	if !def.Schedule.Always() || def.Lead != DefaultLead || def.GPU != (Action{Notice: 2 * time.Minute}) || !def.Input.Off() || !def.CPU.Off() ||
		def.Idle != DefaultIdle || def.MaxReclaimsPerHour != DefaultMaxReclaimsPerHour || def.Schedule.Location() != time.Local {
		t.Errorf("default policy %+v", def)
	}
	c := Config{LendWindows: []string{"Sat"}}
	policy(t, c)
	if c.LendLead != 0 || c.GPU != "" {
		t.Errorf("Policy changed its config: %+v", c)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want []string
	}{
		{"bad window", Config{LendWindows: []string{"Mon-Fry"}}, []string{`unknown day "Fry"`}},
		{"bad zone", Config{LendTZ: "Europe/Atlantis"}, []string{`"Europe/Atlantis"`}},
		{"bad action", Config{GPU: "soon"}, []string{"owner gpu", `"soon"`}},
		{"zero notice", Config{Input: "notice 0s"}, []string{"owner input", "positive"}},
		{"negative lead", Config{LendLead: Duration(-time.Minute)}, []string{"lend lead"}},
		{"negative idle", Config{Idle: Duration(-time.Minute)}, []string{"owner idle"}},
		{"negative cpu threshold", Config{CPUThreshold: -1}, []string{"cpu threshold"}},
		{"negative cap", Config{MaxReclaimsPerHour: -1}, []string{"max reclaims"}},
		{"bad input source", Config{InputSource: "webcam"}, []string{`"webcam"`}},
		{"several at once", Config{GPU: "x", CPU: "y"}, []string{"owner gpu", "owner cpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.c.Policy()
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("policy %v, error %v; want ErrBadConfig", p, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	var d Duration
	if err := json.Unmarshal([]byte(`600`), &d); err == nil {
		t.Error("a bare number read as a duration")
	}
}

func TestParseAction(t *testing.T) {
	for in, want := range map[string]Action{
		"off": {}, "now": {Now: true}, "NOW": {Now: true}, "notice 2m": {Notice: 2 * time.Minute}, " notice   90s ": {Notice: 90 * time.Second},
	} {
		got, err := ParseAction(in)
		if err != nil || got != want {
			t.Errorf("ParseAction(%q) = %v, %v; want %v", in, got, err, want)
		}
		if again, _ := ParseAction(got.String()); again != got {
			t.Errorf("%q writes %q, which reads %v", in, got.String(), again)
		}
	}
	for _, bad := range []string{"", "notice", "notice 2", "notice -1m", "now please", "2m"} {
		if got, err := ParseAction(bad); err == nil {
			t.Errorf("ParseAction(%q) = %v, want an error", bad, got)
		}
	}
}
