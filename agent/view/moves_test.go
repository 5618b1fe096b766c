package view

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/state"
)

// TestJobMoves: a job's story lists each move off a reclaimed or departed
// node with the page's figures: a hand-off's downtime split into restore
// and start, an emergency recovery's into detection, placement, restore
// and start, each with its limit; another job's outcomes stay out.
func TestJobMoves(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	st := state.New()
	st.ReclaimReports = []state.ReclaimReport{
		{Node: "a1", Kind: state.DepartureScheduled, Announced: at(0), Deadline: at(60), Left: at(61),
			Jobs: []state.JobOutcome{
				{Job: "train", To: "b1", HandedOff: true, Version: 4, Stopped: at(40), Restored: at(41.5), Resumed: at(42), Limit: 1800 * time.Millisecond},
				{Job: "other", To: "c1", HandedOff: true, Stopped: at(40), Resumed: at(50)},
			}},
		{Node: "b1", Kind: state.DepartureEmergency, Left: at(100), Detected: true,
			Jobs: []state.JobOutcome{
				{Job: "train", To: "c1", Replica: "a2", Version: 6, LostWork: 12 * time.Second, Detected: at(105), At: at(106),
					Restored: at(108), Resumed: at(109.1), Limit: 8 * time.Second},
			}},
	}
	moves := JobMoves(st, "train")
	if len(moves) != 2 {
		t.Fatalf("moves %+v, want two (the hand-off off a1, the recovery off b1)", moves)
	}
	h, r := moves[0], moves[1]
	if h.From != "a1" || h.To != "b1" || !h.HandedOff || !h.FinalCheckpoint || h.Emergency || !h.At.Equal(at(0)) ||
		h.Downtime != 2*time.Second || h.Limit != 1800*time.Millisecond || h.Detection != 0 || h.Placement != 0 ||
		h.Restore != 1500*time.Millisecond || h.Start != 500*time.Millisecond {
		t.Errorf("hand-off %+v: want a1 → b1 with its final checkpoint, down 2s (limit 1.8s): restore 1.5s, start 0.5s", h)
	}
	if r.From != "b1" || r.To != "c1" || r.HandedOff || !r.Emergency || !r.Detected || r.Replica != "a2" || r.Version != 6 ||
		!r.At.Equal(at(100)) || r.WorkLost != 12*time.Second || r.Downtime != 9100*time.Millisecond || r.Limit != 8*time.Second ||
		r.Detection != 5*time.Second || r.Placement != time.Second || r.Restore != 2*time.Second || r.Start != 1100*time.Millisecond {
		t.Errorf("recovery %+v: want b1 → c1 from a2's v6, down 9.1s (limit 8s): detection 5s, placement 1s, restore 2s, start 1.1s", r)
	}
	// The same figures as the page's history row.
	for i, rep := range st.ReclaimReports {
		row := webReclaimRecord(rep).Jobs[0]
		if m := moves[i]; row.Downtime != m.Downtime || row.DowntimeLimit != m.Limit || row.Detection != m.Detection ||
			row.Placement != m.Placement || row.Restore != m.Restore || row.Start != m.Start {
			t.Errorf("move %d %+v differs from the page's row %+v", i, m, row)
		}
	}
}
