package cli

import (
	"strings"
	"testing"
)

// TestBadInputIsUsageError: input no agent could act on sensibly is
// refused before any call, with exit 2 and a message that says what to
// give instead.
func TestBadInputIsUsageError(t *testing.T) {
	dir := t.TempDir() // no agent there: a call would fail with another code
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reclaim", "--data-dir", dir, "--notice", "1000000h"}, "--notice 1000000h0m0s: at most 24h0m0s"},
		{[]string{"reclaim", "--data-dir", dir, "--notice", "10"}, "a duration needs a unit (ns, us, ms, s, m, h)"},
		{[]string{"run", "--data-dir", dir, "--", ""}, "empty command name"},
		{[]string{"run", "--data-dir", dir, "--max-failures", "-1", "--", "true"}, "--max-failures -1: want 0 to 1000"},
		{[]string{"join", "--data-dir", dir, "host:99999"}, `peer "host:99999": port "99999": want a number from 1 to 65535`},
		{[]string{"join", "--data-dir", dir, ":7946"}, `peer ":7946": no host before the port`},
	} {
		code, _, errOut := runCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, ExitUsage, tc.want)
		}
	}
	for _, peer := range []string{"host", "host:7946", "10.0.0.1", "[fe80::1]:7946", "fe80::1"} {
		if err := validPeer(peer); err != nil {
			t.Errorf("peer %q: %v, want valid", peer, err)
		}
	}
}
