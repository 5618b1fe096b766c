package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/trace"
)

// GroupConfig adds departures of groups of nodes to the generator (the
// correlated-departure mode; the zero value adds none): a campus loses
// machines together when a building's power or network fails, when a lab
// powers its room off, and when a lab closes its room every evening. The
// independent departures of GenConfig stay as they are; these come on top
// (a node already away is not taken again). DefaultGroupConfig gives the
// mode's documented values.
type GroupConfig struct {
	// LabSize groups each building's nodes, in order, into labs of this
	// many (the trace's lab field, b1-lab1, b1-lab2, …); 0: no labs.
	LabSize int
	// BuildingEventsPerDay is the rate of building-wide events per
	// building; each takes every up node of the building with probability
	// BuildingShare, their departures spread over Spread. A share
	// BuildingNoticeShare of the events are announced BuildingNotice
	// ahead (planned maintenance), the others give no notice (power,
	// network). Nodes stay away an exponential time of mean
	// BuildingAbsence (at least 10 min).
	BuildingEventsPerDay, BuildingShare, BuildingNoticeShare float64
	BuildingNotice, BuildingAbsence                          time.Duration
	// LabEventsPerDay is the rate, per lab, of a lab powering its room
	// off without notice: each member leaves with probability LabShare,
	// within Spread, away for an exponential hour (at least 10 min).
	LabEventsPerDay, LabShare float64
	// ScheduledLabs labs (spread over the buildings) close their room
	// every weekday at CloseAt (time of day, UTC), announced LabNotice
	// ahead, each node within Spread, and reopen at OpenAt the next
	// weekday.
	ScheduledLabs   int
	CloseAt, OpenAt time.Duration
	LabNotice       time.Duration
	// Spread is how far apart the departures of one group fall.
	Spread time.Duration
}

// DefaultGroupConfig is the correlated-departure mode: labs of 4 nodes; a
// building-wide event every two weeks per building taking 60 % of its nodes
// (a quarter of them announced 10 min ahead), away an hour on average; a
// lab power-off without notice once a month per lab taking 80 % of it; two
// labs closing at 19:00 on weekdays with 5 min of notice and reopening at
// 08:00; each group within a minute. On the calibrated 54-node campus this
// adds about 500 departures to the 847 independent ones.
func DefaultGroupConfig() GroupConfig {
	return GroupConfig{
		LabSize:              4,
		BuildingEventsPerDay: 1.0 / 14, BuildingShare: 0.6, BuildingNoticeShare: 0.25,
		BuildingNotice: 10 * time.Minute, BuildingAbsence: time.Hour,
		LabEventsPerDay: 1.0 / 30, LabShare: 0.8,
		ScheduledLabs: 2, CloseAt: 19 * time.Hour, OpenAt: 8 * time.Hour, LabNotice: 5 * time.Minute,
		Spread: time.Minute,
	}
}

// on reports whether the configuration adds anything.
func (g GroupConfig) on() bool {
	return g.LabSize > 0 || g.BuildingEventsPerDay > 0 || g.LabEventsPerDay > 0 || g.ScheduledLabs > 0
}

// validate reports a group configuration the generator cannot honour.
func (g GroupConfig) validate() error {
	switch {
	case g.LabSize < 0 || g.ScheduledLabs < 0:
		return fmt.Errorf("generator: negative lab size or scheduled labs")
	case g.BuildingEventsPerDay < 0 || g.LabEventsPerDay < 0:
		return fmt.Errorf("generator: negative group event rate")
	case g.BuildingShare < 0 || g.BuildingShare > 1 || g.LabShare < 0 || g.LabShare > 1 || g.BuildingNoticeShare < 0 || g.BuildingNoticeShare > 1:
		return fmt.Errorf("generator: group shares must be in [0,1]")
	case (g.LabEventsPerDay > 0 || g.ScheduledLabs > 0) && g.LabSize == 0:
		return fmt.Errorf("generator: lab events need labs (lab size > 0)")
	case g.BuildingNoticeShare > 0 && g.BuildingNotice < 10*time.Second, g.ScheduledLabs > 0 && g.LabNotice < 10*time.Second:
		return fmt.Errorf("generator: a group's notice must be at least 10 s")
	case g.ScheduledLabs > 0 && (g.CloseAt < 0 || g.CloseAt >= 24*time.Hour || g.OpenAt < 0 || g.OpenAt >= 24*time.Hour):
		return fmt.Errorf("generator: lab close and open times must be times of day")
	case g.Spread < 0:
		return fmt.Errorf("generator: negative spread")
	}
	return nil
}

