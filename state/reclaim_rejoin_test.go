package state

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// TestReclaimEndsWithDepartureAndRejoin applies the commands of a reclaimed
// node that leaves at its deadline and comes back, in the
// orders the log can hold them: the returning node must never keep the
// old incarnation's reclaim pending, and a live reclaim must stay pending.
func TestReclaimEndsWithDepartureAndRejoin(t *testing.T) {
	joined := t0
	announced, deadline := t0.Add(10*time.Second), t0.Add(25*time.Second)
	back := deadline.Add(5 * time.Second) // the restarted agent's start
	node := func(j time.Time) UpsertNode {
		return UpsertNode{Node: NodeRecord{ID: "a2", Building: "north", RaftAddr: "127.0.0.1:1", GPUs: 1, State: NodeActive, Joined: j}}
	}
	announce := AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a2", Announced: announced, Deadline: deadline}}
	depart := RecordDeparture{Departure: Departure{Node: "a2", At: deadline, Kind: DepartureScheduled, Graceful: true}}
	later := back.Add(time.Minute)
	reannounce := AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a2", Announced: later, Deadline: later.Add(time.Minute)}}
	// An owner's --now at a moment inside a second, and the agent started
	// again within that second: gossip carries its start as the whole
	// second, which reads as before the announcement.
	nowAt := t0.Add(40*time.Second + 300*time.Millisecond)
	sameSecond := nowAt.Truncate(time.Second)
	now := AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a2", Announced: nowAt, Deadline: nowAt}}

	cases := []struct {
		name    string
		cmds    []Command
		pending bool // a reclaim of a2 pending at the end
		active  bool // a2 registered active at the end
	}{
		{"announce, depart, rejoin", []Command{node(joined), announce, depart, node(back)}, false, true},
		{"announce, rejoin, depart", []Command{node(joined), announce, node(back), depart}, false, true},
		{"announce, rejoin, no departure logged", []Command{node(joined), announce, node(back)}, false, true},
		{"depart, then a late announce", []Command{node(joined), depart, announce}, false, false},
		{"depart, rejoin, then a late announce", []Command{node(joined), depart, node(back), announce}, false, true},
		{"rejoin, then a late announce", []Command{node(joined), node(back), announce}, false, true},
		{"announce, same incarnation re-registered", []Command{node(joined), announce, node(joined)}, true, true},
		{"announce only", []Command{node(joined), announce}, true, true},
		{"rejoin, new reclaim, old departure logged late", []Command{node(joined), announce, node(back), reannounce, depart}, true, true},
		{"depart, rejoin, new reclaim", []Command{node(joined), announce, depart, node(back), reannounce}, true, true},
		{"emergency, rejoin within its second", []Command{node(joined), now, node(sameSecond)}, false, true},
		{"emergency within the membership's first second, re-registered", []Command{node(sameSecond), now, node(sameSecond)}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewStore()
			for i, cmd := range tc.cmds {
				if res := applyEncoded(t, f, uint64(i+1), cmd); res != nil {
					t.Fatalf("%s: %v", cmd.Kind(), res)
				}
			}
			st := f.State()
			r, pending := st.Reclaims["a2"]
			if pending != tc.pending {
				t.Fatalf("a2 reclaim pending: got %v (%+v), want %v", pending, r, tc.pending)
			}
			if n := st.Nodes["a2"]; (n.State == NodeActive) != tc.active {
				t.Fatalf("a2 state: got %v (joined %v, left %v), want active=%v", n.State, n.Joined, n.Left, tc.active)
			}
			var want time.Time // the last announcement's
			for _, cmd := range tc.cmds {
				if a, ok := cmd.(AnnounceReclaim); ok {
					want = a.Reclaim.Announced
				}
			}
			if pending && !r.Announced.Equal(want) {
				t.Fatalf("pending reclaim announced %v, want %v", r.Announced, want)
			}
			// Applying the same commands again (a replay) changes nothing.
			before := f.State()
			for i, cmd := range tc.cmds {
				applyEncoded(t, f, uint64(len(tc.cmds)+i+1), cmd)
			}
			if _, again := f.State().Reclaims["a2"]; again != pending {
				t.Fatalf("after a replay: reclaim pending %v, want %v (before: %+v)", again, pending, before.Reclaims)
			}
		})
	}
}

// TestDepartureKeepsNoticeOfItsReclaim: the fix leaves the departure's
// bookkeeping alone: a scheduled departure takes its notice from the
// reclaim it ends and records the history entry's leave time.
func TestDepartureKeepsNoticeOfItsReclaim(t *testing.T) {
	f := NewStore()
	announced, deadline := t0.Add(10*time.Second), t0.Add(25*time.Second)
	cmds := []Command{
		UpsertNode{Node: NodeRecord{ID: "a2", State: NodeActive, Joined: t0}},
		AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a2", Announced: announced, Deadline: deadline}},
		RecordDeparture{Departure: Departure{Node: "a2", At: deadline, Kind: DepartureScheduled}},
	}
	for i, cmd := range cmds {
		if res := applyEncoded(t, f, uint64(i+1), cmd); res != nil {
			t.Fatalf("%s: %v", cmd.Kind(), res)
		}
	}
	st := f.State()
	if d := st.Departures[len(st.Departures)-1]; d.Notice != 15*time.Second {
		t.Fatalf("departure notice %v, want 15s", d.Notice)
	}
	if len(st.ReclaimReports) != 1 || !st.ReclaimReports[0].Left.Equal(deadline) || !st.ReclaimReports[0].Announced.Equal(announced) {
		t.Fatalf("history %+v, want one entry announced %v left %v", st.ReclaimReports, announced, deadline)
	}
}
