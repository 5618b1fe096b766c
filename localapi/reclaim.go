package localapi

import "time"

// Reclaim operations (reclaimnet reclaim).
const (
	// OpReclaim announces a scheduled reclaim of this node (Request.Notice).
	OpReclaim = "reclaim"
	// OpReclaimStatus reports the reclaim's progress.
	OpReclaimStatus = "reclaim-status"
	// OpReclaimCancel withdraws the pending reclaim.
	OpReclaimCancel = "reclaim-cancel"
	// OpReclaimNow is the emergency: jobs killed, node gone, no waiting.
	OpReclaimNow = "reclaim-now"
)

// ReportFile, inside the data dir, keeps the last reclaim's owner's
// report, so 'reclaim --status' can show it after the agent left.
const ReportFile = "reclaim-report.json"

// Job progress kinds in ReclaimJob.Progress.
const (
	ProgressRunning    = "still running"
	ProgressHandingOff = "handing off"
	ProgressMoved      = "handed off"
	ProgressDegraded   = "degraded"
	ProgressFinished   = "finished"
)

// ReclaimJob is one job that ran here when the reclaim was announced.
type ReclaimJob struct {
	Job      string `json:"job"`
	Progress string `json:"progress"`
	// Detail is the line the owner reads ("handed off to node-02", ...).
	Detail string `json:"detail"`
	// Stopped is set once no process of the job runs here any more.
	Stopped bool `json:"stopped"`
	// To is the node the job went to (hand-off) or restarts on.
	To string `json:"to,omitempty"`
}

// ReclaimStatus is the reclaim as OpReclaimStatus (and the other reclaim
// operations) report it.
type ReclaimStatus struct {
	Node      string    `json:"node"`
	Active    bool      `json:"active"`
	Emergency bool      `json:"emergency,omitempty"`
	Announced time.Time `json:"announced,omitzero"`
	Deadline  time.Time `json:"deadline,omitzero"`
	// Complete: every job that ran here has stopped after handing off or
	// being marked degraded (or finished).
	Complete bool         `json:"complete"`
	Jobs     []ReclaimJob `json:"jobs,omitempty"`
	// Enforcement says whether the kill-switch is enforced here.
	Enforcement bool   `json:"enforcement"`
	KillSwitch  string `json:"kill_switch,omitempty"`
	// Report is the owner's report, once complete (or after --now).
	Report *ReclaimReport `json:"report,omitempty"`
	// Reclaimed: the node has left the cluster and its agent holds it
	// out, kill-switch hard, until it is lent again (reclaimnet lend, or
	// the next lending window).
	Reclaimed bool `json:"reclaimed,omitempty"`
}

// ReclaimReport is the owner's short report after a reclaim.
type ReclaimReport struct {
	Node      string `json:"node"`
	Emergency bool   `json:"emergency"`
	// Reason is why the machine was taken back: the owner's command, or
	// the owner policy's words ("lending window ends 08:00", "owner
	// process 4242 (python3) on GPU 0").
	Reason string `json:"reason,omitempty"`
	// LendingAfter is the node's lending state as it left (reclaimed,
	// owner active, outside window, ...), LendableFrom the earliest time
	// its owner policy may lend it again (zero: only the owner's lend).
	LendingAfter string    `json:"lending_after,omitempty"`
	LendableFrom time.Time `json:"lendable_from,omitzero"`
	Announced    time.Time `json:"announced"`
	// Isolate is how long the kill-switch flip took (0 with enforcement
	// off: nothing was isolated).
	Isolate  time.Duration `json:"isolate_ns"`
	Isolated bool          `json:"isolated"`
	Moved    []string      `json:"moved,omitempty"`
	Degraded []string      `json:"degraded,omitempty"`
	Finished []string      `json:"finished,omitempty"`
	// BytesSent is what this node's transfers sent for those jobs since
	// the announcement (chunk bytes, before compression).
	BytesSent int64 `json:"bytes_sent"`
	// UsedFor is how long after the command jobs still ran here.
	UsedFor time.Duration `json:"used_for_ns"`
	// Left is when the node left (zero until then).
	Left time.Time `json:"left,omitzero"`
	// Deadline is the reclaim's deadline (the announcement for an
	// emergency).
	Deadline time.Time `json:"deadline,omitzero"`
	// Replicated is set once the cluster's history holds the final
	// report; a report left without it (an emergency: the node left at
	// once) is submitted by the agent when it runs again.
	Replicated bool `json:"replicated,omitempty"`
	// Downtimes is each moved job's downtime against its limit (design
	// P3.8d), from the cluster's record of the move.
	Downtimes []JobDowntime `json:"downtimes,omitempty"`
}

// JobDowntime is one moved job's downtime, from its last step here to its
// first on its new node (0 while that start is not recorded), and the
// limit it is measured against (0 when not known).
type JobDowntime struct {
	Job      string        `json:"job"`
	Downtime time.Duration `json:"downtime_ns"`
	Limit    time.Duration `json:"limit_ns"`
}

// MaxReclaimNotice is the longest notice a scheduled reclaim may give: a
// longer one is a typo (a reclaim years away) rather than a plan; an owner
// who knows that far ahead schedules it later.
const MaxReclaimNotice = 24 * time.Hour
