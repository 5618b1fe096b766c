package campus

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// NetNSDir is where `ip netns` keeps its named namespaces.
const NetNSDir = "/run/netns"

// Node is one campus node, constant after Build.
type Node struct {
	Name     string       // e.g. "a1"
	Building string       // e.g. "a"
	Addr     netip.Addr   // e.g. 10.77.1.1
	Subnet   netip.Prefix // the building's subnet, e.g. 10.77.1.0/24
	Gateway  netip.Addr   // the core's address in the building, e.g. 10.77.1.254
	NetNS    string       // namespace name, for `ip netns exec`
	Link     string       // name of its access link, e.g. "access:a1"
	Iface    string       // its interface inside NetNS ("eth0")
}

// NetNSPath is the namespace's bind mount, for setns(2) or nsenter --net=.
func (n Node) NetNSPath() string { return filepath.Join(NetNSDir, n.NetNS) }

// LinkKind tells access links from uplinks.
type LinkKind string

// Link kinds.
const (
	Access LinkKind = "access" // node ↔ building switch
	Uplink LinkKind = "uplink" // building switch ↔ core
)

// Link is one shaped veth pair. A and B use the vertex names of
// policy.Link: A is the node (access) or the building switch (uplink), B the
// building switch or "core". Direction "A→B" is A's egress.
type Link struct {
	Name string // "access:a1" or "uplink:a"
	Kind LinkKind
	A, B string
	// the two ends: namespace and interface name
	ANS, AIface string
	BNS, BIface string
}

// endpoint of a link or of a namespace's setup.
type end struct{ ns, iface string }

// Campus is a built campus. Its methods are safe for concurrent use.
type Campus struct {
	// constant after Build
	prefix string
	topo   Topology
	nodes  []Node
	byName map[string]int
	links  []Link
	byLink map[string]int
	nsAll  []string // every namespace, core first

	mu     sync.Mutex
	rates  map[string]Rate // link → current rate
	closed bool
}

// Prefix is the campus's namespace prefix ("cb<pid>x<hex4>").
func (c *Campus) Prefix() string { return c.prefix }

// Topology returns the topology the campus was built from.
func (c *Campus) Topology() Topology {
	t := c.topo
	t.Buildings = slices.Clone(t.Buildings)
	return t
}

// Nodes returns every node in topology order.
func (c *Campus) Nodes() []Node { return slices.Clone(c.nodes) }

// Node returns the named node.
func (c *Campus) Node(name string) (Node, bool) {
	i, ok := c.byName[name]
	if !ok {
		return Node{}, false
	}
	return c.nodes[i], true
}

// Links returns every link: access links in node order, then uplinks.
func (c *Campus) Links() []Link { return slices.Clone(c.links) }

// LinkByName returns the named link ("access:a1", "uplink:a").
func (c *Campus) LinkByName(name string) (Link, bool) {
	i, ok := c.byLink[name]
	if !ok {
		return Link{}, false
	}
	return c.links[i], true
}

// Rate returns the link's current rate (after SetRate).
func (c *Campus) Rate(link string) (Rate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rates[link]
	return r, ok
}

// NetNSNames returns the name of every namespace of the campus.
func (c *Campus) NetNSNames() []string { return slices.Clone(c.nsAll) }

// ErrUnknownNode and ErrUnknownLink are returned for names not in the campus.
var (
	ErrUnknownNode = errors.New("unknown campus node")
	ErrUnknownLink = errors.New("unknown campus link")
	ErrClosed      = errors.New("campus closed")
)

// ErrNetemUnavailable: Topology.Delay needs sch_netem, which the kernel lacks.
var ErrNetemUnavailable = errors.New("kernel lacks the netem qdisc (CONFIG_NET_SCH_NETEM) needed for link delay")

func newPrefix() (string, error) {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random prefix: %w", err)
	}
	return fmt.Sprintf("cb%dx%s", os.Getpid(), hex.EncodeToString(b[:])), nil
}

// plan computes the campus (names, addresses, links) without touching the
// kernel.
func plan(prefix string, topo Topology) *Campus {
	c := &Campus{
		prefix: prefix,
		topo:   topo,
		byName: map[string]int{},
		byLink: map[string]int{},
		rates:  map[string]Rate{},
	}
	core := prefix + "-core"
	c.nsAll = append(c.nsAll, core)
	var uplinks []Link
	for bi, b := range topo.Buildings {
		sw := prefix + "-sw-" + b.Name
		c.nsAll = append(c.nsAll, sw)
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(bi + 1), 0}), 24)
		gw := netip.AddrFrom4([4]byte{10, 77, byte(bi + 1), 254})
		for j := 1; j <= b.Nodes; j++ {
			name := nodeName(b.Name, j)
			n := Node{
				Name:     name,
				Building: b.Name,
				Addr:     netip.AddrFrom4([4]byte{10, 77, byte(bi + 1), byte(j)}),
				Subnet:   subnet,
				Gateway:  gw,
				NetNS:    prefix + "-" + name,
				Link:     string(Access) + ":" + name,
				Iface:    "eth0",
			}
			c.byName[name] = len(c.nodes)
			c.nodes = append(c.nodes, n)
			c.nsAll = append(c.nsAll, n.NetNS)
			c.links = append(c.links, Link{
				Name: n.Link, Kind: Access, A: name, B: b.Name,
				ANS: n.NetNS, AIface: "eth0",
				BNS: sw, BIface: fmt.Sprintf("acc%d", j),
			})
			c.rates[n.Link] = topo.AccessRate
		}
		l := Link{
			Name: string(Uplink) + ":" + b.Name, Kind: Uplink, A: b.Name, B: "core",
			ANS: sw, AIface: "uplink",
			BNS: core, BIface: "to-" + b.Name,
		}
		uplinks = append(uplinks, l)
		c.rates[l.Name] = topo.UplinkRate
	}
	c.links = append(c.links, uplinks...)
	for i, l := range c.links {
		c.byLink[l.Name] = i
	}
	return c
}

