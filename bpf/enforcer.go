package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultPinRoot holds one pin directory per node.
const DefaultPinRoot = "/sys/fs/bpf/reclaimnet"

// DefaultPinDir is the pin directory of node under DefaultPinRoot.
func DefaultPinDir(node string) (string, error) {
	if node == "" || node == "." || node == ".." || strings.ContainsAny(node, "/\x00") {
		return "", fmt.Errorf("node name %q cannot name a pin directory", node)
	}
	return filepath.Join(DefaultPinRoot, node), nil
}

// PinnedNodes lists the node directories under root that hold pinned
// enforcer maps.
func PinnedNodes(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	var nodes []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root, e.Name(), pinKsMode)); err == nil {
			nodes = append(nodes, e.Name())
		}
	}
	return nodes, nil
}

// AttachMode selects how the programs are attached.
type AttachMode uint8

const (
	// AttachAuto tries TCX and falls back to clsact + cls_bpf.
	AttachAuto AttachMode = iota
	// AttachTCX uses TCX links only (kernel 6.6+).
	AttachTCX
	// AttachCLS uses a clsact qdisc with cls_bpf filters only.
	AttachCLS
)

func (a AttachMode) String() string {
	switch a {
	case AttachAuto:
		return "auto"
	case AttachTCX:
		return "tcx"
	case AttachCLS:
		return "cls_bpf"
	}
	return fmt.Sprintf("attach(%d)", uint8(a))
}

// Config configures Open.
type Config struct {
	// Iface is the interface the programs attach to (egress and ingress).
	Iface string
	// PinDir is the bpffs directory for maps and links, one per node
	// (DefaultPinDir). Required.
	PinDir string
	// Attach selects TCX, cls_bpf or TCX with fallback (the default).
	Attach AttachMode
	// NoEgress and NoIngress leave one of the programs unattached (its
	// maps are still created and pinned).
	NoEgress, NoIngress bool
	// Logger receives attach and detach events; nil discards them.
	Logger *slog.Logger
}

// Enforcer is the loaded and attached programs of one node. Its Maps
// methods set flows, the kill-switch and read counters.
type Enforcer struct {
	*Maps

	// constant after construction
	cfg     Config
	ifindex int
	log     *slog.Logger
	egress  *ebpf.Program
	ingress *ebpf.Program

	mu       sync.Mutex
	closed   bool                  // guarded by mu
	nl       *netlink.Handle       // netlink in Open's namespace, for cls_bpf; guarded by mu
	links    []link.Link           // TCX links, pinned; guarded by mu
	filters  []*netlink.BpfFilter  // cls_bpf filters; guarded by mu
	attached map[string]AttachMode // direction -> how; guarded by mu
}

// Open loads the programs, pins their maps in cfg.PinDir (reusing maps
// already pinned there, so the kill-switch mode and protected ports
// survive an agent restart), clears the flow table (its flows belonged to
// the previous process's sockets) and attaches to cfg.Iface. The
// interface is looked up in the calling thread's network namespace.
func Open(cfg Config) (*Enforcer, error) {
	if cfg.Iface == "" {
		return nil, errors.New("open enforcer: no interface")
	}
	if cfg.PinDir == "" {
		return nil, errors.New("open enforcer: no pin directory")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	iface, err := net.InterfaceByName(cfg.Iface)
	if err != nil {
		return nil, fmt.Errorf("open enforcer: interface %s: %w", cfg.Iface, err)
	}
	if err := prepareBPFFS(cfg.PinDir); err != nil {
		return nil, fmt.Errorf("open enforcer: %w", err)
	}
	if err := os.MkdirAll(cfg.PinDir, 0o700); err != nil {
		return nil, fmt.Errorf("open enforcer: create pin directory: %w", err)
	}

	var objs reclaimnetObjects
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: cfg.PinDir}}
	if err := loadReclaimnetObjects(&objs, opts); err != nil {
		return nil, fmt.Errorf("open enforcer: %w", classifyLoadError(err))
	}
	e := &Enforcer{
		Maps: &Maps{
			pinDir: cfg.PinDir, flows: objs.Flows, destBytes: objs.DestBytes,
			ksMode: objs.KsMode, ksPorts: objs.KsPorts, ksCounts: objs.KsCounts,
		},
		cfg: cfg, ifindex: iface.Index, log: log,
		egress: objs.EgressFlows, ingress: objs.IngressKillswitch,
		attached: map[string]AttachMode{},
	}
	if err := e.clearFlows(); err != nil {
		e.closeObjects()
		return nil, fmt.Errorf("open enforcer: %w", err)
	}
	if !cfg.NoEgress {
		if err := e.attach("egress", e.egress); err != nil {
			e.shutdown(false) // keep the pinned maps: they may hold the owner's mode
			return nil, fmt.Errorf("open enforcer: %w", err)
		}
	}
	if !cfg.NoIngress {
		if err := e.attach("ingress", e.ingress); err != nil {
			e.shutdown(false)
			return nil, fmt.Errorf("open enforcer: %w", err)
		}
	}
	return e, nil
}

// Attached reports how each program is attached ("egress", "ingress").
func (e *Enforcer) Attached() map[string]AttachMode {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]AttachMode, len(e.attached))
	for k, v := range e.attached {
		out[k] = v
	}
	return out
}

// Ifindex is the index of the interface the programs attach to.
func (e *Enforcer) Ifindex() int { return e.ifindex }

func linkPinPath(dir, direction string) string { return filepath.Join(dir, "link_"+direction) }

