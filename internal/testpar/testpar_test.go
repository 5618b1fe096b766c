package testpar

import (
	"flag"
	"testing"
)

// SetDefault sets -test.parallel once; a value already set (here by the
// first call, as by -parallel on the command line) is kept.
func TestSetDefault(t *testing.T) {
	f := flag.Lookup("test.parallel")
	if f == nil {
		t.Fatal("no -test.parallel flag in the test binary")
	}
	explicit := false
	flag.Visit(func(g *flag.Flag) { explicit = explicit || g.Name == "test.parallel" })
	before := f.Value.String()
	if err := SetDefault(7); err != nil {
		t.Fatal(err)
	}
	if explicit {
		if got := f.Value.String(); got != before {
			t.Fatalf("-parallel %s given on the command line, SetDefault changed it to %s", before, got)
		}
	} else if got := f.Value.String(); got != "7" {
		t.Fatalf("after SetDefault(7): -test.parallel %s, want 7", got)
	}
	want := f.Value.String()
	if err := SetDefault(3); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != want {
		t.Fatalf("a second SetDefault(3) changed -test.parallel from %s to %s", want, got)
	}
	if err := SetDefault(0); err == nil {
		t.Fatal("SetDefault(0): no error")
	}
}