// Build creates the campus described by topo. On failure it removes
// whatever it had created. The caller must Close the campus.
func Build(ctx context.Context, topo Topology) (*Campus, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("build campus: network namespaces need root")
	}
	prefix, err := newPrefix()
	if err != nil {
		return nil, err
	}
	c := plan(prefix, topo)
	if err := c.build(ctx); err != nil {
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up after failed build: %w", cerr))
		}
		return nil, fmt.Errorf("build campus %s: %w", prefix, err)
	}
	return c, nil
}

func (c *Campus) build(ctx context.Context) error {
	// 1. namespaces
	var lines []string
	for _, ns := range c.nsAll {
		lines = append(lines, "netns add "+ns)
	}
	if err := batch(ctx, "ip", "", lines); err != nil {
		return fmt.Errorf("create namespaces: %w", err)
	}
	// 2. per-namespace sysctls, before any veth exists so "default" applies:
	// no IPv6 (no router solicitations or DAD in the counters), and the
	// core forwards.
	for _, ns := range c.nsAll {
		err := runInNS(ns, func() error {
			if err := writeSysctl("net/ipv6/conf/default/disable_ipv6", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if err := writeSysctl("net/ipv6/conf/all/disable_ipv6", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if ns == c.nsAll[0] {
				return writeSysctl("net/ipv4/ip_forward", "1")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("sysctls in %s: %w", ns, err)
		}
	}
	if c.topo.Delay > 0 {
		if err := probeNetem(ctx, c.nsAll[0]); err != nil {
			return err
		}
	}
	// 3. veth pairs, created directly in their namespaces (never in the
	// root namespace, so their names cannot collide with anything there).
	lines = lines[:0]
	for _, l := range c.links {
		lines = append(lines, fmt.Sprintf("link add %s netns %s type veth peer name %s netns %s",
			l.AIface, l.ANS, l.BIface, l.BNS))
	}
	if err := batch(ctx, "ip", "", lines); err != nil {
		return fmt.Errorf("create veth pairs: %w", err)
	}
	// 4. addresses, bridges, routes, per namespace
	ipCmds := map[string][]string{}
	add := func(ns string, format string, args ...any) {
		ipCmds[ns] = append(ipCmds[ns], fmt.Sprintf(format, args...))
	}
	for _, ns := range c.nsAll {
		add(ns, "link set lo up")
	}
	core := c.nsAll[0]
	for bi, b := range c.topo.Buildings {
		sw := c.prefix + "-sw-" + b.Name
		add(sw, "link add br0 type bridge stp_state 0 forward_delay 0")
		add(sw, "link set br0 up")
		up := c.links[c.byLink[string(Uplink)+":"+b.Name]]
		add(sw, "link set %s master br0", up.AIface)
		add(sw, "link set %s up", up.AIface)
		gw := netip.AddrFrom4([4]byte{10, 77, byte(bi + 1), 254})
		add(core, "addr add %s/24 dev %s", gw, up.BIface)
		add(core, "link set %s up", up.BIface)
	}
	for _, n := range c.nodes {
		l := c.links[c.byLink[n.Link]]
		add(l.BNS, "link set %s master br0", l.BIface)
		add(l.BNS, "link set %s up", l.BIface)
		add(n.NetNS, "addr add %s/24 dev %s", n.Addr, n.Iface)
		add(n.NetNS, "link set %s up", n.Iface)
		add(n.NetNS, "route add 10.77.0.0/16 via %s dev %s", n.Gateway, n.Iface)
	}
	for _, ns := range c.nsAll {
		if err := batch(ctx, "ip", ns, ipCmds[ns]); err != nil {
			return fmt.Errorf("configure %s: %w", ns, err)
		}
	}
	// 5. shaping on both ends of every link
	tcCmds := map[string][]string{}
	for _, l := range c.links {
		r := c.rates[l.Name]
		tcCmds[l.ANS] = append(tcCmds[l.ANS], shapeCmds(l.AIface, r, c.topo.Delay)...)
		tcCmds[l.BNS] = append(tcCmds[l.BNS], shapeCmds(l.BIface, r, c.topo.Delay)...)
	}
	for _, ns := range c.nsAll {
		if err := batch(ctx, "tc", ns, tcCmds[ns]); err != nil {
			return fmt.Errorf("shape links in %s: %w", ns, err)
		}
	}
	// 6. every path carrying packets before the campus is handed out
	return c.waitReachable(ctx)
}

// writeSysctl writes a sysctl of the calling thread's network namespace.
func writeSysctl(key, value string) error {
	if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s: %w", strings.ReplaceAll(key, "/", "."), err)
	}
	return nil
}

// batch runs `tool [-n ns] -batch -` with lines on stdin; ns "" is the root
// namespace. The error carries tool's stderr.
func batch(ctx context.Context, tool, ns string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	args := []string{}
	if ns != "" {
		args = append(args, "-n", ns)
	}
	args = append(args, "-batch", "-")
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// run runs one tool command and returns its error with stderr.
func run(ctx context.Context, tool string, args ...string) error {
	cmd := exec.CommandContext(ctx, tool, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
