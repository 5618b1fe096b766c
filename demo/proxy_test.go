package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// The proxy shows the target node's page, follows the target when it
// changes, dials through the node's dialer, sends the agent's own address as
// Host, and refuses anything but GET and HEAD.
func TestStatusProxy(t *testing.T) {
	var hits atomic.Int64
	backend := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprintf(w, "%s %s %s host=%s", name, r.Method, r.URL.Path, r.Host)
		}))
	}
	n1, n2 := backend("n1"), backend("n2")
	defer n1.Close()
	defer n2.Close()
	addrs := map[string]string{"n1": n1.Listener.Addr().String(), "n2": n2.Listener.Addr().String()}

	var mu sync.Mutex
	target := "n1"
	dialed := map[string]int{}
	dial := func(ctx context.Context, node, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed[node]++
		mu.Unlock()
		if addr != addrs[node] {
			return nil, fmt.Errorf("dial %s for node %s, want %s", addr, node, addrs[node])
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	p := newStatusProxy(func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		return target, addrs[target]
	}, dial, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	addr, err := serveProxy(ctx, "127.0.0.1:0", p, &wg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wg.Wait() }()

	get := func(method, path string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Reclaimnet-Node"), string(b)
	}
	if code, node, body := get("GET", "/v1/status"); code != 200 || node != "n1" || body != "n1 GET /v1/status host="+addrs["n1"] {
		t.Errorf("GET: %d node %q body %q; want 200 from n1 with Host %s", code, node, body, addrs["n1"])
	}
	mu.Lock()
	target = "n2"
	mu.Unlock()
	if code, node, body := get("GET", "/"); code != 200 || node != "n2" || !strings.HasPrefix(body, "n2 GET / ") {
		t.Errorf("after the target changed: %d node %q body %q; want n2's page", code, node, body)
	}
	before := hits.Load()
	if code, _, _ := get("POST", "/v1/reclaim"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", code)
	}
	if hits.Load() != before {
		t.Error("a POST reached the agent")
	}
	mu.Lock()
	target = "gone"
	mu.Unlock()
	if code, _, body := get("GET", "/"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no live node") {
		t.Errorf("no target: %d %q, want 503 'no live node'", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if dialed["n1"] == 0 || dialed["n2"] == 0 {
		t.Errorf("dials per node %v: every node's connection must go through its dialer", dialed)
	}
}

// A taken address is a clear error naming --http.
func TestStatusProxyAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	_, err = serveProxy(ctx, ln.Addr().String(), newStatusProxy(nil, nil, nil), &wg)
	if err == nil || !strings.Contains(err.Error(), "--http") {
		t.Errorf("got %v, want an error naming --http", err)
	}
}

func TestConfig(t *testing.T) {
	c := Config{Nodes: 5, Buildings: 3, Job: JobAuto, Notice: 40e9}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range c.Topology().Buildings {
		got = append(got, fmt.Sprintf("%s:%d", b.Name, b.Nodes))
	}
	if strings.Join(got, " ") != "a:2 b:2 c:1" {
		t.Errorf("5 nodes over 3 buildings: %v, want a:2 b:2 c:1", got)
	}
	if err := c.Topology().Validate(); err != nil {
		t.Errorf("topology: %v", err)
	}
	for _, bad := range []Config{
		{Nodes: 3, Buildings: 1, Job: JobAuto, Notice: 40e9},
		{Nodes: 5, Buildings: 6, Job: JobAuto, Notice: 40e9},
		{Nodes: 5, Buildings: 2, Job: "tensorflow", Notice: 40e9},
		{Nodes: 5, Buildings: 2, Job: JobAuto, Notice: 1e9},
		{Nodes: 5, Buildings: 2, Job: JobAuto, Notice: 40e9, Duration: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", bad)
		}
	}
}
