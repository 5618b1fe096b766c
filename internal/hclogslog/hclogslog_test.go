package hclogslog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu    sync.Mutex
	attrs []slog.Attr
	out   *[]slog.Record
	level slog.Level
}

func newRecords(level slog.Level) *records { return &records{out: &[]slog.Record{}, level: level} }

func (r *records) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec = rec.Clone()
	rec.AddAttrs(r.attrs...)
	*r.out = append(*r.out, rec)
	return nil
}
func (r *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &records{attrs: append(append([]slog.Attr(nil), r.attrs...), as...), out: r.out, level: r.level}
}
func (r *records) WithGroup(string) slog.Handler { return r }

func (r *records) all() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), *r.out...)
}

func attrsOf(rec slog.Record) map[string]string {
	m := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// TestLevelsAndFields: each hclog level becomes its slog level, the
// message stays as it was (no "[WARN] raft:" prefix), and key/value pairs,
// With's and the logger's name become attributes.
func TestLevelsAndFields(t *testing.T) {
	h := newRecords(LevelTrace)
	l := New(slog.New(h), "raft", Options{Level: LevelTrace}).With("cluster", "c1")
	l.Trace("t")
	l.Debug("d", "n", 3)
	l.Info("i")
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "10.0.0.1:7947", "last-leader-id", "n0")
	l.Error("failed to appendEntries to", "peer", "n2", "error", errors.New("connection refused"))
	l.Log(hclog.Warn, "via Log", "odd")
	l.Named("net").Info("named")
	got := h.all()
	want := []struct {
		level slog.Level
		msg   string
	}{{LevelTrace, "t"}, {slog.LevelDebug, "d"}, {slog.LevelInfo, "i"},
		{slog.LevelWarn, "heartbeat timeout reached, starting election"}, {slog.LevelError, "failed to appendEntries to"},
		{slog.LevelWarn, "via Log"}, {slog.LevelInfo, "named"}}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg {
			t.Errorf("record %d: %v %q, want %v %q", i, got[i].Level, got[i].Message, w.level, w.msg)
		}
	}
	if a := attrsOf(got[3]); a["last-leader-id"] != "n0" || a["last-leader-addr"] != "10.0.0.1:7947" || a["logger"] != "raft" || a["cluster"] != "c1" {
		t.Errorf("warn attributes %v", a)
	}
	if a := attrsOf(got[4]); a["peer"] != "n2" || a["error"] != "connection refused" {
		t.Errorf("error attributes %v", a)
	}
	if a := attrsOf(got[5]); a["EXTRA_VALUE_AT_END"] != "odd" {
		t.Errorf("a value without a key: %v", a)
	}
	if a := attrsOf(got[6]); a["logger"] != "raft.net" {
		t.Errorf("named logger: %v", a)
	}
}

// TestLevelGuards: the logger's level and the handler's both hold back
// records, and the Is* guards say so.
func TestLevelGuards(t *testing.T) {
	h := newRecords(slog.LevelInfo)
	l := New(slog.New(h), "raft", Options{Level: slog.LevelWarn})
	l.Info("dropped by the logger's level")
	l.Warn("kept")
	if l.IsInfo() || !l.IsWarn() || l.IsDebug() {
		t.Errorf("guards: info %v warn %v debug %v; want false true false", l.IsInfo(), l.IsWarn(), l.IsDebug())
	}
	l.SetLevel(hclog.Trace)
	l.Debug("dropped by the handler")
	l.Info("kept too")
	if l.GetLevel() != hclog.Trace || l.IsDebug() {
		t.Errorf("after SetLevel(Trace): level %v, IsDebug %v; the handler still drops debug", l.GetLevel(), l.IsDebug())
	}
	var msgs []string
	for _, r := range h.all() {
		msgs = append(msgs, r.Message)
	}
	if strings.Join(msgs, "|") != "kept|kept too" {
		t.Errorf("records %q, want kept and kept too", msgs)
	}
}

