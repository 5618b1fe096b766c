package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestValidJobName(t *testing.T) {
	for _, ok := range []string{"a", "train-1", "A.b_c", strings.Repeat("x", 64)} {
		if err := ValidJobName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".hidden", "a/b", "../x", "a b", strings.Repeat("x", 65)} {
		if err := ValidJobName(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// TestReportFileRoundTrip: a written report reads back equal; a missing
// file is no report; a damaged one is an error naming the file.
func TestReportFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if rep, err := ReadReport(dir); rep != nil || err != nil {
		t.Fatalf("no file: got %+v, %v; want nil, nil", rep, err)
	}
	want := &ReclaimReport{Node: "n1", Announced: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC), Isolate: 3 * time.Millisecond,
		Isolated: true, Moved: []string{"j1"}, Degraded: []string{"j2"}, BytesSent: 42, UsedFor: time.Minute, Replicated: true}
	if err := WriteReport(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, ReportFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(dir); err == nil || !strings.Contains(err.Error(), ReportFile) {
		t.Fatalf("damaged file: got %v, want an error naming %s", err, ReportFile)
	}
}

// TestCall: without an agent Call says so (ErrNoAgent); with one it sends
// the request and returns the answer.
func TestCall(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Call(ctx, dir, Request{Op: OpStatus}); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("no socket: got %v, want ErrNoAgent", err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan Request, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var req Request
		_ = json.NewDecoder(conn).Decode(&req)
		got <- req
		_ = json.NewEncoder(conn).Encode(Response{Joined: len(req.Peers), Kind: KindPeerUnreachable})
	}()
	resp, err := Call(ctx, dir, Request{Op: OpJoin, Peers: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if req := <-got; req.Op != OpJoin || len(req.Peers) != 2 {
		t.Fatalf("agent got %+v, want the join of two peers", req)
	}
	if resp.Joined != 2 || resp.Kind != KindPeerUnreachable {
		t.Fatalf("response %+v, want joined 2 and kind %s", resp, KindPeerUnreachable)
	}
}

// TestStandardLibraryOnly: clients link the local API without the node.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/reclaimnet/reclaimnet/localapi").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.Contains(d, ".") && !strings.HasPrefix(d, "vendor/") && d != "github.com/reclaimnet/reclaimnet/localapi" {
			t.Errorf("localapi depends on %s", d)
		}
	}
}

// TestClientsDoNotLinkTheNode: the CLI (all but its agent subcommand),
// the campus tests and the demo reach a node through this package, not by
// importing the node (package agent).
func TestClientsDoNotLinkTheNode(t *testing.T) {
	checked := 0
	for _, dir := range []string{"../cli", "../campus", "../demo"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") || name == filepath.Join("..", "cli", "agent.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range f.Imports {
				if imp.Path.Value == `"github.com/reclaimnet/reclaimnet/agent"` {
					t.Errorf("%s imports the node (package agent); use localapi", name)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d files; the glob is broken", checked)
	}
}
