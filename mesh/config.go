package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profile selects memberlist's timing preset.
type Profile uint8

const (
	// ProfileLAN is memberlist.DefaultLANConfig: gossip every 200 ms to 3
	// nodes, probe every 1 s, push/pull every 30 s (what Consul/Nomad use
	// on a LAN).
	ProfileLAN Profile = iota
	// ProfileLocal is memberlist.DefaultLocalConfig: gossip every 100 ms,
	// shorter timeouts, push/pull every 15 s; for loopback and tests.
	ProfileLocal
)

// DefaultGossipPort is the gossip port (TCP and UDP; docs/design.md §4).
const DefaultGossipPort = 7946

// Config configures one node's mesh. Create never modifies it.
type Config struct {
	// Name is the node's unique name in the cluster.
	Name string
	// BindAddr and BindPort are where gossip listens (port 0 picks one;
	// LocalAddr reports it).
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are what peers use to reach this
	// node; empty/0 means the bound address.
	AdvertiseAddr string
	AdvertisePort int
	// Meta is announced to every member; Meta.ID is set to Name.
	Meta Meta
	// GossipKeys encrypt gossip (AES-GCM; 16, 24 or 32 bytes each). The
	// first key encrypts, all of them decrypt (key rotation). No keys
	// means no encryption, which Validate allows only with AllowPlaintext.
	GossipKeys     [][]byte
	AllowPlaintext bool
	// Label is prepended to every gossip packet; nodes with different
	// labels ignore each other (several clusters on one network).
	Label string
	// Profile is memberlist's timing preset.
	Profile Profile
	// Transport replaces the UDP/TCP transport (MemNetwork in tests).
	Transport memberlist.NodeAwareTransport
	// EventBuffer is how many membership events wait for the agent before
	// new ones are dropped (and counted in Stats). Default 1024.
	EventBuffer int
	// OnTelemetry, if set, is called with every report accepted from a
	// peer, on memberlist's goroutine: it must return at once.
	OnTelemetry func(Telemetry)
	// ReconnectInterval is how often this node tries to rejoin members it
	// declared dead (not those that left). After a partition both sides
	// hold each other dead and memberlist stops probing the dead, so
	// without this the cluster stays split when the network heals (serf's
	// reconnect). Zero means DefaultReconnectInterval; negative turns it
	// off.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a dead member is retried before it is
	// forgotten (a node that comes back later rejoins by itself, as every
	// agent joins its peers when it starts). Zero means
	// DefaultReconnectTimeout.
	ReconnectTimeout time.Duration
	Logger           *slog.Logger
}

// Reconnect defaults: a healed partition closes within about 10 s, and a
// machine switched off is retried for a day (each round dials at most
// reconnectPerRound dead members, so many machines off cost little).
const (
	DefaultReconnectInterval = 10 * time.Second
	DefaultReconnectTimeout  = 24 * time.Hour
)

// DefaultConfig returns a configuration for a LAN deployment; the caller
// sets Name, GossipKeys and Meta.
func DefaultConfig() Config {
	return Config{
		BindAddr:    "0.0.0.0",
		BindPort:    DefaultGossipPort,
		Label:       "reclaimnet",
		Profile:     ProfileLAN,
		EventBuffer: 1024,
	}
}

// DefaultLocalConfig returns a configuration for loopback and tests:
// 127.0.0.1, port 0, memberlist's fast local timings.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.BindAddr = "127.0.0.1"
	c.BindPort = 0
	c.Profile = ProfileLocal
	return c
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("node name is empty")
	}
	if len(c.Name) > MaxNodeNameLen {
		return fmt.Errorf("node name %q: longer than %d bytes", c.Name, MaxNodeNameLen)
	}
	if c.Transport == nil && net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("bind address %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return fmt.Errorf("advertise address %q is not an IP address", c.AdvertiseAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 || c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return fmt.Errorf("gossip port out of range")
	}
	if len(c.GossipKeys) == 0 && !c.AllowPlaintext {
		return errors.New("no gossip key (generate one with 'reclaimnet keygen')")
	}
	for i, k := range c.GossipKeys {
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return fmt.Errorf("gossip key %d is %d bytes, want 16, 24 or 32", i, n)
		}
	}
	if len(c.Label) > memberlist.LabelMaxSize {
		return fmt.Errorf("gossip label longer than %d bytes", memberlist.LabelMaxSize)
	}
	if c.EventBuffer < 0 {
		return errors.New("negative event buffer")
	}
	if c.ReconnectTimeout < 0 {
		return errors.New("negative reconnect timeout")
	}
	m := c.Meta
	m.ID = c.Name
	if _, err := m.Encode(); err != nil {
		return fmt.Errorf("node metadata: %w", err)
	}
	return nil
}