// TestStandardWriter: memberlist's "[LEVEL] memberlist: text" lines
// become records at that level with the text alone.
func TestStandardWriter(t *testing.T) {
	h := newRecords(LevelTrace)
	std := New(slog.New(h), "memberlist", Options{Level: LevelTrace}).StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	std.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:5000")
	std.Printf("[WARN] memberlist: Was able to connect to n2 over TCP but UDP probes failed")
	std.Printf("[ERR] memberlist: Failed to send ping: write: connection refused")
	std.Printf("no level at all")
	got := h.all()
	want := []struct {
		level slog.Level
		msg   string
	}{{slog.LevelDebug, "Stream connection from=127.0.0.1:5000"}, {slog.LevelWarn, "Was able to connect to n2 over TCP but UDP probes failed"},
		{slog.LevelError, "Failed to send ping: write: connection refused"}, {slog.LevelInfo, "no level at all"}}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg {
			t.Errorf("line %d: %v %q, want %v %q", i, got[i].Level, got[i].Message, w.level, w.msg)
		}
	}
}

// TestRepeatsAboutAPeerAreLimited: the same error about the same peer is
// logged once per window; the next one after it carries the count left
// out; another peer, another message or a record without a peer is not
// held back.
func TestRepeatsAboutAPeerAreLimited(t *testing.T) {
	h := newRecords(LevelTrace)
	now := time.Unix(1000, 0)
	l := New(slog.New(h), "raft", Options{Level: LevelTrace, RepeatWindow: 30 * time.Second, Now: func() time.Time { return now }})
	for range 53 { // 53 heartbeat errors in 31 s to a node that left
		l.Error("failed to heartbeat to", "peer", "10.0.0.9:7947", "backoff time", "10ms", "error", "connection refused")
		l.Error("failed to appendEntries to", "peer", "10.0.0.9:7947", "error", "connection refused")
		now = now.Add(31 * time.Second / 53)
	}
	l.Error("failed to heartbeat to", "peer", "10.0.0.8:7947", "error", "connection refused")
	l.Error("failed to list snapshots", "error", "disk")
	l.Error("failed to list snapshots", "error", "disk")
	l.Info("failed to heartbeat to", "peer", "10.0.0.9:7947") // below Warn: never held back
	count := map[string]int{}
	var after map[string]string
	for _, r := range h.all() {
		a := attrsOf(r)
		count[r.Message+" "+a["peer"]]++
		if r.Message == "failed to heartbeat to" && a["peer"] == "10.0.0.9:7947" && a["repeats_left_out"] != "" {
			after = a
		}
	}
	if n := count["failed to heartbeat to 10.0.0.9:7947"]; n != 3 { // t=0, t≈30.4 s, and the Info
		t.Errorf("heartbeat errors to the departed peer logged %d times in 31 s, want 2 (and the info)", n)
	}
	if n := count["failed to appendEntries to 10.0.0.9:7947"]; n != 2 {
		t.Errorf("appendEntries errors logged %d times, want 2", n)
	}
	if after == nil || after["repeats_left_out"] != "51" {
		t.Errorf("the record after the window: %v; want repeats_left_out 51", after)
	}
	if count["failed to heartbeat to 10.0.0.8:7947"] != 1 || count["failed to list snapshots "] != 2 {
		t.Errorf("other peers and records without a peer must not be held back: %v", count)
	}
}

// TestJSONOutput: through a JSON handler every record is one object with
// the level and the fields as keys.
func TestJSONOutput(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: LevelTrace})), "raft", Options{Level: LevelTrace})
	l.Warn("election won", "term", 4, "tally", 2)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if rec["level"] != "WARN" || rec["msg"] != "election won" || rec["term"] != 4.0 || rec["logger"] != "raft" {
		t.Errorf("record %v", rec)
	}
}
