package state

import (
	"fmt"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// maxJobEvents bounds a job's story (the oldest events go first).
const maxJobEvents = 64

// EventKind names one step of a job's story.
type EventKind string

// Event kinds, in the order a job meets them.
const (
	EventSubmitted  EventKind = "submitted"
	EventPlaced     EventKind = "placed"     // started on a node (new, or again after a failure or requeue)
	EventRecovered  EventKind = "recovered"  // placed again after its node left, from a replica or from the start
	EventMoved      EventKind = "moved"      // a hand-off committed
	EventDisplaced  EventKind = "displaced"  // its node left
	EventCheckpoint EventKind = "checkpoint" // a version committed off its source
	EventExited     EventKind = "exited"     // a run ended by itself: a failure that restarts it, or a requeue
	EventFailed     EventKind = "failed"
	EventCancelled  EventKind = "cancelled"
	EventDone       EventKind = "done"
)

// JobEvent is one step of a job's story, as the state machine applied it.
type JobEvent struct {
	At   time.Time
	Kind EventKind
	// Node is where it happened (the new host of a placement or a move,
	// the node that left, the holder that committed a checkpoint); From
	// the node it left or restored from.
	Node    policy.NodeID `json:",omitempty"`
	From    policy.NodeID `json:",omitempty"`
	Version uint64        `json:",omitempty"`
	// Detail is the cause in words.
	Detail string `json:",omitempty"`
}

// addEvent appends e to j's story, keeping the newest maxJobEvents.
func (j *JobRecord) addEvent(e JobEvent) {
	j.Events = append(j.Events, e)
	if len(j.Events) > maxJobEvents {
		j.Events = j.Events[len(j.Events)-maxJobEvents:]
	}
}

// placementEvent is the story's entry for placement p of j at at.
func placementEvent(j JobRecord, p policy.Placement, at time.Time) JobEvent {
	e := JobEvent{At: at, Kind: EventPlaced, Node: p.To, From: p.From}
	switch {
	case !j.Displaced.At.IsZero() || (p.Recovery && j.LastExit == nil):
		e.Kind = EventRecovered
		e.Detail = "its node left"
		if p.From == "" {
			e.Detail += "; no replica survived: restarts from the beginning"
		} else {
			e.Detail += "; restores from the replica on " + string(p.From)
		}
	case j.LastExit != nil:
		e.Detail = "restarted after " + j.LastExit.Describe()
		if p.From != "" {
			e.Detail += ", from the replica on " + string(p.From)
		}
	case j.Started:
		e.Detail = "placed again"
	default:
		e.Detail = "first start"
	}
	return e
}

// exitEvent is the story's entry for a run's end.
func exitEvent(j JobRecord, e JobExit) JobEvent {
	ev := JobEvent{At: e.At, Kind: EventExited, Node: e.Node, Detail: e.Describe()}
	switch {
	case j.End.Kind == EndDone:
		ev.Kind, ev.Detail = EventDone, "exit 0"
	case j.End.Kind == EndFailed:
		ev.Kind = EventFailed
		ev.Detail = fmt.Sprintf("%s: failure %d, %d allowed", e.Describe(), j.Failures, j.MaxFailures)
	case e.ExitCode == PreemptedExit && e.Signal == "" && e.Reason == "":
		ev.Detail = "exit 85: requeued from its checkpoint"
	default:
		ev.Detail = fmt.Sprintf("%s: failure %d of %d allowed, restarts from its freshest checkpoint", e.Describe(), j.Failures, j.MaxFailures)
	}
	return ev
}
