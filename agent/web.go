package agent

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/agent/view"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// webSource implements web.Source for the agent: the status page, /v1 and
// /metrics all read the web.Status it builds.
type webSource struct{ a *Agent }

var _ web.Source = webSource{}

// Status is the node's view (view.View.Web) now.
func (s webSource) Status(ctx context.Context) (web.Status, error) {
	if err := ctx.Err(); err != nil {
		return web.Status{}, err
	}
	v := s.a.view
	if v == nil {
		return web.Status{}, errors.New("the node is not running yet")
	}
	return v.Web(time.Now()), nil
}

// newWebHandler builds the status page handler on the agent's registry.
func (a *Agent) newWebHandler() (*web.Handler, error) {
	var secrets []string
	if a.cfg.GossipKey != "" {
		secrets = append(secrets, a.cfg.GossipKey)
	}
	for _, k := range a.gossipKeys {
		if len(k) == 0 {
			continue
		}
		secrets = append(secrets, base64.StdEncoding.EncodeToString(k), base64.RawStdEncoding.EncodeToString(k),
			base64.URLEncoding.EncodeToString(k), base64.RawURLEncoding.EncodeToString(k), hex.EncodeToString(k))
	}
	bind := a.cfg.HTTPAddr
	if a.httpLn != nil {
		bind = a.httpLn.Addr().String()
	}
	h, err := web.New(web.Config{
		Source:   webSource{a},
		Registry: a.registry,
		Bind:     bind,
		Secrets:  secrets,
		Logger:   a.logger.With("subsystem", "web"),
	})
	if err != nil {
		return nil, fmt.Errorf("status page: %w", err)
	}
	return h, nil
}

// webDocument renders GET /v1/status through the web handler itself, so
// the control socket (and 'reclaimnet status --json') returns exactly the
// document the HTTP API serves, secret filter included.
func (a *Agent) webDocument() ([]byte, error) {
	req := httptest.NewRequest(http.MethodGet, "http://localhost/v1/status", nil)
	rec := httptest.NewRecorder()
	a.web.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("status document: HTTP %d: %s", rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes(), nil
}

// newView builds the node's status view once the coordinator and the job
// manager run.
func (a *Agent) newView() *view.View {
	ip, port := a.mesh.LocalAddr()
	return view.New(view.Config{
		Node: a.cfg.Name, Building: a.cfg.Building, Version: Version, Started: a.started,
		GossipAddr:   net.JoinHostPort(ip.String(), strconv.Itoa(int(port))),
		RaftAddr:     a.raftAddr(),
		TransferAddr: net.JoinHostPort(ip.String(), strconv.Itoa(a.cfg.TransferPort)),
		HTTPAddr:     a.HTTPAddr(),
		Encrypted:    len(a.gossipKeys) > 0,
		Mesh:         a.mesh, Gossip: a.telemetry, Coord: a.coord, Jobs: a.Jobs(), Protocols: a.protocols,
		SamplePeriod: 5 * max(time.Duration(a.cfg.TelemetryInterval), 100*time.Millisecond),
		Sandbox:      webSandbox(a.Sandbox()),
	})
}

// webSandbox is the sandbox's status for the page and /v1/status.
func webSandbox(s sandbox.Status) web.Sandbox {
	return web.Sandbox{Mode: s.Mode.String(), Available: s.Available, Summary: s.String()}
}

// Status returns the node's view of the cluster: its addresses, Raft
// view and gossip member table (once Run serves).
func (a *Agent) Status() localapi.Status { return a.view.Members() }