func (e *Enforcer) attach(direction string, prog *ebpf.Program) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	pin := linkPinPath(e.cfg.PinDir, direction)
	// A link pinned by a previous agent keeps its old program running;
	// replace it.
	if old, err := link.LoadPinnedLink(pin, nil); err == nil {
		_ = old.Unpin()
		_ = old.Close()
	}
	var tcxErr error
	if e.cfg.Attach != AttachCLS {
		at := ebpf.AttachTCXIngress
		if direction == "egress" {
			at = ebpf.AttachTCXEgress
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: e.ifindex, Program: prog, Attach: at})
		if err == nil {
			if err := l.Pin(pin); err != nil {
				_ = l.Close()
				return fmt.Errorf("pin %s link: %w", direction, err)
			}
			e.links = append(e.links, l)
			e.attached[direction] = AttachTCX
			e.log.Info("bpf program attached", "direction", direction, "iface", e.cfg.Iface, "via", "tcx")
			return nil
		}
		tcxErr = err
		if e.cfg.Attach == AttachTCX {
			return fmt.Errorf("attach %s with tcx: %w", direction, classifyAttachError(err, "TCX (kernel 6.6+)"))
		}
	}
	if e.nl == nil {
		// A handle opened here stays in this thread's network namespace,
		// so Close can remove the filter from any thread.
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("attach %s: open netlink: %w", direction, err)
		}
		e.nl = h
	}
	f, err := attachCLS(e.nl, e.ifindex, direction, prog)
	if err != nil {
		if tcxErr != nil {
			return fmt.Errorf("attach %s: %w: neither TCX (%v) nor clsact/cls_bpf (%v)", direction, ErrUnsupported, tcxErr, err)
		}
		return fmt.Errorf("attach %s with cls_bpf: %w", direction, classifyAttachError(err, "clsact qdisc with cls_bpf"))
	}
	e.filters = append(e.filters, f)
	e.attached[direction] = AttachCLS
	e.log.Info("bpf program attached", "direction", direction, "iface", e.cfg.Iface, "via", "cls_bpf", "tcx_error", tcxErr)
	return nil
}

// attachCLS adds (or replaces) a direct-action cls_bpf filter on the
// interface's clsact qdisc, creating the qdisc if needed.
func attachCLS(nl *netlink.Handle, ifindex int, direction string, prog *ebpf.Program) (*netlink.BpfFilter, error) {
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := nl.QdiscReplace(qdisc); err != nil {
		return nil, fmt.Errorf("add clsact qdisc: %w", err)
	}
	parent := uint32(netlink.HANDLE_MIN_INGRESS)
	if direction == "egress" {
		parent = netlink.HANDLE_MIN_EGRESS
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex, Parent: parent, Handle: netlink.MakeHandle(0, 1),
			Protocol: unix.ETH_P_ALL, Priority: 1,
		},
		Fd: prog.FD(), Name: "reclaimnet_" + direction, DirectAction: true,
	}
	if err := nl.FilterReplace(f); err != nil {
		return nil, fmt.Errorf("add cls_bpf filter: %w", err)
	}
	return f, nil
}

// Close detaches the programs, removes the pins and releases everything:
// the node is back to an unenforced state. It is idempotent.
func (e *Enforcer) Close() error { return e.shutdown(true) }

// shutdown detaches what this enforcer attached and releases its handles;
// with unpin it also removes the pin directory.
func (e *Enforcer) shutdown(unpin bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	var errs []error
	for _, l := range e.links {
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin link: %w", err))
		}
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach link: %w", err))
		}
	}
	for _, f := range e.filters {
		if err := e.nl.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cls_bpf filter: %w", err))
		}
	}
	if e.nl != nil {
		e.nl.Close()
		e.nl = nil
	}
	e.links, e.filters = nil, nil
	e.attached = map[string]AttachMode{}
	e.closeObjects()
	if unpin {
		if err := os.RemoveAll(e.cfg.PinDir); err != nil {
			errs = append(errs, fmt.Errorf("remove pins: %w", err))
		}
	}
	e.log.Info("bpf programs detached", "iface", e.cfg.Iface)
	return errors.Join(errs...)
}

func (e *Enforcer) closeObjects() {
	_ = e.Maps.Close()
	_ = e.egress.Close()
	_ = e.ingress.Close()
}

// prepareBPFFS makes sure dir is on bpffs, mounting bpffs on
// /sys/fs/bpf when the directory lies below it and nothing is mounted.
func prepareBPFFS(dir string) error {
	err := checkBPFFS(dir)
	if err == nil || !errors.Is(err, ErrNoBPFFS) {
		return err
	}
	const root = "/sys/fs/bpf"
	clean := filepath.Clean(dir)
	if clean != root && !strings.HasPrefix(clean, root+"/") {
		return err
	}
	if mErr := unix.Mount("bpf", root, "bpf", 0, "mode=0700"); mErr != nil {
		return fmt.Errorf("%w; mount bpffs at %s: %v", err, root, mErr)
	}
	return checkBPFFS(dir)
}

// classifyLoadError wraps a load failure with the sentinel a caller can
// act on and says what is missing.
func classifyLoadError(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("load bpf objects: %w: %v", ErrPermission, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("load bpf objects: %w: %v (needs BTF, bpf_spin_lock in hash maps, LRU per-CPU hash maps, sched_cls programs)", ErrUnsupported, err)
	case errors.Is(err, ebpf.ErrMapIncompatible):
		return fmt.Errorf("load bpf objects: pinned maps from another version are in the way (remove the pin directory): %w", err)
	}
	return fmt.Errorf("load bpf objects: %w", err)
}

func classifyAttachError(err error, what string) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %v", ErrPermission, err)
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%w: %s: %v", ErrUnsupported, what, err)
	}
	return err
}
