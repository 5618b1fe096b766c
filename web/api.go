package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// The /v1 responses. Each carries the GeneratedAt of the Status it was cut
// from, so a client can tell how fresh it is.

// MembersResponse is the body of GET /v1/members: the cluster section.
type MembersResponse struct {
	GeneratedAt time.Time     `json:"generated_at"`
	Node        policy.NodeID `json:"node"`
	Cluster
}

// JobsResponse is the body of GET /v1/jobs.
type JobsResponse struct {
	GeneratedAt time.Time `json:"generated_at"`
	Jobs        []Job     `json:"jobs"`
}

// TransfersResponse is the body of GET /v1/transfers.
type TransfersResponse struct {
	GeneratedAt time.Time  `json:"generated_at"`
	Transfers   []Transfer `json:"transfers"`
}

// ReclaimsResponse is the body of GET /v1/reclaims: pending reclaims,
// history, and each node's kill-switch.
type ReclaimsResponse struct {
	GeneratedAt time.Time `json:"generated_at"`
	Reclaims
	KillSwitches []KillSwitchState `json:"kill_switches"`
}

// KillSwitchState is one node's kill-switch, as listed by /v1/reclaims.
type KillSwitchState struct {
	Node  policy.NodeID  `json:"node"`
	Mode  KillSwitchMode `json:"mode"`
	Drops uint64         `json:"drops"`
}

// DecisionsResponse is the body of GET /v1/decisions.
type DecisionsResponse struct {
	GeneratedAt time.Time  `json:"generated_at"`
	Control     Control    `json:"control"`
	Decisions   []Decision `json:"decisions"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

func (h *Handler) apiStatus(w http.ResponseWriter, r *http.Request) {
	s, ok := h.statusOrError(w, r)
	if ok {
		writeJSON(w, http.StatusOK, &s)
	}
}

func (h *Handler) apiMembers(w http.ResponseWriter, r *http.Request) {
	if s, ok := h.statusOrError(w, r); ok {
		writeJSON(w, http.StatusOK, &MembersResponse{GeneratedAt: s.GeneratedAt, Node: s.Node, Cluster: s.Cluster})
	}
}

// apiJobs serves GET /v1/jobs; ?state=failed,pending keeps the jobs in
// those states (an unknown state is a 400 that lists the known ones).
func (h *Handler) apiJobs(w http.ResponseWriter, r *http.Request) {
	var want []string
	if q := r.URL.Query().Get("state"); q != "" {
		for st := range strings.SplitSeq(q, ",") {
			st = strings.TrimSpace(st)
			if !slices.Contains(jobStates, st) {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want one or more of %s, separated by commas", st, strings.Join(jobStates, ", ")))
				return
			}
			want = append(want, st)
		}
	}
	s, ok := h.statusOrError(w, r)
	if !ok {
		return
	}
	jobs := nonNil(s.Jobs)
	if want != nil {
		jobs = slices.DeleteFunc(jobs, func(j Job) bool { return !slices.Contains(want, j.State) })
	}
	writeJSON(w, http.StatusOK, &JobsResponse{GeneratedAt: s.GeneratedAt, Jobs: jobs})
}

func (h *Handler) apiJob(w http.ResponseWriter, r *http.Request) {
	s, ok := h.statusOrError(w, r)
	if !ok {
		return
	}
	id := policy.JobID(r.PathValue("id"))
	for i := range s.Jobs {
		if s.Jobs[i].ID == id {
			writeJSON(w, http.StatusOK, &s.Jobs[i])
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("no job %q", id))
}

func (h *Handler) apiTransfers(w http.ResponseWriter, r *http.Request) {
	if s, ok := h.statusOrError(w, r); ok {
		writeJSON(w, http.StatusOK, &TransfersResponse{GeneratedAt: s.GeneratedAt, Transfers: nonNil(s.Transfers)})
	}
}

func (h *Handler) apiReclaims(w http.ResponseWriter, r *http.Request) {
	s, ok := h.statusOrError(w, r)
	if !ok {
		return
	}
	resp := ReclaimsResponse{GeneratedAt: s.GeneratedAt, Reclaims: s.Reclaims, KillSwitches: killSwitches(&s)}
	resp.Pending = nonNil(resp.Pending)
	resp.History = nonNil(resp.History)
	writeJSON(w, http.StatusOK, &resp)
}

func (h *Handler) apiDecisions(w http.ResponseWriter, r *http.Request) {
	if s, ok := h.statusOrError(w, r); ok {
		writeJSON(w, http.StatusOK, &DecisionsResponse{GeneratedAt: s.GeneratedAt, Control: s.Control, Decisions: nonNil(s.Decisions)})
	}
}

// statusOrError reads the status or answers 503.
func (h *Handler) statusOrError(w http.ResponseWriter, r *http.Request) (Status, bool) {
	s, err := h.status(r.Context())
	if err != nil {
		h.cfg.Logger.Warn("web: status unavailable", "err", err)
		writeError(w, http.StatusServiceUnavailable, "status unavailable: "+err.Error())
		return Status{}, false
	}
	return s, true
}

// killSwitches lists the members' kill-switches.
func killSwitches(s *Status) []KillSwitchState {
	out := make([]KillSwitchState, 0, len(s.Cluster.Members))
	for _, m := range s.Cluster.Members {
		out = append(out, KillSwitchState{Node: m.ID, Mode: m.KillSwitch, Drops: m.KillSwitchDrops})
	}
	return out
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// writeJSON encodes v (a pointer; non-finite floats are clamped first).
func writeJSON(w http.ResponseWriter, code int, v any) {
	clampNonFinite(v)
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(ErrorResponse{Error: msg})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
