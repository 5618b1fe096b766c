// Package web serves a node's status page, its JSON API (/v1/...) and its
// Prometheus metrics (/metrics) on the agent's HTTP address.
//
// The agent implements Source: one call returns a Status, the view model of
// everything the page shows (cluster, jobs, transfers, reclaims, decisions).
// The page, the JSON API and the metrics all read that one value through the
// same code (Status.prepare fills the few derived fields, such as checkpoint
// ages, once), so nothing is recomputed for display and the three never
// disagree. Every policy value the API shows (a node's GPU, a job's P1
// decision, flows, reclaims, hand-offs, placements and their candidates)
// has a /v1 type of its own, converted where the agent builds the Status:
// one JSON schema, snake_case with units in names, that the CLI's --json
// prints too.
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
