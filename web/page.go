package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

//go:embed assets
var assets embed.FS

// pageRenderer holds the parsed templates.
type pageRenderer struct {
	tmpl *template.Template
}

func newPageRenderer() (*pageRenderer, error) {
	t, err := template.New("").Funcs(template.FuncMap{
		"bytes":     fmtBytes,
		"vram":      fmtGiB,
		"building":  fmtBuilding,
		"rate":      fmtRate,
		"dur":       fmtDur,
		"durp":      fmtDurPtr,
		"perhour":   fmtHazard,
		"clock":     fmtClock,
		"stamp":     fmtStamp,
		"ago":       fmtAgo,
		"pct":       fmtPct,
		"prob":      fmtProb,
		"secs":      fmtSeconds,
		"mul100":    func(f float64) float64 { return 100 * f },
		"sparkline": func(p HazardProfile, at time.Time) template.HTML { return hazardChart(p, at, sparkSize) },
		"chart":     func(p HazardProfile, at time.Time) template.HTML { return hazardChart(p, at, chartSize) },
	}).ParseFS(assets, "assets/*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse page templates: %w", err)
	}
	return &pageRenderer{tmpl: t}, nil
}

// render executes one template into a buffer, so a failure can still
// become a clean error response.
func (p *pageRenderer) render(name string, v *pageView) ([]byte, error) {
	var b bytes.Buffer
	if err := p.tmpl.ExecuteTemplate(&b, name, v); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	h.serveTemplate(w, r, "page.tmpl")
}

// serveLive serves the live part of the page alone; the page's script
// swaps it in, so the browser shows exactly what the server rendered.
func (h *Handler) serveLive(w http.ResponseWriter, r *http.Request) {
	h.serveTemplate(w, r, "live")
}

func (h *Handler) serveTemplate(w http.ResponseWriter, r *http.Request, name string) {
	v := &pageView{RefreshMs: h.cfg.Refresh.Milliseconds()}
	s, err := h.status(r.Context())
	code := http.StatusOK
	if err != nil {
		h.cfg.Logger.Warn("web: status unavailable", "err", err)
		v.Err = err.Error()
		code = http.StatusServiceUnavailable
	} else {
		v.fill(&s)
	}
	b, err := h.page.render(name, v)
	if err != nil {
		h.cfg.Logger.Error("web: render page", "err", err)
		http.Error(w, "render page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b)
}

// staticHandler serves the embedded stylesheet and script.
func staticHandler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	files := http.FileServerFS(sub)
	return http.StripPrefix("/ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "style.css", "app.js":
			files.ServeHTTP(w, r)
		default:
			writeError(w, http.StatusNotFound, "no such file")
		}
	}))
}

// pageView is what the templates read: the prepared Status plus grouping
// and ordering for display (nothing is recomputed).
type pageView struct {
	S         *Status
	Err       string
	RefreshMs int64

	Self      *Member
	Buildings []buildingGroup
	Matrix    bwMatrix
	// Profile is the chart's profile: the cluster's, else this node's.
	Profile      HazardProfile
	ProfileTitle string
	KillSwitches []KillSwitchState
	Decisions    []decisionView
	// Role is this node's Raft role.
	Role RaftRole
}

// RefreshSeconds is the meta-refresh period for browsers without
// JavaScript, at least one second.
func (v *pageView) RefreshSeconds() int64 {
	return max(v.RefreshMs/1000, 1)
}

type buildingGroup struct {
	Name    string
	Members []Member
}

type decisionView struct {
	D        Decision
	Job      policy.JobID
	From, To policy.NodeID
	Ranked   []rankedCandidate
	// Handoff details (nil for a placement).
	H *Handoff
}

type rankedCandidate struct {
	Rank   int // 1 = best score among the feasible; 0 for a rejected one
	C      Candidate
	Chosen bool
}

func (v *pageView) fill(s *Status) {
	v.S = s
	v.Role = RaftNone
	index := map[string]int{}
	for i := range s.Cluster.Members {
		m := &s.Cluster.Members[i]
		if m.ID == s.Node {
			v.Self = m
			if m.RaftRole != "" {
				v.Role = m.RaftRole
			}
		}
		k, ok := index[m.Building]
		if !ok {
			k = len(v.Buildings)
			index[m.Building] = k
			v.Buildings = append(v.Buildings, buildingGroup{Name: m.Building})
		}
		v.Buildings[k].Members = append(v.Buildings[k].Members, *m)
	}
	slices.SortStableFunc(v.Buildings, func(a, b buildingGroup) int { return strings.Compare(a.Name, b.Name) })
	v.Matrix = newBandwidthMatrix(s.Cluster.Bandwidth)
	v.Profile, v.ProfileTitle = s.Cluster.Hazard, "cluster-wide time-of-day profile"
	if len(v.Profile.Rates) == 0 && v.Self != nil {
		v.Profile, v.ProfileTitle = v.Self.HazardProfile, "profile of "+string(v.Self.ID)
	}
	v.KillSwitches = killSwitches(s)
	for _, d := range s.Decisions {
		dv := decisionView{D: d}
		var cands []Candidate
		switch {
		case d.Handoff != nil:
			dv.Job, dv.From, dv.To, dv.H = d.Handoff.Job, d.Handoff.From, d.Handoff.To, d.Handoff
			cands = d.Handoff.Candidates
		case d.Placement != nil:
			dv.Job, dv.From, dv.To = d.Placement.Job, d.Placement.From, d.Placement.To
			cands = d.Placement.Candidates
		default:
			continue
		}
		dv.Ranked = rankCandidates(cands, dv.To)
		v.Decisions = append(v.Decisions, dv)
	}
}

// rankCandidates orders the feasible candidates by score (lower is better,
// as P2 chooses) and lists the rejected ones after them, each with the
// reason P2 gave. The scores are P2's own; only the order is the page's.
func rankCandidates(cands []Candidate, chosen policy.NodeID) []rankedCandidate {
	var ok, rejected []rankedCandidate
	for _, c := range cands {
		rc := rankedCandidate{C: c, Chosen: c.Node == chosen && chosen != ""}
		if c.Rejected != "" {
			rejected = append(rejected, rc)
		} else {
			ok = append(ok, rc)
		}
	}
	slices.SortStableFunc(ok, func(a, b rankedCandidate) int {
		switch {
		case a.C.Score < b.C.Score:
			return -1
		case a.C.Score > b.C.Score:
			return 1
		}
		return 0
	})
	for i := range ok {
		ok[i].Rank = i + 1
	}
	return append(ok, rejected...)
}
