package demo

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strconv"
)

// Segment is one stretch of the job's life on one node, read from the job's
// own output there (DATA_DIR/jobs/JOB/run/job.log). Both jobs the demo runs
// print "step=N" for the step being done (0-based), "restored step=N ..."
// when they resume (N = steps already done: the next step printed is N), and
// "checkpoint step=N ok=..." for each checkpoint they write.
type Segment struct {
	Node string `json:"node"`
	// Restored is the step the job resumed at on this node (-1: it started
	// from scratch).
	Restored int64 `json:"restored"`
	// FirstStep and LastStep are the first and last steps it printed here
	// (-1: none yet).
	FirstStep int64 `json:"first_step"`
	LastStep  int64 `json:"last_step"`
	// Checkpoints are the step counts of the checkpoints it wrote here.
	Checkpoints []int64 `json:"checkpoints"`
}

var (
	reStep     = regexp.MustCompile(`^step=(\d+)`)
	reRestored = regexp.MustCompile(`^restored step=(\d+)`)
	reCkpt     = regexp.MustCompile(`^checkpoint step=(\d+) ok=(?i:true)`)
)

// jobLog follows one node's job.log from where it last stopped reading.
type jobLog struct {
	path    string
	offset  int64
	partial []byte
	// segs are this node's segments (a job could come back to a node).
	segs []*Segment
}

// lineEvent is something in the log the timeline reports.
type lineEvent struct {
	restored int64 // ≥ 0: a "restored step=N" line
	started  bool  // the first step of a segment that started from scratch
}

// poll reads what was appended since the last call and updates the
// node's segments; it returns the resumes and starts it saw.
func (l *jobLog) poll(node string) []lineEvent {
	f, err := os.Open(l.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() < l.offset {
		l.offset, l.partial = 0, nil // rotated or truncated
	}
	if _, err := f.Seek(l.offset, io.SeekStart); err != nil {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil || len(b) == 0 {
		return nil
	}
	l.offset += int64(len(b))
	data := append(l.partial, b...)
	var events []lineEvent
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if ev, ok := l.line(node, string(data[:i])); ok {
			events = append(events, ev)
		}
		data = data[i+1:]
	}
	l.partial = append([]byte(nil), data...)
	return events
}

func (l *jobLog) current() *Segment {
	if len(l.segs) == 0 {
		return nil
	}
	return l.segs[len(l.segs)-1]
}

func (l *jobLog) line(node, s string) (lineEvent, bool) {
	if m := reRestored.FindStringSubmatch(s); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		l.segs = append(l.segs, &Segment{Node: node, Restored: n, FirstStep: -1, LastStep: -1})
		return lineEvent{restored: n}, true
	}
	if m := reStep.FindStringSubmatch(s); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		seg := l.current()
		started := false
		// A step 0 outside a resumed segment is a fresh start.
		if seg == nil || (n == 0 && seg.FirstStep >= 0) {
			seg = &Segment{Node: node, Restored: -1, FirstStep: -1, LastStep: -1}
			l.segs = append(l.segs, seg)
			started = true
		}
		if seg.FirstStep < 0 {
			seg.FirstStep = n
		}
		seg.LastStep = n
		if started {
			return lineEvent{restored: -1, started: true}, true
		}
		return lineEvent{}, false
	}
	if m := reCkpt.FindStringSubmatch(s); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if seg := l.current(); seg != nil {
			seg.Checkpoints = append(seg.Checkpoints, n)
		}
	}
	return lineEvent{}, false
}