// forcedDeparture is one departure of a group, with the node's return.
type forcedDeparture struct {
	t, back float64
	notice  float64 // 0: emergency
}

// assignLabs names each building's labs on the trace's nodes.
func (g GroupConfig) assignLabs(tr *trace.Trace) {
	if g.LabSize <= 0 {
		return
	}
	seen := map[string]int{}
	for i := range tr.Nodes {
		b := tr.Nodes[i].Building
		tr.Nodes[i].Lab = fmt.Sprintf("%s-lab%d", b, seen[b]/g.LabSize+1)
		seen[b]++
	}
}

// groupDepartures draws every group's departures for the trace's nodes
// (labs assigned), by node ID, in time order; its own random stream, so the
// independent departures drawn beside them keep theirs.
func (g GroupConfig) groupDepartures(c GenConfig, tr *trace.Trace) map[string][]forcedDeparture {
	out := map[string][]forcedDeparture{}
	if !g.on() {
		return out
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x9a0c5))
	dur := c.Duration.Seconds()
	spread := g.Spread.Seconds()
	away := func(mean float64) float64 { return max(600, rng.ExpFloat64()*mean) }
	poisson := func(perDay float64, each func(t float64)) {
		if perDay <= 0 {
			return
		}
		for t := rng.ExpFloat64() / perDay * 86400; t < dur; t += rng.ExpFloat64() / perDay * 86400 {
			each(t)
		}
	}
	byGroup := func(key func(trace.NodeRec) string) ([]string, map[string][]string) {
		members := map[string][]string{}
		var keys []string
		for _, n := range tr.Nodes {
			if n.Storage() {
				continue
			}
			k := key(n)
			if k == "" {
				continue
			}
			if _, ok := members[k]; !ok {
				keys = append(keys, k)
			}
			members[k] = append(members[k], n.ID)
		}
		sort.Strings(keys)
		return keys, members
	}
	buildings, inBuilding := byGroup(func(n trace.NodeRec) string { return n.Building })
	for _, b := range buildings {
		poisson(g.BuildingEventsPerDay, func(t float64) {
			notice := 0.0
			if rng.Float64() < g.BuildingNoticeShare {
				notice = g.BuildingNotice.Seconds()
			}
			for _, id := range inBuilding[b] {
				if rng.Float64() < g.BuildingShare {
					at := t + rng.Float64()*spread
					out[id] = append(out[id], forcedDeparture{t: at, notice: notice, back: at + away(g.BuildingAbsence.Seconds())})
				}
			}
		})
	}
	labs, inLab := byGroup(func(n trace.NodeRec) string { return n.Lab })
	for _, l := range labs {
		poisson(g.LabEventsPerDay, func(t float64) {
			for _, id := range inLab[l] {
				if rng.Float64() < g.LabShare {
					at := t + rng.Float64()*spread
					out[id] = append(out[id], forcedDeparture{t: at, back: at + away(3600)})
				}
			}
		})
	}
	// Scheduled labs: every len/ScheduledLabs-th lab, so they fall in
	// different buildings.
	if n := min(g.ScheduledLabs, len(labs)); n > 0 {
		step := len(labs) / n
		for k := range n {
			for _, id := range inLab[labs[k*step]] {
				g.schedule(c, rng, id, out)
			}
		}
	}
	for id := range out {
		sort.Slice(out[id], func(a, b int) bool { return out[id][a].t < out[id][b].t })
	}
	return out
}

// schedule adds a scheduled lab's evening closures for one node.
func (g GroupConfig) schedule(c GenConfig, rng *rand.Rand, id string, out map[string][]forcedDeparture) {
	dur := c.Duration.Seconds()
	day0 := c.Start.UTC().Truncate(24 * time.Hour)
	for d := 0; ; d++ {
		day := day0.Add(time.Duration(d) * 24 * time.Hour)
		if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
			continue
		}
		at := day.Add(g.CloseAt).Sub(c.Start).Seconds() + rng.Float64()*g.Spread.Seconds()
		if at >= dur {
			return
		}
		next := day.Add(24 * time.Hour)
		for next.Weekday() == time.Saturday || next.Weekday() == time.Sunday {
			next = next.Add(24 * time.Hour)
		}
		back := next.Add(g.OpenAt).Sub(c.Start).Seconds() + rng.Float64()*g.Spread.Seconds()
		if at > 0 {
			out[id] = append(out[id], forcedDeparture{t: at, notice: g.LabNotice.Seconds(), back: back})
		}
	}
}
