package state

import (
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

func TestParseProtocols(t *testing.T) {
	cases := []struct {
		in   string
		want policy.Switches
	}{
		{"p1,p2,p3", policy.Switches{P1: true, P2: true, P3: true}},
		{"P3, p1", policy.Switches{P1: true, P3: true}},
		{"p2", policy.Switches{P2: true}},
		{"", policy.Switches{}},
		{"none", policy.Switches{}},
		{" NONE ", policy.Switches{}},
	}
	for _, c := range cases {
		got, err := ParseProtocols(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseProtocols(%q): got %+v, %v; want %+v", c.in, got, err, c.want)
		}
		// FormatSwitches writes what ParseProtocols reads back.
		if back, err := ParseProtocols(FormatSwitches(got)); err != nil || back != got {
			t.Errorf("round trip of %+v through %q: got %+v, %v", got, FormatSwitches(got), back, err)
		}
	}
	for _, bad := range []string{"p4", "p1,,p2", "p1,p1", "all", "p1;p2"} {
		if _, err := ParseProtocols(bad); err == nil || !strings.Contains(err.Error(), "p1, p2, p3") && !strings.Contains(err.Error(), "twice") {
			t.Errorf("ParseProtocols(%q): got error %v, want one naming the valid protocols (or the repeat)", bad, err)
		}
	}
	p := Protocols{Switches: policy.Switches{P3: true}, FixedInterval: 7 * time.Minute}
	if s := p.String(); !strings.Contains(s, "fixed interval 7m0s") || !strings.Contains(s, "random destination") || strings.Contains(s, "no admission") {
		t.Errorf("String of %+v: %q, want P1 and P2 explained, not P3", p, s)
	}
	if (&State{}).Protocols() != DefaultProtocols() || !DefaultProtocols().Switches.P1 || !DefaultProtocols().Switches.P3 {
		t.Errorf("a state without a recorded setting must report all protocols on, got %+v", (&State{}).Protocols())
	}
}
