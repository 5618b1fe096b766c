package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/reclaimnet/reclaimnet/policy"
)

func TestIsLoopbackBind(t *testing.T) {
	cases := []struct {
		bind string
		want bool
	}{
		{"", true},
		{"127.0.0.1:7949", true},
		{"127.0.0.2:7949", true},
		{"[::1]:7949", true},
		{"::1", true},
		{"localhost:7949", true},
		{"LOCALHOST", true},
		{"0.0.0.0:7949", false},
		{"[::]:7949", false},
		{":7949", false},
		{"10.1.2.3:7949", false},
		{"192.168.0.10", false},
		{"[fe80::1%eth0]:7949", false},
		{"node1.campus.example:7949", false},
	}
	for _, c := range cases {
		if got := isLoopbackBind(c.bind); got != c.want {
			t.Errorf("isLoopbackBind(%q) = %v, want %v", c.bind, got, c.want)
		}
	}
}

// TestReadOnly probes the API as a page on another site, or a script on the
// node, would: every method but GET and HEAD, on every path (the page, the
// API, a reclaim, the metrics, unknown paths), with any body and headers,
// is refused with 405, a JSON error naming the local socket, and an Allow
// header; the status is never read for it.
func TestReadOnly(t *testing.T) {
	asked := 0
	src := sourceFunc(func(ctx context.Context) (Status, error) { asked++; return scenarioA(), nil })
	for _, bind := range []string{"127.0.0.1:7949", "0.0.0.0:7949"} {
		h := newTestHandler(t, Config{Source: src, Bind: bind})
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			for _, path := range []string{"/", "/v1/reclaim", "/v1/status", "/v1/jobs/j1", "/metrics", "/ui/live", "/nothing"} {
				for _, hdr := range []map[string]string{
					{"Content-Type": "application/json"},
					{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"},
					{"Content-Type": "application/json", "Origin": "http://127.0.0.1:7949", "Authorization": "Bearer 0123456789abcdef0123"},
				} {
					asked = 0
					res, body := do(t, h, method, path, `{"notice_ns": 0}`, hdr)
					what := fmt.Sprintf("bind %s: %s %s %v", bind, method, path, hdr)
					if res.StatusCode != http.StatusMethodNotAllowed {
						t.Fatalf("%s: got %d %s, want 405", what, res.StatusCode, body)
					}
					var e ErrorResponse
					if json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "read-only") || !strings.Contains(e.Error, "local socket") {
						t.Fatalf("%s: got body %q, want a JSON error saying the API is read-only", what, body)
					}
					if got := res.Header.Get("Allow"); got != "GET, HEAD" {
						t.Fatalf("%s: Allow %q, want \"GET, HEAD\"", what, got)
					}
					if asked != 0 {
						t.Fatalf("%s: the status was read %d times for a refused request", what, asked)
					}
				}
			}
		}
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			if res, body := do(t, h, method, "/v1/status", "", nil); res.StatusCode != http.StatusOK {
				t.Fatalf("bind %s: %s /v1/status: got %d %s, want 200", bind, method, res.StatusCode, body)
			}
		}
	}
}

// A loopback-bound agent answers only to loopback Host names, so a
// rebound DNS name cannot read it from a browser; bound elsewhere, any
// Host is served.
func TestHostCheck(t *testing.T) {
	cases := []struct {
		bind, host string
		want       int
	}{
		{"127.0.0.1:7949", "127.0.0.1:7949", http.StatusOK},
		{"127.0.0.1:7949", "localhost:7949", http.StatusOK},
		{"127.0.0.1:7949", "[::1]:7949", http.StatusOK},
		{"127.0.0.1:7949", "attacker.example:7949", http.StatusMisdirectedRequest},
		{"127.0.0.1:7949", "10.0.0.1", http.StatusMisdirectedRequest},
		{"", "evil.example", http.StatusMisdirectedRequest},
		{"0.0.0.0:7949", "node1.campus.example:7949", http.StatusOK},
	}
	for _, c := range cases {
		h := newTestHandler(t, Config{Source: newMemSource(scenarioA), Bind: c.bind})
		for _, path := range []string{"/", "/v1/status", "/metrics"} {
			res, body := do(t, h, http.MethodGet, path, "", map[string]string{"Host": c.host})
			if res.StatusCode != c.want {
				t.Errorf("bind %q, Host %q, GET %s: got %d, want %d", c.bind, c.host, path, res.StatusCode, c.want)
			}
			if c.want != http.StatusOK && strings.Contains(body, "n1") {
				t.Errorf("bind %q, Host %q, GET %s: a refused answer shows status data", c.bind, c.host, path)
			}
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"no source", Config{}},
		{"short secret", Config{Source: newMemSource(scenarioA), Secrets: []string{"abc"}}},
	}
	for _, c := range cases {
		if _, err := New(c.cfg); err == nil {
			t.Errorf("%s: New succeeded, want an error", c.name)
		}
	}
	reg := newTestHandler(t, Config{Source: newMemSource(scenarioA)}).cfg.Registry
	if _, err := New(Config{Source: newMemSource(scenarioA), Registry: reg}); err == nil {
		t.Errorf("New on a registry that already has the collector succeeded, want an error")
	}
}

