package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// dialer reaches a node's address (from inside its network namespace in
// namespace mode): campus.Agents.Dial.
type dialer func(ctx context.Context, node, network, addr string) (net.Conn, error)

// statusProxy serves a live node's status page on an address of this
// machine. In namespace mode the agents listen inside their namespaces,
// where a browser cannot reach them; the proxy dials in. It follows the
// node target returns (the leader, or another live node after reclaims),
// answers only GET and HEAD (the page's reclaim button would reclaim
// whichever node is behind the proxy, which is not what a viewer expects),
// and says which node answered in the X-Reclaimnet-Node header.
type statusProxy struct {
	target func() (node, addr string)
	dial   dialer
	log    *slog.Logger

	mu         sync.Mutex
	transports map[string]*http.Transport // per node: namespaces may reuse one address
}

type nodeKey struct{}

func newStatusProxy(target func() (string, string), dial dialer, log *slog.Logger) *statusProxy {
	return &statusProxy{target: target, dial: dial, log: log, transports: map[string]*http.Transport{}}
}

func (p *statusProxy) transport(node string) *http.Transport {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.transports[node]
	if t == nil {
		t = &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return p.dial(ctx, node, network, addr)
			},
			MaxIdleConns:          4,
			IdleConnTimeout:       30 * time.Second,
			ResponseHeaderTimeout: 20 * time.Second,
		}
		p.transports[node] = t
	}
	return t
}

// RoundTrip sends the request through the transport of the node the
// request's context names.
func (p *statusProxy) RoundTrip(r *http.Request) (*http.Response, error) {
	node, _ := r.Context().Value(nodeKey{}).(string)
	return p.transport(node).RoundTrip(r)
}

func (p *statusProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the demo's status proxy is read-only; use 'reclaimnet reclaim' on a node instead", http.StatusMethodNotAllowed)
		return
	}
	node, addr := p.target()
	if addr == "" {
		http.Error(w, "no live node to show right now (the campus is starting or stopping); retry in a moment", http.StatusServiceUnavailable)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Host becomes the agent's own address: a loopback-bound agent
			// answers only to a loopback Host.
			pr.SetURL(&url.URL{Scheme: "http", Host: addr})
			pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), nodeKey{}, node))
		},
		Transport: p,
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set("X-Reclaimnet-Node", node)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, fmt.Sprintf("node %s did not answer (%v); it may have just left: reload", node, err), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

// close drops idle connections.
func (p *statusProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.transports {
		t.CloseIdleConnections()
	}
}

// serveProxy listens on addr and serves p until ctx ends; it returns the
// bound address.
func serveProxy(ctx context.Context, addr string, p *statusProxy, wg *sync.WaitGroup) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("status page address %s: %w (choose another with --http, e.g. --http 127.0.0.1:0)", addr, err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("status proxy stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		p.close()
	}()
	return ln.Addr().String(), nil
}
