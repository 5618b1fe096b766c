package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/enforce"
	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/demo"
	"github.com/reclaimnet/reclaimnet/gpu"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// jsonOutputs are the read commands' --json documents, by the type each
// prints, and the /v1 endpoint that serves the same document (if any).
var jsonOutputs = []struct {
	command string
	typ     reflect.Type
	twin    string
}{
	{"status --json", reflect.TypeFor[web.Status](), "/v1/status"},
	{"members --json", reflect.TypeFor[web.MembersResponse](), "/v1/members"},
	{"jobs --json", reflect.TypeFor[web.JobsResponse](), "/v1/jobs"},
	{"jobs JOB --json", reflect.TypeFor[localapi.JobStory](), ""},
	{"logs JOB --json", reflect.TypeFor[LogsView](), ""},
	{"fetch JOB --json", reflect.TypeFor[localapi.FetchInfo](), ""},
	{"reclaim --status --json", reflect.TypeFor[localapi.ReclaimStatus](), ""},
	{"lend --status --json", reflect.TypeFor[owner.Status](), ""},
	{"gpus --json", reflect.TypeFor[gpu.Inventory](), ""},
	{"killswitch status --json", reflect.TypeFor[KillSwitchView](), ""},
	{"trace export --out FILE --json", reflect.TypeFor[TraceSummary](), ""},
	{"token list --json", reflect.TypeFor[TokenList](), ""},
	{"demo --json", reflect.TypeFor[demo.Result](), ""},
}

// TestJSONSchemas: the --json documents' schemas (field paths and JSON
// types, from the Go types) are pinned in testdata/json-schemas.golden, so
// a change to what scripts read is a reviewed change (-update rewrites
// it).
func TestJSONSchemas(t *testing.T) {
	var b strings.Builder
	for _, o := range jsonOutputs {
		fmt.Fprintf(&b, "## reclaimnet %s", o.command)
		if o.twin != "" {
			fmt.Fprintf(&b, " (as GET %s)", o.twin)
		}
		b.WriteString("\n")
		for _, line := range schemaOf(o.typ, "", map[reflect.Type]bool{}) {
			b.WriteString(line + "\n")
		}
		b.WriteString("\n")
	}
	golden(t, filepath.Join("testdata", "json-schemas.golden"), b.String())
}

// TestJSONKeysSnakeCase: every key of every --json document (and so of
// its /v1 twin) is snake_case, at any depth, from the Go types: optional
// fields and policy values included.
func TestJSONKeysSnakeCase(t *testing.T) {
	key := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for _, o := range jsonOutputs {
		for _, line := range schemaOf(o.typ, "", map[reflect.Type]bool{}) {
			path, _, _ := strings.Cut(line, ":")
			for seg := range strings.SplitSeq(path, ".") {
				seg = strings.NewReplacer("?", "", "[]", "", "{}", "").Replace(seg)
				if seg != "" && !key.MatchString(seg) {
					t.Errorf("%s: key %q of %s is not snake_case", o.command, seg, path)
				}
			}
		}
	}
}

// schemaOf lists the JSON fields of t as "path: type" lines.
func schemaOf(t reflect.Type, path string, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return []string{path + ": time (RFC 3339)"}
	case t == reflect.TypeFor[time.Duration]():
		return []string{path + ": integer (nanoseconds)"}
	case t == reflect.TypeFor[json.RawMessage]():
		return []string{path + ": any"}
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Marshaler]()) || t.Implements(reflect.TypeFor[json.Marshaler]()) {
		return []string{path + ": " + t.Kind().String() + " (custom encoding)"}
	}
	switch t.Kind() {
	case reflect.Struct:
		if seen[t] {
			return []string{path + ": " + t.Name() + " (recursive)"}
		}
		seen[t] = true
		defer delete(seen, t)
		var out []string
		for f := range t.Fields() {
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				out = append(out, schemaOf(f.Type, path, seen)...)
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := strings.TrimPrefix(path+"."+name, ".")
			if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
				p += "?"
			}
			out = append(out, schemaOf(f.Type, p, seen)...)
		}
		return out
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return []string{path + ": string (base64)"}
		}
		return schemaOf(t.Elem(), path+"[]", seen)
	case reflect.Map:
		return schemaOf(t.Elem(), path+"{}", seen)
	case reflect.String:
		return []string{path + ": string"}
	case reflect.Bool:
		return []string{path + ": boolean"}
	case reflect.Float32, reflect.Float64:
		return []string{path + ": number"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return []string{path + ": integer"}
	case reflect.Interface:
		return []string{path + ": any"}
	}
	return []string{path + ": " + t.Kind().String()}
}

