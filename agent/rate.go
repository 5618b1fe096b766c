package agent

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/reclaimnet/reclaimnet/agent/view"
)

// DefaultLinkCapacity is the node's access link assumed without
// --link-capacity: 1 Gbit/s (docs/design.md §0), bytes/s.
const DefaultLinkCapacity = view.DefaultAccessCapacity

// Rate is a data rate in bytes/s. It reads "1Gbit", "100Mbit", "125MB",
// "64MiB" or a plain number of bytes/s, from a flag or JSON.
type Rate float64

var rateUnits = []struct {
	suffix string
	bytes  float64 // bytes/s per unit
}{
	// Longest suffixes first, so "mbit" is not read as "bit".
	{"tbit", 1e12 / 8}, {"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"bit", 1.0 / 8},
	{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
	{"tb", 1e12}, {"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1},
}

// ParseRate reads a positive rate such as "1Gbit" or "1Gbps" (bits/s,
// decimal), "125MB", "125MBps" or "64MiB" (bytes/s) or "125000000"
// (bytes/s). A trailing "/s" is allowed.
func ParseRate(s string) (Rate, error) {
	in := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	switch {
	case strings.HasSuffix(in, "bps"): // Mbps: megabits
		in = strings.TrimSuffix(in, "bps") + "bit"
	case strings.HasSuffix(in, "Bps"): // MBps: megabytes
		in = strings.TrimSuffix(in, "Bps") + "B"
	}
	in = strings.ToLower(in)
	scale := 1.0
	for _, u := range rateUnits {
		if strings.HasSuffix(in, u.suffix) {
			in, scale = strings.TrimSpace(strings.TrimSuffix(in, u.suffix)), u.bytes
			break
		}
	}
	v, err := strconv.ParseFloat(in, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return 0, fmt.Errorf("rate %q: want a positive number with a unit such as 1Gbit, 100Mbit, 125MB or 64MiB", s)
	}
	return Rate(v * scale), nil
}

// String writes the rate in bits/s with the largest whole-ish unit ("0"
// for none).
func (r Rate) String() string {
	if r == 0 {
		return "0"
	}
	bits := float64(r) * 8
	for _, u := range []struct {
		name string
		bits float64
	}{{"Tbit", 1e12}, {"Gbit", 1e9}, {"Mbit", 1e6}, {"kbit", 1e3}} {
		if bits >= u.bits {
			return strconv.FormatFloat(bits/u.bits, 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatFloat(bits, 'f', -1, 64) + "bit"
}

// Set implements flag.Value.
func (r *Rate) Set(s string) error {
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Type names the flag's value in the help.
func (r *Rate) Type() string { return "rate" }

// MarshalJSON writes the rate as a string ("1Gbit"); zero (none, or the
// default) as 0.
func (r Rate) MarshalJSON() ([]byte, error) {
	if r == 0 {
		return []byte("0"), nil
	}
	return json.Marshal(r.String())
}

// UnmarshalJSON reads a string with a unit or a number of bytes/s (0:
// none, or the default).
func (r *Rate) UnmarshalJSON(b []byte) error {
	var n float64
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 || math.IsInf(n, 0) {
			return fmt.Errorf("rate %v: want a non-negative number of bytes/s", n)
		}
		*r = Rate(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("rate: want a string like \"1Gbit\" or a number of bytes/s: %w", err)
	}
	return r.Set(s)
}
