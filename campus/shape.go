package campus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// shapeParams derives the HTB burst and the leaf queue size from the rate.
// The burst must exceed a 64 KiB GSO super-packet or HTB stalls veth
// traffic; the FIFO holds ~30 ms at the rate (at least 256 KiB), enough for
// TCP to fill the link without drops turning into lost throughput, small
// enough that a bulk flow does not add seconds of queueing for everyone else.
func shapeParams(r Rate) (burst, limit int64) {
	bytesPerSec := int64(r) / 8
	burst = max(bytesPerSec/100, 96<<10) // 10 ms of the rate
	limit = max(bytesPerSec*30/1000, 256<<10)
	return burst, limit
}

// htbQuantum keeps HTB from warning that the rate/r2q quantum is too big;
// with one class per qdisc it only needs to exceed the MTU.
const htbQuantum = 60000

func htbClass(verb, iface string, r Rate) string {
	burst, _ := shapeParams(r)
	return fmt.Sprintf("class %s dev %s parent 1: classid 1:1 htb rate %s ceil %s burst %d cburst %d quantum %d",
		verb, iface, r.tcRate(), r.tcRate(), burst, burst, htbQuantum)
}

func leafQdisc(verb, iface string, r Rate, delay time.Duration) string {
	_, limit := shapeParams(r)
	if delay > 0 {
		// netem's limit is in packets; bytes/1500 keeps the same queue.
		return fmt.Sprintf("qdisc %s dev %s parent 1:1 handle 10: netem delay %dus limit %d",
			verb, iface, delay.Microseconds(), max(limit/1500, 100))
	}
	return fmt.Sprintf("qdisc %s dev %s parent 1:1 handle 10: bfifo limit %d", verb, iface, limit)
}

// shapeCmds are the tc batch lines that shape iface's egress at r.
func shapeCmds(iface string, r Rate, delay time.Duration) []string {
	return []string{
		fmt.Sprintf("qdisc add dev %s root handle 1: htb default 1", iface),
		htbClass("add", iface, r),
		leafQdisc("add", iface, r, delay),
	}
}

// probeNetem checks that the kernel has sch_netem by adding one to ns's lo.
func probeNetem(ctx context.Context, ns string) error {
	if err := run(ctx, "tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"); err != nil {
		if strings.Contains(err.Error(), "unknown") {
			return fmt.Errorf("%w: %w", ErrNetemUnavailable, err)
		}
		return fmt.Errorf("probe netem: %w", err)
	}
	return run(ctx, "tc", "-n", ns, "qdisc", "del", "dev", "lo", "root")
}

func (c *Campus) link(name string) (Link, error) {
	i, ok := c.byLink[name]
	if !ok {
		return Link{}, fmt.Errorf("%w: %q", ErrUnknownLink, name)
	}
	return c.links[i], nil
}

// SetRate changes the rate of a link, both directions, at runtime
// (bandwidth fluctuation). Flows in progress adapt within a round trip.
func (c *Campus) SetRate(ctx context.Context, link string, r Rate) error {
	if r < minRate {
		return fmt.Errorf("set rate of %s: %v below %v", link, r, minRate)
	}
	l, err := c.link(link)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for _, e := range []end{{l.ANS, l.AIface}, {l.BNS, l.BIface}} {
		lines := []string{htbClass("change", e.iface, r)}
		if c.topo.Delay == 0 {
			lines = append(lines, leafQdisc("change", e.iface, r, 0))
		}
		if err := batch(ctx, "tc", e.ns, lines); err != nil {
			return fmt.Errorf("set rate of %s to %v: %w", link, r, err)
		}
	}
	c.rates[link] = r
	return nil
}

// SetLinkUp sets the switch-side (B) end of a link administratively up or
// down. Down is a pulled cable: the A side loses carrier but keeps its
// addresses and routes, so up restores connectivity as it was. Taking an
// uplink down partitions its whole building from the rest of the campus.
func (c *Campus) SetLinkUp(link string, up bool) error {
	l, err := c.link(link)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	h, err := handleAt(l.BNS)
	if err != nil {
		return err
	}
	defer h.Close()
	dev, err := h.LinkByName(l.BIface)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", l.BIface, l.BNS, err)
	}
	if up {
		err = h.LinkSetUp(dev)
	} else {
		err = h.LinkSetDown(dev)
	}
	if err != nil {
		return fmt.Errorf("set %s up=%t: %w", link, up, err)
	}
	return nil
}

// Disconnect partitions a node from the campus (its access link goes down).
func (c *Campus) Disconnect(node string) error {
	n, ok := c.Node(node)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	return c.SetLinkUp(n.Link, false)
}

// Reconnect undoes Disconnect.
func (c *Campus) Reconnect(node string) error {
	n, ok := c.Node(node)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	return c.SetLinkUp(n.Link, true)
}

// Counters are the kernel's interface counters of both ends of a link.
// AtoB counts what A sent (A's transmit counters), BtoA what B sent.
type Counters struct {
	AtoBBytes, BtoABytes     uint64
	AtoBPackets, BtoAPackets uint64
	// Drops are transmit drops at each end (the shaper's queue overflowing).
	AtoBDrops, BtoADrops uint64
}

// Counters reads a link's counters.
func (c *Campus) Counters(link string) (Counters, error) {
	l, err := c.link(link)
	if err != nil {
		return Counters{}, err
	}
	var out Counters
	for i, e := range []end{{l.ANS, l.AIface}, {l.BNS, l.BIface}} {
		s, err := ifaceStats(e.ns, e.iface)
		if err != nil {
			return Counters{}, fmt.Errorf("counters of %s: %w", link, err)
		}
		if i == 0 {
			out.AtoBBytes, out.AtoBPackets, out.AtoBDrops = s.TxBytes, s.TxPackets, s.TxDropped
		} else {
			out.BtoABytes, out.BtoAPackets, out.BtoADrops = s.TxBytes, s.TxPackets, s.TxDropped
		}
	}
	return out, nil
}

func ifaceStats(ns, iface string) (*netlink.LinkStatistics, error) {
	h, err := handleAt(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	dev, err := h.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("find %s in %s: %w", iface, ns, err)
	}
	s := dev.Attrs().Statistics
	if s == nil {
		return nil, fmt.Errorf("%s in %s has no statistics", iface, ns)
	}
	// qdisc drops (queue overflow) do not show in the link's tx_dropped;
	// add the root qdisc's drop count.
	if qs, err := h.QdiscList(dev); err == nil {
		for _, q := range qs {
			if q.Attrs().Parent == netlink.HANDLE_ROOT && q.Attrs().Statistics != nil && q.Attrs().Statistics.Queue != nil {
				s.TxDropped += uint64(q.Attrs().Statistics.Queue.Drops)
			}
		}
	}
	return s, nil
}

// handleAt opens a netlink handle inside the named namespace without
// switching any thread into it.
func handleAt(ns string) (*netlink.Handle, error) {
	nsh, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", ns, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", ns, err)
	}
	return h, nil
}
