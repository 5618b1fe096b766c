package trace

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	v3Header    = `{"kind":"header","format":"reclaimnet-trace","version":3,"start":"2026-01-05T00:00:00Z","duration_s":100}`
	testJob     = `{"kind":"job","t":1,"id":"j","gpus":1,"vram_gb":8,"capability":0,"work_gpu_h":1,"checkpoint_mb":10,"restart_s":1,"loss_budget_s":60}`
	v2Header    = `{"kind":"header","format":"reclaimnet-trace","version":2,"start":"2026-01-05T00:00:00Z","duration_s":100}`
	testStorage = `{"kind":"node","id":"s","building":"mr","gpu_model":"","gpus":0,"vram_gb":0,"capability":0,"access_link":"acc-s","role":"storage"}`
	testHeader  = `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T00:00:00Z","duration_s":100}`
	testNode    = `{"kind":"node","id":"a","building":"b1","gpu_model":"X","gpus":1,"vram_gb":24,"capability":8,"access_link":"acc-a"}`
	testLink    = `{"kind":"link","id":"acc-a","a":"a","b":"sw-b1","capacity_mbps":1000}`
)

func TestParseErrorsNameFileAndLine(t *testing.T) {
	header, node, link := testHeader, testNode, testLink
	cases := []struct {
		name  string
		lines []string
		line  int
		want  string
	}{
		{"no header", []string{node}, 1, `want a "header" record`},
		{"bad version", []string{strings.Replace(header, `"version":1`, `"version":9`, 1)}, 1, "version 9 not supported"},
		{"unknown node", []string{header, node, link, `{"kind":"departure","t":5,"node":"zz","type":"emergency","notice_s":0}`}, 4, `unknown node "zz"`},
		{"out of order", []string{header, node, link, `{"kind":"return","t":50,"node":"a"}`, `{"kind":"return","t":10,"node":"a"}`}, 5, "before the previous event"},
		{"missing column", []string{header, `{"kind":"node","id":"a","building":"b1","vram_gb":24,"access_link":"acc-a"}`}, 2, "gpus must be positive"},
		{"unknown column", []string{header, `{"kind":"return","t":1,"node":"a","colour":"red"}`}, 2, `unknown field "colour"`},
		{"not json", []string{header, `t=1 node=a`}, 2, "not a JSON object"},
		{"unknown link", []string{header, node, link, `{"kind":"bandwidth","t":1,"link":"up-x","available_mbps":5}`}, 4, `unknown link "up-x"`},
		{"scheduled without notice", []string{header, node, link, `{"kind":"departure","t":5,"node":"a","type":"scheduled","notice_s":0}`}, 4, "needs notice_s"},
		{"undeclared access link", []string{header, node}, 2, `access link "acc-a" is not declared`},
		{"version 2 field in version 1", []string{header, strings.Replace(node, `"id":"a"`, `"id":"a","lab":"l1"`, 1)}, 2, "need version 2"},
		{"unknown role", []string{v2Header, strings.Replace(node, `"id":"a"`, `"id":"a","role":"tape"`, 1)}, 2, `role "tape"`},
		{"absent storage", []string{v2Header, `{"kind":"node","id":"s","building":"mr","gpu_model":"","gpus":0,"vram_gb":0,"capability":0,"access_link":"acc-s","role":"storage","absent":true}`}, 2, "cannot be absent"},
		{"replicas in version 2", []string{v2Header, node, link, strings.Replace(testJob, `"id":"j"`, `"id":"j","replicas":2`, 1)}, 4, "replicas needs version 3"},
		{"too many replicas", []string{v3Header, node, link, strings.Replace(testJob, `"id":"j"`, `"id":"j","replicas":9`, 1)}, 4, "replicas 9, want 1 to 8"},
		{"negative replicas", []string{v3Header, node, link, strings.Replace(testJob, `"id":"j"`, `"id":"j","replicas":-1`, 1)}, 4, "replicas -1"},
		{"storage departs", []string{v2Header, testStorage, `{"kind":"link","id":"acc-s","a":"s","b":"core","capacity_mbps":10000}`,
			`{"kind":"departure","t":5,"node":"s","type":"emergency","notice_s":0}`}, 4, `storage node "s" never leaves`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(strings.Join(tc.lines, "\n")+"\n"), "bad.jsonl")
			if err == nil {
				t.Fatalf("got no error, want one at bad.jsonl:%d", tc.line)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("got %T %v, want *ParseError", err, err)
			}
			prefix := fmt.Sprintf("bad.jsonl:%d:", tc.line)
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want prefix %q containing %q", err, prefix, tc.want)
			}
		})
	}
}

// TestWriteReadRoundTrip: what Write produces, Read gives back unchanged,
// with the events merged in time order.
func TestWriteReadRoundTrip(t *testing.T) {
	in := &Trace{
		Header: Header{Format: Format, Version: Version, DurationS: 100, Name: "rt"},
		Nodes:  []NodeRec{{Kind: KindNode, ID: "a", Building: "b1", GPUModel: "X", GPUs: 2, VRAMGB: 24, Capability: 8, AccessLink: "acc-a"}},
		Links:  []LinkRec{{Kind: KindLink, ID: "acc-a", A: "a", B: "sw-b1", CapacityMbs: 1000}},
		Departures: []DepartureRec{
			{Kind: KindDeparture, T: 10, Node: "a", Type: Scheduled, NoticeS: 30},
			{Kind: KindDeparture, T: 50, Node: "a", Type: Emergency},
		},
		Returns:   []ReturnRec{{Kind: KindReturn, T: 20, Node: "a"}},
		Bandwidth: []BandwidthRec{{Kind: KindBandwidth, T: 5, Link: "acc-a", AvailableMbs: 400}},
		Jobs:      []JobRec{{Kind: KindJob, T: 1, ID: "j", GPUs: 1, VRAMGB: 8, WorkGPUh: 2, CheckpointMB: 100, RestartS: 30, LossBudgetS: 300}},
	}
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(&b, "rt.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	in.Header.Kind = KindHeader
	if fmt.Sprint(*out) != fmt.Sprint(*in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *out, *in)
	}
}

