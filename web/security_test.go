package web

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

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

// recordingActions records the reclaims it was asked for.
type recordingActions struct {
	mu   sync.Mutex
	reqs []ReclaimRequest
	err  error
}

func (a *recordingActions) Reclaim(ctx context.Context, req ReclaimRequest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = append(a.reqs, req)
	return a.err
}

func (a *recordingActions) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reqs)
}

const testToken = "tok-0123456789abcdef-XYZ"

func TestReclaimAuthorization(t *testing.T) {
	jsonCT := map[string]string{"Content-Type": "application/json"}
	withAuth := func(tok string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tok}
	}
	body := `{"notice_ns": 60000000000}`
	cases := []struct {
		name     string
		actions  bool
		bind     string
		token    string
		header   map[string]string
		body     string
		want     int
		executes bool
	}{
		{"read-only by default", false, "", "", jsonCT, body, http.StatusMethodNotAllowed, false},
		{"loopback without token", true, "127.0.0.1:7949", "", jsonCT, body, http.StatusAccepted, true},
		{"non-loopback without token configured", true, "0.0.0.0:7949", "", jsonCT, body, http.StatusForbidden, false},
		{"non-loopback, no token sent", true, "10.0.0.5:7949", testToken, jsonCT, body, http.StatusUnauthorized, false},
		{"non-loopback, wrong token", true, "10.0.0.5:7949", testToken, withAuth(testToken + "x"), body, http.StatusUnauthorized, false},
		{"non-loopback, token as a prefix", true, "10.0.0.5:7949", testToken, withAuth(testToken[:10]), body, http.StatusUnauthorized, false},
		{"non-loopback, right token", true, "10.0.0.5:7949", testToken, withAuth(testToken), body, http.StatusAccepted, true},
		{"loopback with token configured needs it", true, "127.0.0.1:7949", testToken, jsonCT, body, http.StatusUnauthorized, false},
		{"not JSON (a cross-site form)", true, "127.0.0.1:7949", "", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body, http.StatusUnsupportedMediaType, false},
		{"cross-origin", true, "127.0.0.1:7949", "", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, body, http.StatusForbidden, false},
		{"same origin", true, "127.0.0.1:7949", "", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:7949"}, body, http.StatusAccepted, true},
		{"bad body", true, "127.0.0.1:7949", "", jsonCT, `{"notice": 5}`, http.StatusBadRequest, false},
		{"negative notice", true, "127.0.0.1:7949", "", jsonCT, `{"notice_ns": -1}`, http.StatusBadRequest, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acts := &recordingActions{}
			cfg := Config{Source: newMemSource(scenarioA), Bind: c.bind, Token: c.token}
			if c.actions {
				cfg.Actions = acts
			}
			h := newTestHandler(t, cfg)
			res, got := do(t, h, http.MethodPost, "/v1/reclaim", c.body, c.header)
			if res.StatusCode != c.want {
				t.Fatalf("got %d %s, want %d", res.StatusCode, got, c.want)
			}
			if n := acts.count(); (n == 1) != c.executes {
				t.Fatalf("got %d reclaims executed, want executed=%v", n, c.executes)
			}
			if c.executes && acts.reqs[0].Notice != time.Minute {
				t.Errorf("got notice %v, want 1m", acts.reqs[0].Notice)
			}
			var e ErrorResponse
			if !c.executes && (json.Unmarshal([]byte(got), &e) != nil || e.Error == "") {
				t.Errorf("got body %q, want a JSON error", got)
			}
		})
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

func TestReclaimActionError(t *testing.T) {
	acts := &recordingActions{err: errors.New("agent is shutting down")}
	h := newTestHandler(t, Config{Source: newMemSource(scenarioA), Actions: acts})
	res, body := do(t, h, http.MethodPost, "/v1/reclaim", `{"notice_ns": 0}`, map[string]string{"Content-Type": "application/json"})
	if res.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "shutting down") {
		t.Errorf("got %d %s, want 500 with the cause", res.StatusCode, body)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"no source", Config{}},
		{"short token", Config{Source: newMemSource(scenarioA), Token: "short"}},
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

// TestSecretsNeverShown configures a token and a gossip key, lets the
// source leak both into the status (a bug elsewhere must not become a
// leak), and checks that no response of any endpoint contains either, in
// any encoding, in its body or headers.
func TestSecretsNeverShown(t *testing.T) {
	gossipKey := "q+8/Ab<cd>&ef\"ghIJKLmnop==" // base64-ish, with characters every escaper rewrites
	leaky := func() Status {
		s := scenarioA()
		s.Cluster.Name = "campus " + gossipKey
		s.Cluster.Members[0].Addr = testToken
		s.Jobs[0].ID = policy.JobID("job-" + gossipKey)
		s.Reclaims.History[0].Jobs[0].Reason = "key " + gossipKey + " token " + testToken
		return s
	}
	src := newMemSource(leaky)
	acts := &recordingActions{err: errors.New("failed with " + testToken)}
	h := newTestHandler(t, Config{Source: src, Actions: acts, Bind: "0.0.0.0:7949", Token: testToken, Secrets: []string{gossipKey}})

	// The oracle: the secrets as they are and as every escaper would
	// write them, computed here independently of the filter's own list.
	var forms []string
	for _, s := range []string{testToken, gossipKey} {
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
		"/v1/jobs/job-" + url.PathEscape(gossipKey), "/v1/jobs/" + testToken, "/v1/transfers", "/v1/reclaims", "/v1/decisions", "/v1/" + testToken, "/" + testToken}
	sawRedaction := false
	for _, p := range paths {
		res, body := do(t, h, http.MethodGet, p, "", nil)
		check("GET "+p, res, body)
		sawRedaction = sawRedaction || strings.Contains(body, "[redacted]")
	}
	if !sawRedaction {
		t.Fatalf("no response showed [redacted]: the leaky source did not exercise the filter")
	}
	for _, hdr := range []map[string]string{
		{"Content-Type": "application/json", "Authorization": "Bearer " + testToken},
		{"Content-Type": "application/json", "Authorization": "Bearer " + testToken + "wrong"},
		{"Content-Type": "application/json", "Authorization": "Bearer " + gossipKey},
	} {
		res, body := do(t, h, http.MethodPost, "/v1/reclaim", `{"notice_ns": 1, "token": "`+testToken+`"}`, hdr)
		check("POST /v1/reclaim", res, body)
		res, body = do(t, h, http.MethodPost, "/v1/reclaim", `{"notice_ns": 1}`, hdr)
		check("POST /v1/reclaim", res, body)
	}
	if acts.count() != 1 {
		t.Errorf("got %d reclaims executed, want 1 (the one with the right token)", acts.count())
	}
	// And when the source fails with a secret in its error.
	src.fail(errors.New("cannot decrypt with " + gossipKey))
	for _, p := range []string{"/", "/v1/status", "/metrics"} {
		res, body := do(t, h, http.MethodGet, p, "", nil)
		check("failing GET "+p, res, body)
	}
}

func FuzzDecodeReclaimRequest(f *testing.F) {
	for _, seed := range []string{`{"notice_ns": 60000000000}`, `{"notice_ns": 0}`, `{}`, `{"notice_ns": -5}`, `{"x": 1}`, `[]`, `{"notice_ns": 1}{}`, ``, `{"notice_ns": 1e400}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeReclaimRequest(body)
		if err != nil {
			if req != (ReclaimRequest{}) {
				t.Fatalf("got %+v with error %v, want a zero request", req, err)
			}
			return
		}
		if req.Notice < 0 {
			t.Fatalf("accepted a negative notice %v", req.Notice)
		}
		if len(body) > maxRequestBody {
			t.Fatalf("accepted a %d-byte body", len(body))
		}
	})
}

func TestDecodeReclaimRequestRejectsTrailingData(t *testing.T) {
	for _, body := range []string{`{"notice_ns": 1}}`, `{"notice_ns": 1}]`, `{"notice_ns": 1}{}`, `{"notice_ns": 1} 2`} {
		if req, err := decodeReclaimRequest([]byte(body)); err == nil {
			t.Errorf("decode %q: got %+v, want an error for trailing data", body, req)
		}
	}
	if _, err := decodeReclaimRequest([]byte(`{"notice_ns": 1}` + "\n")); err != nil {
		t.Errorf("decode with a trailing newline: %v, want it accepted", err)
	}
}
