package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

func TestOpenRejectsBadConfig(t *testing.T) {
	if _, err := Open(Config{PinDir: "/sys/fs/bpf/x"}); err == nil {
		t.Error("Open without an interface: nil error, want one")
	}
	if _, err := Open(Config{Iface: "lo"}); err == nil {
		t.Error("Open without a pin directory: nil error, want one")
	}
	if _, err := Open(Config{Iface: "rn-no-such-if", PinDir: "/sys/fs/bpf/x"}); err == nil {
		t.Error("Open on a missing interface: nil error, want one")
	}
	// A pin directory that is not on bpffs (and not below /sys/fs/bpf,
	// where Open would mount it) is refused before anything is loaded.
	if _, err := Open(Config{Iface: "lo", PinDir: t.TempDir()}); !errors.Is(err, ErrNoBPFFS) {
		t.Errorf("Open with a pin directory on tmpfs: %v, want ErrNoBPFFS", err)
	}
	if _, err := OpenPinned(t.TempDir()); !errors.Is(err, ErrNoBPFFS) {
		t.Errorf("OpenPinned on tmpfs: %v, want ErrNoBPFFS", err)
	}
}

func TestErrorClassification(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("load: %w", unix.EPERM), ErrPermission},
		{fmt.Errorf("load: %w", ebpf.ErrNotSupported), ErrUnsupported},
	} {
		if got := classifyLoadError(c.err); !errors.Is(got, c.want) {
			t.Errorf("classifyLoadError(%v) = %v, want it to wrap %v", c.err, got, c.want)
		}
	}
	for _, c := range []struct {
		err  error
		want error
	}{
		{unix.EPERM, ErrPermission},
		{fmt.Errorf("tcx: %w", ebpf.ErrNotSupported), ErrUnsupported},
		{unix.EOPNOTSUPP, ErrUnsupported},
	} {
		got := classifyAttachError(c.err, "TCX (kernel 6.6+)")
		if !errors.Is(got, c.want) {
			t.Errorf("classifyAttachError(%v) = %v, want it to wrap %v", c.err, got, c.want)
		}
		if c.want == ErrUnsupported && !strings.Contains(got.Error(), "TCX (kernel 6.6+)") {
			t.Errorf("unsupported error %q does not name what is missing", got)
		}
	}
}

func TestPinDirs(t *testing.T) {
	if got, err := DefaultPinDir("gpu-07"); err != nil || got != "/sys/fs/bpf/reclaimnet/gpu-07" {
		t.Errorf("DefaultPinDir(gpu-07) = %q, %v; want /sys/fs/bpf/reclaimnet/gpu-07", got, err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "x\x00"} {
		if _, err := DefaultPinDir(bad); err == nil {
			t.Errorf("DefaultPinDir(%q): nil error, want one", bad)
		}
	}
	root := t.TempDir()
	for _, n := range []string{"node-a", "node-b"} {
		if err := os.MkdirAll(filepath.Join(root, n), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, n, pinKsMode), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := PinnedNodes(root)
	if err != nil || !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Errorf("PinnedNodes = %v, %v; want [node-a node-b]", got, err)
	}
	if got, err := PinnedNodes(filepath.Join(root, "absent")); err != nil || len(got) != 0 {
		t.Errorf("PinnedNodes(absent) = %v, %v; want none, nil", got, err)
	}
}