// TestSecretsNeverShown configures two secrets (a gossip key in two of the
// encodings the agent holds it in), lets the source leak both into the
// status (a bug elsewhere must not become a leak), and checks that no
// response of any endpoint, refusals included, contains either, in any
// encoding, in its body or headers.
func TestSecretsNeverShown(t *testing.T) {
	gossipKey := "q+8/Ab<cd>&ef\"ghIJKLmnop==" // base64-ish, with characters every escaper rewrites
	hexKey := "0123456789abcdef0123456789abcdef"
	leaky := func() Status {
		s := scenarioA()
		s.Cluster.Name = "campus " + gossipKey
		s.Cluster.Members[0].Addr = hexKey
		s.Jobs[0].ID = policy.JobID("job-" + gossipKey)
		s.Reclaims.History[0].Jobs[0].Reason = "key " + gossipKey + " hex " + hexKey
		return s
	}
	src := newMemSource(leaky)
	h := newTestHandler(t, Config{Source: src, Bind: "0.0.0.0:7949", Secrets: []string{gossipKey, hexKey}})

	// The oracle: the secrets as they are and as every escaper would
	// write them, computed here independently of the filter's own list.
	var forms []string
	for _, s := range []string{hexKey, gossipKey} {
		var text, attr strings.Builder
		template.Must(template.New("").Parse("{{.}}")).Execute(&text, s)
		template.Must(template.New("").Parse(`<p title="{{.}}">`)).Execute(&attr, s)
		js, _ := json.Marshal(s)
		forms = append(forms, s, html.EscapeString(s), template.JSEscapeString(s), text.String(),
			strings.TrimSuffix(strings.TrimPrefix(attr.String(), `<p title="`), `">`), strings.Trim(string(js), `"`))
	}
	check := func(what string, res *http.Response, body string) {
		t.Helper()
		for _, f := range forms {
			if strings.Contains(body, f) {
				t.Errorf("%s: body contains secret form %q", what, f)
			}
			for k, vs := range res.Header {
				for _, v := range vs {
					if strings.Contains(v, f) {
						t.Errorf("%s: header %s contains secret form %q", what, k, f)
					}
				}
			}
		}
	}
	paths := []string{"/", "/ui/live", "/ui/style.css", "/ui/app.js", "/metrics", "/v1/status", "/v1/members", "/v1/jobs",
		"/v1/jobs/job-" + url.PathEscape(gossipKey), "/v1/jobs/" + hexKey, "/v1/transfers", "/v1/reclaims", "/v1/decisions", "/v1/" + hexKey, "/" + hexKey}
	sawRedaction := false
	for _, p := range paths {
		res, body := do(t, h, http.MethodGet, p, "", nil)
		check("GET "+p, res, body)
		sawRedaction = sawRedaction || strings.Contains(body, "[redacted]")
	}
	if !sawRedaction {
		t.Fatalf("no response showed [redacted]: the leaky source did not exercise the filter")
	}
	// Refusals echo nothing of the request.
	for _, hdr := range []map[string]string{
		{"Content-Type": "application/json", "Authorization": "Bearer " + hexKey},
		{"Content-Type": "application/json", "Authorization": "Bearer " + gossipKey},
	} {
		for _, p := range []string{"/v1/reclaim", "/v1/" + hexKey} {
			res, body := do(t, h, http.MethodPost, p, `{"notice_ns": 1, "key": "`+hexKey+`"}`, hdr)
			check("POST "+p, res, body)
		}
	}
	// And when the source fails with a secret in its error.
	src.fail(errors.New("cannot decrypt with " + gossipKey))
	for _, p := range []string{"/", "/v1/status", "/metrics"} {
		res, body := do(t, h, http.MethodGet, p, "", nil)
		check("failing GET "+p, res, body)
	}
}