// TestJSONMatchesV1: against a running agent, each read command's --json
// has the same fields, with the same JSON types, as its /v1 twin, field by
// field, and names the same node and members. The trace export is the
// document of GET /v1/trace; killswitch status's fields are those of
// GET /v1/enforce.
func TestJSONMatchesV1(t *testing.T) {
	dir, _ := startCLIAgent(t, "--fixed-load", "0.1", "--gpu", "RTX-4090:24GiB:8.9")
	b, err := os.ReadFile(filepath.Join(dir, localapi.InfoFile))
	if err != nil {
		t.Fatal(err)
	}
	var info localapi.Info
	if err := json.Unmarshal(b, &info); err != nil || info.HTTPAddr == "" {
		t.Fatalf("info %s: %v", b, err)
	}
	// A job, so the jobs lists have an element to compare.
	if code, _, errOut := runCLI(t, "run", "--data-dir", dir, "--name", "v1job", "--", "/bin/sh", "-c", "sleep 600"); code != ExitOK {
		t.Fatalf("run: %s", errOut)
	}
	get := func(path string) []byte {
		resp, err := http.Get("http://" + info.HTTPAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	wait.For(t, 30*time.Second, "the job running", func() bool {
		_, out, _ := runCLI(t, "jobs", "--json", "--data-dir", dir)
		var jobs web.JobsResponse
		return json.Unmarshal([]byte(out), &jobs) == nil && len(jobs.Jobs) == 1 && jobs.Jobs[0].State == "running"
	})
	for _, tc := range []struct {
		args []string
		twin string
		typ  reflect.Type
	}{
		{[]string{"status", "--json"}, "/v1/status", reflect.TypeFor[web.Status]()},
		{[]string{"members", "--json"}, "/v1/members", reflect.TypeFor[web.MembersResponse]()},
		{[]string{"jobs", "--json"}, "/v1/jobs", reflect.TypeFor[web.JobsResponse]()},
	} {
		code, out, errOut := runCLI(t, append(tc.args, "--data-dir", dir)...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		var cli, v1 any
		if err := json.Unmarshal([]byte(out), &cli); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if err := json.Unmarshal(get(tc.twin), &v1); err != nil {
			t.Fatalf("GET %s: %v", tc.twin, err)
		}
		// Fields left out when empty may come and go between the two reads.
		optional := map[string]bool{}
		for _, line := range schemaOf(tc.typ, "", map[reflect.Type]bool{}) {
			path, _, _ := strings.Cut(line, ":")
			if strings.HasSuffix(path, "?") {
				optional[strings.ReplaceAll(path, "?", "")] = true
			}
		}
		var diffs []string
		compareShape("", cli, v1, optional, &diffs)
		for _, d := range diffs {
			t.Errorf("%s vs GET %s: %s", strings.Join(tc.args, " "), tc.twin, d)
		}
		for _, key := range []string{"node", "cluster.leader", "cluster.members[].id", "jobs[].id"} {
			if a, b := valuesAt(cli, key), valuesAt(v1, key); a != b {
				t.Errorf("%s vs GET %s: %s is %s here, %s there", strings.Join(tc.args, " "), tc.twin, key, a, b)
			}
		}
	}
	// The trace: the same records, kind by kind.
	code, out, errOut := runCLI(t, "trace", "export", "--data-dir", dir)
	if code != ExitOK {
		t.Fatalf("trace export: %s", errOut)
	}
	if a, b := traceKinds(t, out), traceKinds(t, string(get("/v1/trace"))); a != b {
		t.Errorf("trace export records %s, GET /v1/trace %s", a, b)
	}
	// killswitch status --json shares its field names and types with
	// GET /v1/enforce.
	enf := map[string]reflect.Type{}
	for f := range reflect.TypeFor[enforce.Stats]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		enf[name] = f.Type
	}
	shared := 0
	for f := range reflect.TypeFor[KillSwitchView]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if typ, ok := enf[name]; ok {
			shared++
			if typ != f.Type {
				t.Errorf("killswitch status --json %s is %v, GET /v1/enforce's is %v", name, f.Type, typ)
			}
		}
	}
	if shared < 7 {
		t.Errorf("killswitch status --json shares %d fields with GET /v1/enforce, want its 7 kill-switch fields", shared)
	}
}

// compareShape reports where a and b (decoded JSON) differ in keys or in
// JSON types; a null matches any type (a value not there at that moment),
// and a key of optional (paths as schemaOf writes them) may be missing.
func compareShape(path string, a, b any, optional map[string]bool, diffs *[]string) {
	if a == nil || b == nil {
		return
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: object here, %T there", path, b))
			return
		}
		for k := range x {
			if _, ok := y[k]; !ok && !optional[strings.TrimPrefix(path+"."+k, ".")] {
				*diffs = append(*diffs, fmt.Sprintf("%s.%s only here", path, k))
			}
		}
		for k := range y {
			if _, ok := x[k]; !ok && !optional[strings.TrimPrefix(path+"."+k, ".")] {
				*diffs = append(*diffs, fmt.Sprintf("%s.%s missing here", path, k))
			} else if ok {
				compareShape(path+"."+k, x[k], y[k], optional, diffs)
			}
		}
	case []any:
		y, ok := b.([]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: array here, %T there", path, b))
			return
		}
		if len(x) > 0 && len(y) > 0 {
			compareShape(path+"[]", x[0], y[0], optional, diffs)
		}
	default:
		if reflect.TypeOf(a) != reflect.TypeOf(b) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %T here, %T there", path, a, b))
		}
	}
}

// valuesAt collects the values at a dotted path ("[]" spreads a list).
func valuesAt(v any, path string) string {
	vals := []any{v}
	for part := range strings.SplitSeq(path, ".") {
		spread := strings.HasSuffix(part, "[]")
		part = strings.TrimSuffix(part, "[]")
		var next []any
		for _, x := range vals {
			m, _ := x.(map[string]any)
			y, ok := m[part]
			if !ok {
				continue
			}
			if l, isList := y.([]any); spread && isList {
				next = append(next, l...)
			} else {
				next = append(next, y)
			}
		}
		vals = next
	}
	s := fmt.Sprint(vals...)
	return "[" + s + "]"
}

// traceKinds counts a trace's records by kind ("header:1 job:1 node:1").
func traceKinds(t *testing.T, doc string) string {
	t.Helper()
	counts := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("trace line %q: %v", sc.Text(), err)
		}
		if rec.Kind != "bandwidth" { // sampled as time passes
			counts[rec.Kind]++
		}
	}
	var parts []string
	for k, n := range counts {
		parts = append(parts, fmt.Sprintf("%s:%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
