package campus

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

func TestTopologyValidate(t *testing.T) {
	ok := DefaultTopology()
	with := func(f func(*Topology)) Topology {
		t := DefaultTopology()
		f(&t)
		return t
	}
	cases := []struct {
		name    string
		topo    Topology
		wantErr string // "" = valid
	}{
		{"default", ok, ""},
		{"small", SmallTopology(), ""},
		{"no buildings", with(func(t *Topology) { t.Buildings = nil }), "no buildings"},
		{"empty name", with(func(t *Topology) { t.Buildings[0].Name = "" }), "name"},
		{"name ends in digit", with(func(t *Topology) { t.Buildings[0].Name = "a1" }), "name"},
		{"upper case", with(func(t *Topology) { t.Buildings[0].Name = "A" }), "name"},
		{"name too long", with(func(t *Topology) { t.Buildings[0].Name = "abcdefghi" }), "name"},
		{"reserved core", with(func(t *Topology) { t.Buildings[0].Name = "core" }), "reserved"},
		{"duplicate", with(func(t *Topology) { t.Buildings[1].Name = "a" }), "twice"},
		{"zero nodes", with(func(t *Topology) { t.Buildings[2].Nodes = 0 }), "nodes"},
		{"too many nodes", with(func(t *Topology) { t.Buildings[2].Nodes = 251 }), "nodes"},
		{"access too slow", with(func(t *Topology) { t.AccessRate = 1000 }), "access rate"},
		{"uplink zero", with(func(t *Topology) { t.UplinkRate = 0 }), "uplink rate"},
		{"negative delay", with(func(t *Topology) { t.Delay = -time.Millisecond }), "delay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.topo.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidTopology) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want ErrInvalidTopology mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestPlanAddressesAndLinks(t *testing.T) {
	c := plan("cb1x0000", DefaultTopology())
	if got, want := len(c.nodes), 8; got != want {
		t.Fatalf("got %d nodes, want %d", got, want)
	}
	if got, want := len(c.links), 8+3; got != want {
		t.Fatalf("got %d links, want %d", got, want)
	}
	if got, want := len(c.nsAll), 1+3+8; got != want {
		t.Fatalf("got %d namespaces, want %d", got, want)
	}
	n, ok := c.Node("b3")
	if !ok {
		t.Fatal("node b3 missing")
	}
	if n.Addr.String() != "10.77.2.3" || n.Gateway.String() != "10.77.2.254" || n.Subnet.String() != "10.77.2.0/24" {
		t.Fatalf("b3: got addr %v gw %v subnet %v, want 10.77.2.3 10.77.2.254 10.77.2.0/24", n.Addr, n.Gateway, n.Subnet)
	}
	if n.NetNS != "cb1x0000-b3" || n.NetNSPath() != "/run/netns/cb1x0000-b3" {
		t.Fatalf("b3: got netns %q path %q", n.NetNS, n.NetNSPath())
	}
	seen := map[string]bool{}
	for _, l := range c.links {
		for _, e := range []end{{l.ANS, l.AIface}, {l.BNS, l.BIface}} {
			if len(e.iface) > 15 {
				t.Errorf("link %s: interface name %q longer than IFNAMSIZ-1", l.Name, e.iface)
			}
			if seen[e.ns+"/"+e.iface] {
				t.Errorf("link %s: interface %s/%s used twice", l.Name, e.ns, e.iface)
			}
			seen[e.ns+"/"+e.iface] = true
		}
	}
	up, ok := c.LinkByName("uplink:c")
	if !ok || up.A != "c" || up.B != "core" || up.BNS != "cb1x0000-core" {
		t.Fatalf("uplink:c = %+v, %v; want A=c B=core in the core namespace", up, ok)
	}
	if r, _ := c.Rate("uplink:c"); r != 60*Mbit {
		t.Fatalf("uplink:c rate = %v, want 60Mbit/s", r)
	}
}

func TestRateString(t *testing.T) {
	for r, want := range map[Rate]string{200 * Mbit: "200Mbit/s", 2 * Gbit: "2Gbit/s", 64 * Kbit: "64Kbit/s", 1500: "1500bit/s"} {
		if got := r.String(); got != want {
			t.Errorf("Rate(%d).String() = %q, want %q", int64(r), got, want)
		}
	}
	if got := (8 * Mbit).BytesPerSec(); got != 1e6 {
		t.Errorf("8Mbit BytesPerSec = %v, want 1e6", got)
	}
}

func TestPolicyLinksFindPaths(t *testing.T) {
	c := plan("cb1x0000", SmallTopology())
	topo := policy.NewTopology(c.PolicyLinks())
	cases := []struct {
		from, to string
		want     []string
	}{
		{"a1", "a2", []string{"access:a1", "access:a2"}},
		{"a1", "c2", []string{"access:a1", "uplink:a", "uplink:c", "access:c2"}},
	}
	for _, tc := range cases {
		hops, ok := topo.Path(tc.from, tc.to)
		if !ok {
			t.Fatalf("no path %s → %s", tc.from, tc.to)
		}
		var got []string
		for _, h := range hops {
			got = append(got, h.Link)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("path %s → %s: got %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	for _, l := range c.PolicyLinks() {
		want := DefaultTopology().AccessRate.BytesPerSec()
		if strings.HasPrefix(l.ID, "uplink:") {
			want = DefaultTopology().UplinkRate.BytesPerSec()
		}
		if l.Capacity != want {
			t.Errorf("link %s capacity %v bytes/s, want %v", l.ID, l.Capacity, want)
		}
	}
}