// TestWriteKeepsVersionOne: a trace that uses no version-2 field is
// written as version 1 (older readers still read it); one with a storage
// node, a lab or a pool as version 2, one whose job names its replicas as
// version 3, and it reads back the same.
func TestWriteKeepsVersionOne(t *testing.T) {
	plain := &Trace{
		Header: Header{Format: Format, DurationS: 100},
		Nodes:  []NodeRec{{Kind: KindNode, ID: "a", Building: "b1", GPUModel: "X", GPUs: 1, VRAMGB: 24, Capability: 8, AccessLink: "acc-a"}},
		Links:  []LinkRec{{Kind: KindLink, ID: "acc-a", A: "a", B: "sw-b1", CapacityMbs: 1000}},
	}
	var b bytes.Buffer
	if err := Write(&b, plain); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"version":1`) {
		t.Fatalf("a trace without version-2 fields was written as %q, want version 1", strings.SplitN(b.String(), "\n", 2)[0])
	}
	v2 := *plain
	v2.Nodes = []NodeRec{{Kind: KindNode, ID: "a", Building: "b1", GPUModel: "X", GPUs: 1, VRAMGB: 24, Capability: 8, AccessLink: "acc-a", Lab: "l1", Pool: "p"},
		{Kind: KindNode, ID: "s", Building: "mr", AccessLink: "acc-s", Role: RoleStorage}}
	v2.Links = append(v2.Links, LinkRec{Kind: KindLink, ID: "acc-s", A: "s", B: "core", CapacityMbs: 10000})
	b.Reset()
	if err := Write(&b, &v2); err != nil {
		t.Fatal(err)
	}
	out, err := Read(&b, "v2.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if out.Header.Version != 2 || !out.Nodes[1].Storage() || out.Nodes[0].Storage() || out.Nodes[0].Lab != "l1" || out.Nodes[0].Pool != "p" {
		t.Fatalf("version-2 trace read back as version %d with nodes %+v", out.Header.Version, out.Nodes)
	}
	// A job that names its replicas needs version 3; one that does not
	// (the default) leaves the version where the nodes put it.
	v3 := *plain
	v3.Jobs = []JobRec{{Kind: KindJob, T: 1, ID: "j", GPUs: 1, WorkGPUh: 1, CheckpointMB: 10}, {Kind: KindJob, T: 2, ID: "k", GPUs: 1, WorkGPUh: 1, CheckpointMB: 10, Replicas: 3}}
	b.Reset()
	if err := Write(&b, &v3); err != nil {
		t.Fatal(err)
	}
	if out, err = Read(&b, "v3.jsonl"); err != nil {
		t.Fatal(err)
	}
	if out.Header.Version != 3 || out.Jobs[0].Replicas != 0 || out.Jobs[1].Replicas != 3 {
		t.Fatalf("version-3 trace read back as version %d with jobs %+v", out.Header.Version, out.Jobs)
	}
	v3.Jobs = v3.Jobs[:1]
	if Needed(&v3) != 1 {
		t.Fatalf("a job without replicas needs version %d, want 1", Needed(&v3))
	}
}

// FuzzRead: a trace file is untrusted input. Read never panics, and what
// it accepts it writes back to a trace it reads the same.
func FuzzRead(f *testing.F) {
	f.Add(strings.Join([]string{testHeader, testNode, testLink, `{"kind":"departure","t":5,"node":"a","type":"emergency","notice_s":0}`}, "\n"))
	f.Add(testHeader + "\n" + `{"kind":"return","t":1,"node":"a","colour":"red"}`)
	f.Add(strings.Join([]string{v2Header, testStorage, `{"kind":"link","id":"acc-s","a":"s","b":"core","capacity_mbps":10000}`}, "\n"))
	f.Add(strings.Join([]string{testHeader, testNode, testLink, testJob}, "\n"))
	f.Add(strings.Join([]string{v3Header, testNode, testLink, strings.Replace(testJob, `"id":"j"`, `"id":"j","replicas":2`, 1)}, "\n"))
	f.Fuzz(func(t *testing.T, text string) {
		tr, err := Read(strings.NewReader(text), "fuzz.jsonl")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) && !strings.HasPrefix(err.Error(), "read fuzz.jsonl") {
				t.Fatalf("error %v is neither a ParseError nor a read error", err)
			}
			return
		}
		var b bytes.Buffer
		if err := Write(&b, tr); err != nil {
			t.Fatal(err)
		}
		again, err := Read(&b, "again.jsonl")
		if err != nil {
			t.Fatalf("reading back what Write wrote: %v", err)
		}
		if len(again.Nodes) != len(tr.Nodes) || len(again.Jobs) != len(tr.Jobs) || len(again.Departures) != len(tr.Departures) {
			t.Fatalf("round trip changed the trace: %d/%d nodes, %d/%d jobs", len(again.Nodes), len(tr.Nodes), len(again.Jobs), len(tr.Jobs))
		}
	})
}
