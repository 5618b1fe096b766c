package campus

import "github.com/reclaimnet/reclaimnet/policy"

// PolicyLinks returns the campus's links in the policy vocabulary, at their
// current shaped rates and declared idle (policy.IdleLink): IDs are the link
// names ("access:a1", "uplink:a"), vertices are node names, building names
// (the building switches) and policy.CoreVertex. A node's
// policy.Node.AccessLink is its Node.Link.
func (c *Campus) PolicyLinks() []policy.Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]policy.Link, 0, len(c.links))
	for _, l := range c.links {
		b := l.B
		if l.Kind == Uplink {
			b = policy.CoreVertex
		}
		out = append(out, policy.IdleLink(l.Name, l.A, b, c.rates[l.Name].BytesPerSec()))
	}
	return out
}

// AllCounters reads the counters of every link, keyed by link name.
func (c *Campus) AllCounters() (map[string]Counters, error) {
	out := make(map[string]Counters, len(c.links))
	for _, l := range c.links {
		cs, err := c.Counters(l.Name)
		if err != nil {
			return nil, err
		}
		out[l.Name] = cs
	}
	return out, nil
}
