package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// fillAll sets every exported field reachable from v to a non-zero value
// (each scalar a different one, every list one element long, every pointer
// set), so that no field is left out of JSON as empty.
func fillAll(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 1, 0, 0, *n, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i), n)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillAll(v.Index(0), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(k, n)
		fillAll(e, n)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n % 3)) // small: traffic classes are 0..3
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	}
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonKeys collects every object key in a decoded JSON document, with the
// path where it occurs.
func jsonKeys(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out[k] = path + "." + k
			jsonKeys(e, path+"."+k, out)
		}
	case []any:
		for _, e := range x {
			jsonKeys(e, path+"[]", out)
		}
	}
}

// TestV1KeysSnakeCase: every key of every /v1 response, for a status with
// every field filled (so nothing is left out as empty) and for the
// scenario the other tests use, is snake_case; the policy values among
// them (hand-offs, placements, candidates, flows, reclaims) included.
func TestV1KeysSnakeCase(t *testing.T) {
	full := func() Status {
		var s Status
		n := 0
		fillAll(reflect.ValueOf(&s).Elem(), &n)
		s.Jobs[0].ID = "j"
		return s
	}
	paths := []string{"/v1/status", "/v1/members", "/v1/jobs", "/v1/jobs/j", "/v1/transfers", "/v1/reclaims",
		"/v1/decisions", "/v1/nothing"}
	for name, build := range map[string]func() Status{"full": full, "scenario": scenarioA} {
		h := newTestHandler(t, Config{Source: newMemSource(build)})
		seen := map[string]string{}
		for _, p := range paths {
			if name == "scenario" && p == "/v1/jobs/j" {
				p = "/v1/jobs/resnet"
			}
			res, body := do(t, h, http.MethodGet, p, "", nil)
			if p != "/v1/nothing" && res.StatusCode != http.StatusOK {
				t.Fatalf("%s: GET %s: %d %s", name, p, res.StatusCode, body)
			}
			var doc any
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatalf("%s: GET %s: %v\n%s", name, p, err, body)
			}
			jsonKeys(doc, p, seen)
		}
		var bad []string
		for k, where := range seen {
			if !snakeCase.MatchString(k) {
				bad = append(bad, fmt.Sprintf("%q (at %s)", k, where))
			}
		}
		sort.Strings(bad)
		for _, b := range bad {
			t.Errorf("%s: key %s is not snake_case", name, b)
		}
		// The walk reached the policy values (so it cannot pass by
		// seeing nothing).
		for _, k := range []string{"score_s", "rejected", "lacked_bytes", "rate_bytes_per_s", "announced", "candidates"} {
			if _, ok := seen[k]; !ok && name == "full" {
				t.Errorf("full: no key %q in any response: the walk missed the policy values", k)
			}
		}
	}
}

// TestWireKeepsEveryPolicyField: each /v1 type has a field for every field
// of the policy value it shows, and its converter carries each value
// across (a policy value with every field set, compared field by field).
func TestWireKeepsEveryPolicyField(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      any // pointer to the policy value
		convert func(any) any
	}{
		{"FlowDecision", &policy.FlowDecision{}, func(v any) any { f := WebFlow(*v.(*policy.FlowDecision)); return &f }},
		{"Reclaim", &policy.Reclaim{}, func(v any) any { r := WebReclaim(*v.(*policy.Reclaim)); return &r }},
		{"HandoffDecision", &policy.HandoffDecision{}, func(v any) any { return WebHandoff(*v.(*policy.HandoffDecision)) }},
		{"Placement", &policy.Placement{}, func(v any) any { return WebPlacement(*v.(*policy.Placement)) }},
	} {
		n := 0
		fillAll(reflect.ValueOf(tc.in).Elem(), &n)
		compareFields(t, tc.name, reflect.ValueOf(tc.in).Elem(), reflect.ValueOf(tc.convert(tc.in)).Elem())
	}
}

// compareFields checks that out has every field of in, by name, with the
// same value (enumerations compared by their String form).
func compareFields(t *testing.T, path string, in, out reflect.Value) {
	t.Helper()
	for i := range in.NumField() {
		f := in.Type().Field(i)
		o := out.FieldByName(f.Name)
		if !o.IsValid() {
			t.Errorf("%s.%s: the /v1 type %s has no such field", path, f.Name, out.Type())
			continue
		}
		a := in.Field(i)
		switch {
		case a.Kind() == reflect.Slice && a.Type().Elem().Kind() == reflect.Struct:
			if a.Len() != o.Len() {
				t.Errorf("%s.%s: %d elements, want %d", path, f.Name, o.Len(), a.Len())
				continue
			}
			for k := range a.Len() {
				compareFields(t, fmt.Sprintf("%s.%s[%d]", path, f.Name, k), a.Index(k), o.Index(k))
			}
		case fmt.Sprint(a.Interface()) != fmt.Sprint(o.Interface()):
			t.Errorf("%s.%s: got %v, want %v", path, f.Name, o.Interface(), a.Interface())
		}
	}
}
