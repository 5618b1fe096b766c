package agent

import (
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// documentedMetrics parses the metric table of docs/metrics.md: name →
// type, sorted label names and exporter.
func documentedMetrics(t *testing.T) map[string][3]string {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatalf("read the metric documentation: %v", err)
	}
	rows := map[string][3]string{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 7 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`reclaimnet_") {
			continue
		}
		var labels []string
		for _, l := range strings.Split(cells[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = [3]string{strings.TrimSpace(cells[2]), strings.Join(labels, ","), strings.TrimSpace(cells[4])}
	}
	if len(rows) < 20 {
		t.Fatalf("docs/metrics.md: found %d metric rows, want the full table", len(rows))
	}
	return rows
}

// checkScrapeAgainstDocs checks a real agent's exposition against
// docs/metrics.md: every reclaimnet_* family is listed with its type and
// labels (every sample has the same label names), and every metric the
// table says every agent exports is there.
func checkScrapeAgainstDocs(t *testing.T, body string) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	docs := documentedMetrics(t)
	for name, f := range fams {
		if !strings.HasPrefix(name, "reclaimnet_") {
			continue
		}
		row, ok := docs[name]
		if !ok {
			t.Errorf("%s: exported but not listed in docs/metrics.md", name)
			continue
		}
		if got := strings.ToLower(f.GetType().String()); got != row[0] {
			t.Errorf("%s: type %s, docs/metrics.md says %s", name, got, row[0])
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName())
			}
			sort.Strings(labels)
			if got := strings.Join(labels, ","); got != row[1] {
				t.Errorf("%s: labels %s, docs/metrics.md says %s", name, got, row[1])
				break
			}
		}
	}
	for name, row := range docs {
		if _, ok := fams[name]; !ok && row[2] == "every agent" {
			t.Errorf("%s: docs/metrics.md says every agent exports it; this one does not", name)
		}
	}
}

// histogramOf returns the sample count and sum of a histogram in an
// agent's registry, for the series whose labels include want.
func histogramOf(t *testing.T, n *testNode, name string, want map[string]string) (uint64, float64) {
	t.Helper()
	fams, err := n.agent.Registry().Gather()
	if err != nil {
		t.Fatalf("gather %s: %v", n.info.Node, err)
	}
	i := slices.IndexFunc(fams, func(f *dto.MetricFamily) bool { return f.GetName() == name })
	if i < 0 {
		t.Fatalf("%s: no %s", n.info.Node, name)
	}
next:
	for _, m := range fams[i].Metric {
		for k, v := range want {
			if !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
				continue next
			}
		}
		return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
	}
	t.Fatalf("%s: no %s%v", n.info.Node, name, want)
	return 0, 0
}
