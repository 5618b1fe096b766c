package sim

import (
	"bufio"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/reclaimnet/reclaimnet/trace"
)

// The public traces the importers read, each under the name it is
// published with, in one directory layout (what -traces DIR holds):
//
//	bamboo_spot/aws/p3-trace.csv                  Bamboo spot events (shipped)
//	bamboo_spot/aws/g4dn-trace.csv                Bamboo spot events (shipped)
//	microsoft99_desktop/PingData00.txt            hourly pings of 1,000 desktops
//	alibaba_gpu_v2023/openb_pod_list_default.csv  Alibaba PAI GPU pods
//	philly_runtime/philly_runtime.csv             Philly job runtimes
//
// The Bamboo traces are MIT-licensed: they live in sim/traces with their
// licence and are embedded here, so -import bamboo-p3 works anywhere. The
// others have no licence that allows shipping them; the user downloads them
// (traceOrigins says from where).
const (
	fileBambooP3  = "bamboo_spot/aws/p3-trace.csv"
	fileBambooG4  = "bamboo_spot/aws/g4dn-trace.csv"
	fileMicrosoft = "microsoft99_desktop/PingData00.txt"
	fileAlibaba   = "alibaba_gpu_v2023/openb_pod_list_default.csv"
	filePhilly    = "philly_runtime/philly_runtime.csv"
)

// traceOrigins says where to download each file that does not ship.
var traceOrigins = map[string]string{
	fileMicrosoft: "github.com/inkrement/SLA, file microsoft/PingData00.txt",
	fileAlibaba:   "github.com/alibaba/clusterdata, file cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv",
	filePhilly:    "github.com/alibaba/clusterdata, file cluster-trace-gpu-v2020/analysis/philly_runtime.csv",
}

//go:embed traces/bamboo_spot/aws/*.csv
var shippedTraces embed.FS

// traceFiles opens the files of the layout above from a directory, and
// from the copies embedded in the binary where the directory has none (or
// no directory is given).
type traceFiles struct{ dir string }

// open returns the file and the name to show in errors.
func (s traceFiles) open(name string) (io.ReadCloser, string, error) {
	if s.dir != "" {
		p := filepath.Join(s.dir, filepath.FromSlash(name))
		f, err := os.Open(p)
		if err == nil {
			return f, p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, p, err
		}
	}
	embedded := path.Join("traces", name)
	if f, err := shippedTraces.Open(embedded); err == nil {
		return f, "sim/" + embedded + " (embedded)", nil
	}
	where := "no --traces directory given"
	if s.dir != "" {
		where = "not in " + s.dir
	}
	return nil, name, fmt.Errorf("trace file %s: %s; download it from %s into DIR/%s and pass --traces DIR", name, where, traceOrigins[name], name)
}

// bambooIntervals reads a Bamboo spot trace (lines t_ms,add|remove,node;
// no header) into up intervals: one per add, ending at its remove or, for
// an instance still up, censored at the last event. Intervals are ordered
// by (start, end), ties in the order of the removes, then the adds of the
// instances still up: the order the importer gives nodes their hardware.
func bambooIntervals(r io.Reader, name string) ([]interval, error) {
	type up struct {
		since float64
		seq   int
	}
	running := map[string]up{}
	var out []interval
	last, seq := 0.0, 0
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		f := strings.Split(l, ",")
		if len(f) != 3 {
			return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("%d fields, want t_ms,add|remove,node", len(f))}
		}
		ms, err := strconv.ParseUint(strings.TrimSpace(f[0]), 10, 53)
		if err != nil {
			return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("time %q: want milliseconds", f[0])}
		}
		t := float64(ms) / 1000
		node := strings.TrimSpace(f[2])
		if node == "" {
			return nil, &trace.ParseError{File: name, Line: line, Err: errors.New("empty node name")}
		}
		switch strings.TrimSpace(f[1]) {
		case "add":
			if _, ok := running[node]; ok {
				return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("%s added while up", node)}
			}
			running[node] = up{since: t, seq: seq}
			seq++
		case "remove":
			u, ok := running[node]
			if !ok {
				return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("%s removed while not up", node)}
			}
			if t < u.since {
				return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("%s removed at %g s, before its add at %g s", node, t, u.since)}
			}
			delete(running, node)
			out = append(out, interval{unit: node, up: true, start: u.since, end: t, transition: true})
		default:
			return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("event %q, want add or remove", f[1])}
		}
		last = max(last, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	still := make([]string, 0, len(running))
	for n := range running {
		still = append(still, n)
	}
	sort.Slice(still, func(a, b int) bool { return running[still[a]].seq < running[still[b]].seq })
	for _, n := range still {
		out = append(out, interval{unit: n, up: true, start: running[n].since, end: last})
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].start != out[b].start {
			return out[a].start < out[b].start
		}
		return out[a].end < out[b].end
	})
	return out, nil
}

// pingIntervals reads the microsoft99 ping matrix (one row per machine, one
// tab-separated column per hour, 1 = answered a ping) into the up and down
// runs of each machine, in seconds; machines are m0000, m0001, ... in row
// order, and each machine's last run is censored at the end of the trace.
func pingIntervals(r io.Reader, name string) ([]interval, error) {
	var out []interval
	hours := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	machine := 0
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		cols := strings.Split(l, "\t")
		if hours == 0 {
			hours = len(cols)
		} else if len(cols) != hours {
			return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("%d columns, want %d like the first row", len(cols), hours)}
		}
		unit := fmt.Sprintf("m%04d", machine)
		machine++
		start := 0
		for h := 0; h <= hours; h++ {
			if h < hours {
				if c := cols[h]; c != "0" && c != "1" {
					return nil, &trace.ParseError{File: name, Line: line, Err: fmt.Errorf("column %d is %q, want 0 or 1", h+1, c)}
				}
				if h == start || cols[h] == cols[start] {
					continue
				}
			}
			out = append(out, interval{unit: unit, up: cols[start] == "1",
				start: float64(start) * 3600, end: float64(h) * 3600, transition: h < hours})
			start = h
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}
