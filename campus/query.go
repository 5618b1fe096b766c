package campus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// Campus returns the campus the agents run in (nil in loopback mode).
func (a *Agents) Campus() *Campus { return a.campus }

// Names returns the node names in topology order.
func (a *Agents) Names() []string { return slices.Clone(a.names) }

// NetNSNames returns the campus's network namespaces (none in loopback
// mode); Close removes them.
func (a *Agents) NetNSNames() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.campus == nil {
		return nil
	}
	return a.campus.NetNSNames()
}

// Building returns the node's building.
func (a *Agents) Building(node string) string { return a.building[node] }

// DataDir is the node's --data-dir (the CLI reaches the agent through its
// socket there).
func (a *Agents) DataDir(node string) string { return filepath.Join(a.cfg.Dir, node, "data") }

// LogPath is the file the node's agent writes its output to (appended to
// across restarts).
func (a *Agents) LogPath(node string) string { return filepath.Join(a.cfg.Dir, node+".log") }

// HTTPAddr is the host:port of the node's status page, as reachable from
// inside its namespace (in loopback mode, from anywhere on this machine);
// "" when the agent is not running.
func (a *Agents) HTTPAddr(node string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil && !p.exited() {
		return p.info.HTTPAddr
	}
	return ""
}

// Info is what the node's running agent wrote to its info file (bound
// addresses, pid); false when it is not running.
func (a *Agents) Info(node string) (localapi.Info, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil && !p.exited() {
		return p.info, true
	}
	return localapi.Info{}, false
}

// Running reports whether the node's agent process is alive.
func (a *Agents) Running(node string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.procs[node]
	return p != nil && !p.exited()
}

// Exited returns a channel closed when the node's current agent process has
// exited (already closed when none runs) and its wait error.
func (a *Agents) Exited(node string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.procs[node]; p != nil {
		return p.done
	}
	c := make(chan struct{})
	close(c)
	return c
}

// CLI runs `Binary args...` against the node's agent: RECLAIMNET_DATA_DIR
// is the node's data dir and, in namespace mode, the command runs in the
// node's network namespace (so `reclaim --now` finds the node's pinned maps
// and interface). The error includes stderr.
func (a *Agents) CLI(ctx context.Context, node string, args ...string) (string, error) {
	if !slices.Contains(a.names, node) {
		return "", fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	cmd := a.command(ctx, node, args...)
	cmd.Dir = a.cfg.Dir
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "RECLAIMNET_DATA_DIR=") }),
		"RECLAIMNET_DATA_DIR="+a.DataDir(node))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: reclaimnet %s: %w: %s", node, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Call sends one control request to the node's agent over its socket.
func (a *Agents) Call(ctx context.Context, node string, req localapi.Request) (localapi.Response, error) {
	resp, err := localapi.Call(ctx, a.DataDir(node), req)
	if err != nil {
		return resp, fmt.Errorf("%s: %w", node, err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("%s: %s: %s", node, req.Op, resp.Error)
	}
	return resp, nil
}

// Status is the node's /v1/status document (what `reclaimnet status --json`
// prints), read over its control socket.
func (a *Agents) Status(ctx context.Context, node string) (web.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := a.Call(ctx, node, localapi.Request{Op: localapi.OpStatus})
	if err != nil {
		return web.Status{}, err
	}
	var st web.Status
	if err := json.Unmarshal(resp.Document, &st); err != nil {
		return st, fmt.Errorf("%s: status document: %w", node, err)
	}
	return st, nil
}

// Leader returns the current Raft leader's node name, as the first running
// agent that knows one says.
func (a *Agents) Leader(ctx context.Context) (string, error) {
	var errs []error
	for _, n := range a.names {
		if !a.Running(n) {
			continue
		}
		st, err := a.Status(ctx, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Cluster.Leader != "" {
			return string(st.Cluster.Leader), nil
		}
		errs = append(errs, fmt.Errorf("%s knows no leader", n))
	}
	if len(errs) == 0 {
		return "", errors.New("no agent running")
	}
	return "", fmt.Errorf("no leader: %w", errors.Join(errs...))
}

// WaitFormed waits until every given node's agent sees a leader, every
// given node alive with a Raft role, and at least three voters among them
// (one below three nodes), so the cluster survives one failure.
func (a *Agents) WaitFormed(ctx context.Context, nodes ...string) error {
	return a.waitFormed(ctx, nodes, nil)
}

// How often waitFormed tells what it still waits for: at most every
// formedReportMin when that changes, every formedReportMax when not.
const (
	formedReportMin = time.Second
	formedReportMax = 5 * time.Second
)

// waitFormed is WaitFormed telling report (when not nil) what it still
// waits for.
func (a *Agents) waitFormed(ctx context.Context, nodes []string, report func(why string)) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(3 * time.Minute)
	defer deadline.Stop()
	var told string
	var toldAt time.Time
	for {
		why := a.formed(ctx, nodes)
		if why == "" {
			return nil
		}
		if since := time.Since(toldAt); report != nil && (why != told && since >= formedReportMin || since >= formedReportMax) {
			report(why)
			told, toldAt = why, time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not formed (%s): %w", why, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("cluster not formed within 3m: %s", why)
		case <-tick.C:
		}
	}
}

// formed returns "" when the cluster is formed as WaitFormed wants, else
// why not.
func (a *Agents) formed(ctx context.Context, nodes []string) string {
	for _, n := range nodes {
		a.mu.Lock()
		p := a.procs[n]
		a.mu.Unlock()
		if p == nil || p.exited() {
			return n + " is not running"
		}
		st, err := a.Status(ctx, n)
		if err != nil {
			return err.Error()
		}
		if st.Cluster.Leader == "" {
			return n + " knows no leader"
		}
		voters := 0
		for _, want := range nodes {
			i := slices.IndexFunc(st.Cluster.Members, func(m web.Member) bool { return string(m.ID) == want })
			if i < 0 {
				return fmt.Sprintf("%s does not list %s", n, want)
			}
			m := st.Cluster.Members[i]
			if m.State != web.MemberAlive {
				return fmt.Sprintf("%s sees %s %s", n, want, m.State)
			}
			switch m.RaftRole {
			case web.RaftNone, "":
				return fmt.Sprintf("%s sees %s outside Raft", n, want)
			case web.RaftLeader, web.RaftFollower, web.RaftCandidate:
				voters++
			}
		}
		if want := wantVoters(len(nodes)); voters < want {
			return fmt.Sprintf("%s sees %d voters among %d nodes, want %d", n, voters, len(nodes), want)
		}
	}
	return ""
}

// wantVoters is how many voters the coordinator keeps among n live nodes
// (raft.Config: 3 in a normal cluster, 1 below 3 nodes). Waiting for them
// means the cluster survives the loss of one voter, which a fresh cluster
// does only after its joiners are promoted (ServerStabilization, 10 s).
func wantVoters(n int) int {
	if n < 3 {
		return 1
	}
	return 3
}

// Dial connects from inside the node's namespace (from the root namespace
// in loopback mode).
func (a *Agents) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if a.campus == nil {
		return d.DialContext(ctx, network, addr)
	}
	var conn net.Conn
	err := a.campus.RunIn(node, func() error {
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
