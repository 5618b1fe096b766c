package mesh

import (
	"math/rand/v2"
	"net"
	"strconv"
	"time"
)

// reconnectPerRound bounds the dead members one reconnect round dials:
// each unreachable one can take memberlist's TCP timeout (10 s on a LAN).
const reconnectPerRound = 3

// reconnectLoop tries, every interval, to rejoin a few of the members this
// node declared dead, until Shutdown. A join that reaches one merges both
// sides' views: each node refutes the other's "dead" verdict about itself,
// and the join events bring it back to the agent (and Raft).
func (m *Mesh) reconnectLoop(interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		addrs := m.reconnectTargets(time.Now(), timeout)
		if len(addrs) == 0 {
			continue
		}
		n, err := m.list.Join(addrs)
		if n > 0 {
			m.logger.Info("rejoined members declared dead", "contacted", n, "tried", len(addrs))
		} else {
			m.logger.Debug("reconnect: no dead member answered", "tried", len(addrs), "err", err)
		}
	}
}

// reconnectTargets forgets the members dead for longer than timeout and
// returns the gossip addresses of at most reconnectPerRound of the others,
// chosen at random (none while this node is leaving).
func (m *Mesh) reconnectTargets(now time.Time, timeout time.Duration) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaving || m.closed {
		return nil
	}
	var addrs []string
	for name, since := range m.failed {
		mem, ok := m.departed[name]
		if !ok || now.Sub(since) > timeout {
			delete(m.failed, name)
			continue
		}
		addrs = append(addrs, net.JoinHostPort(mem.Addr.String(), strconv.Itoa(int(mem.Port))))
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return addrs[:min(len(addrs), reconnectPerRound)]
}
