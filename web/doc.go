// Package web serves a node's status page, its JSON API (/v1/...) and its
// Prometheus metrics (/metrics) on the agent's HTTP address.
//
// The agent implements Source: one call returns a Status, the view model of
// everything the page shows (cluster, jobs, transfers, reclaims, decisions).
// The page, the JSON API and the metrics all read that one value through the
// same code (Status.prepare fills the few derived fields, such as checkpoint
// ages, once), so nothing is recomputed for display and the three never
// disagree. A node's GPU and a job's P1 decision have /v1 types of their
// own (snake_case, units in names); the other policy outputs
// (policy.HandoffDecision, policy.Candidate, HazardProfile, ...) are
// carried as they are.
//
// The page is server-rendered with html/template from embedded files (no
// CDN, readable without JavaScript); a small script re-fetches the live part
// of the page while it is open, and without JavaScript a meta refresh does
// the same. Charts are inline SVG rendered on the server.
//
// Everything is read-only: a request other than GET or HEAD is refused (state
// changes go through the agent's local socket). A loopback-bound handler
// answers only to loopback Host names, so a page on another site cannot read
// it through DNS rebinding. Configured secrets (the gossip key) are redacted
// from every response.
package web
