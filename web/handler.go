package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures the handler. Only Source is required.
type Config struct {
	// Source gives the node's status; required.
	Source Source
	// Registry is the agent's own Prometheus registry; New registers the
	// status collector on it and serves it at /metrics. Nil: New makes one.
	Registry *prometheus.Registry
	// Bind is the address the agent serves HTTP on (host:port or host).
	// When it is a loopback address, only loopback Host names are
	// answered. Empty means the default 127.0.0.1.
	Bind string
	// Secrets are values that must never appear in a response (the
	// gossip key in every encoding the agent holds it in).
	Secrets []string
	// Refresh is how often the open page re-fetches itself; 0 means
	// DefaultRefresh.
	Refresh time.Duration
	// SourceTimeout bounds one Source.Status call; 0 means
	// DefaultSourceTimeout.
	SourceTimeout time.Duration
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock used when a Status carries no GeneratedAt; nil
	// means time.Now.
	Now func() time.Time
}

// Defaults for Config.
const (
	DefaultRefresh       = 2 * time.Second
	DefaultSourceTimeout = 2 * time.Second
)

// Handler serves the page, /v1 and /metrics. Build it with New.
type Handler struct {
	cfg      Config // filled copy, constant after New
	loopback bool   // cfg.Bind is a loopback address
	secrets  []string
	mux      *http.ServeMux
	page     *pageRenderer
}

// New checks cfg, registers the status collector on cfg.Registry and
// returns the handler. It never modifies cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Source == nil {
		return nil, errors.New("web: config has no source")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.SourceTimeout <= 0 {
		cfg.SourceTimeout = DefaultSourceTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for _, s := range cfg.Secrets {
		if len(s) < minSecretLen {
			return nil, fmt.Errorf("web: a secret is shorter than %d characters (it could not be redacted safely)", minSecretLen)
		}
	}
	cfg.Secrets = append([]string(nil), cfg.Secrets...)
	loopback := isLoopbackBind(cfg.Bind)
	page, err := newPageRenderer()
	if err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	h := &Handler{cfg: cfg, loopback: loopback, page: page}
	for _, s := range cfg.Secrets {
		h.secrets = append(h.secrets, secretForms(s)...)
	}
	if err := cfg.Registry.Register(newCollector(h.status, cfg.Logger)); err != nil {
		return nil, fmt.Errorf("web: register metrics: %w", err)
	}
	h.mux = h.routes()
	return h, nil
}

func (h *Handler) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.servePage)
	mux.HandleFunc("GET /ui/live", h.serveLive)
	mux.Handle("GET /ui/", staticHandler())
	mux.HandleFunc("GET /v1/status", h.apiStatus)
	mux.HandleFunc("GET /v1/members", h.apiMembers)
	mux.HandleFunc("GET /v1/jobs", h.apiJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", h.apiJob)
	mux.HandleFunc("GET /v1/transfers", h.apiTransfers)
	mux.HandleFunc("GET /v1/reclaims", h.apiReclaims)
	mux.HandleFunc("GET /v1/decisions", h.apiDecisions)
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.cfg.Registry, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      promLogger{h.cfg.Logger},
		// Uncompressed, so the secret filter can read every byte.
		DisableCompression: true,
	}))
	mux.HandleFunc("GET /v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	return mux
}

// ServeHTTP serves one request. Every response passes through the secret
// filter and carries headers that keep the page from being framed or sniffed.
// The API is read-only: any method but GET and HEAD is refused, so a page on
// another site cannot change state through a browser (state changes go
// through the agent's local socket).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	hd.Set("Cache-Control", "no-store")
	fw := &filterWriter{w: w, secrets: h.secrets}
	if h.loopback && !isLoopbackHost(r.Host) {
		// A page on another site can point its own name at 127.0.0.1
		// (DNS rebinding) and read the answers; a loopback-bound agent
		// answers only to loopback names.
		writeError(fw, http.StatusMisdirectedRequest, "this agent listens on loopback and answers only to localhost or a loopback address")
	} else if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		writeError(fw, http.StatusMethodNotAllowed, "this agent's HTTP API is read-only; use the local socket (reclaimnet reclaim)")
	} else {
		h.mux.ServeHTTP(fw, r)
	}
	if err := fw.flush(); err != nil {
		h.cfg.Logger.Warn("web: write response", "path", r.URL.Path, "err", err)
	}
	if fw.redacted {
		h.cfg.Logger.Error("web: a response contained a configured secret; it was redacted", "path", r.URL.Path)
	}
}

// status asks the source and prepares the result; every reader goes
// through it.
func (h *Handler) status(ctx context.Context) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.SourceTimeout)
	defer cancel()
	s, err := h.cfg.Source.Status(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("read status: %w", err)
	}
	s.prepare(h.cfg.Now())
	return s, nil
}

// isLoopbackBind reports whether bind (host:port, host, or empty for the
// default 127.0.0.1) names only loopback addresses. An unspecified address
// (0.0.0.0, ::) or a host name other than localhost is not loopback.
func isLoopbackBind(bind string) bool {
	if bind == "" {
		return true
	}
	host := bind
	if h, _, err := net.SplitHostPort(bind); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if host == "" {
		return false // ":7949" listens on every address
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i] // zone
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false // a name: assume it is reachable from elsewhere
	}
	return addr.IsLoopback()
}

// isLoopbackHost reports whether a request's Host header names a loopback
// address or localhost.
func isLoopbackHost(host string) bool {
	return host != "" && !strings.HasPrefix(host, ":") && isLoopbackBind(host)
}

// promLogger hands promhttp's errors to slog.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("web: metrics: " + fmt.Sprint(v...)) }
