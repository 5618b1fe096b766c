package enforce

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
)

// The resolver maps member addresses (IPv4-mapped or not) to their
// buildings, ignores members whose metadata is unreadable, lists the live
// members' buildings, and rebuilds its table only once a second.
func TestBuildingResolver(t *testing.T) {
	members := []mesh.Member{
		{Name: "p1", Addr: net.ParseIP("10.0.0.1").To4(), State: mesh.StateAlive, Meta: mesh.Meta{Building: "physics"}},
		{Name: "p2", Addr: net.ParseIP("10.0.0.2"), State: mesh.StateSuspect, Meta: mesh.Meta{Building: "physics"}},
		{Name: "c1", Addr: net.ParseIP("fd00::7"), State: mesh.StateAlive, Meta: mesh.Meta{Building: "chemistry"}},
		{Name: "gone", Addr: net.ParseIP("10.0.0.9"), State: mesh.StateLeft, Meta: mesh.Meta{Building: "library"}},
		{Name: "bad", Addr: net.ParseIP("10.0.0.66"), State: mesh.StateAlive, Meta: mesh.Meta{Building: "forged"}, MetaErr: errors.New("bad meta")},
	}
	calls := 0
	now := time.Unix(1_780_000_000, 0)
	r := NewBuildingResolver(func() []mesh.Member { calls++; return slices.Clone(members) }, func() time.Time { return now })
	for addr, want := range map[string]string{
		"10.0.0.1": "physics", "::ffff:10.0.0.2": "physics", "fd00::7": "chemistry", "10.0.0.9": "library",
		"10.0.0.66": "", "192.0.2.1": "", "fd00::8": "",
	} {
		got, ok := r.Resolve(netip.MustParseAddr(addr))
		if got != want || ok != (want != "") {
			t.Errorf("Resolve(%s) = %q, %v; want %q, %v", addr, got, ok, want, want != "")
		}
	}
	if got, want := r.Buildings(), []string{"chemistry", "physics"}; !slices.Equal(got, want) {
		t.Errorf("Buildings() = %q, want %q", got, want)
	}
	if calls != 1 {
		t.Errorf("member list read %d times within a second, want 1", calls)
	}
	members = append(members, mesh.Member{Name: "l1", Addr: net.ParseIP("10.0.1.1"), State: mesh.StateAlive, Meta: mesh.Meta{Building: "library"}})
	if b, ok := r.Resolve(netip.MustParseAddr("10.0.1.1")); ok {
		t.Errorf("new member resolved (%q) before the refresh period", b)
	}
	now = now.Add(resolverRefresh)
	if b, ok := r.Resolve(netip.MustParseAddr("10.0.1.1")); !ok || b != "library" {
		t.Errorf("new member after %v: got %q, %v; want library", resolverRefresh, b, ok)
	}
	if got, want := r.Buildings(), []string{"chemistry", "library", "physics"}; !slices.Equal(got, want) {
		t.Errorf("Buildings() after the refresh = %q, want %q", got, want)
	}
}
