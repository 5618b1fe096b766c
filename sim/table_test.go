package sim

import (
	"strings"
	"testing"
)

// TextTables aligns each Markdown table (numbers right, text left, a rule
// under the header) and keeps every other line as it is.
func TestTextTables(t *testing.T) {
	md := "trace: x\n\n| system | loss GPU-h | share |\n|---|---|---|\n| B2 no migration | 727.12 | 0.5 % |\n| ReclaimNet | 4.61 | — |\n\nafter\n| a | b |\n|---|---|\n| long text | x |\n"
	want := "trace: x\n\n" +
		"system           loss GPU-h  share\n" +
		"───────────────  ──────────  ─────\n" +
		"B2 no migration      727.12  0.5 %\n" +
		"ReclaimNet             4.61      —\n" +
		"\nafter\n" +
		"a          b\n" +
		"─────────  ─\n" +
		"long text  x\n"
	if got := TextTables(md); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := TextTables("no table | here\n"); got != "no table | here\n" {
		t.Errorf("a line that is not a table changed: %q", got)
	}
}

// The report's own tables come out aligned: every row of a table as wide
// as its rule.
func TestReportTextTableAligned(t *testing.T) {
	rep := plotReport()
	for i := range rep.Rows {
		rep.Rows[i].Mean = Result{WorkLossGPUh: float64(i) * 300.5, Interruptions: i}
	}
	var b strings.Builder
	rep.WriteTable(&b)
	lines := strings.Split(TextTables(b.String()), "\n")
	tables := 0
	for i, l := range lines {
		if !strings.HasPrefix(l, "─") {
			continue
		}
		tables++
		for _, row := range lines[i+1 : i+1+len(rep.Rows)] {
			if len([]rune(row)) != len([]rune(l)) || strings.Contains(row, "|") {
				t.Errorf("row %q: %d wide, rule %d (or Markdown left)", row, len([]rune(row)), len([]rune(l)))
			}
		}
	}
	if tables != 4 {
		t.Errorf("got %d tables, want the report's 4", tables)
	}
}
