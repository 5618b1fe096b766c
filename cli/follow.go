package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

// Timings of 'reclaim --notice' following its reclaim.
const (
	// followPeriod is how often the reclaim's progress is read.
	followPeriod = 500 * time.Millisecond
	// followQuiet is how long a job's line waits before it is printed
	// again for its bytes alone (a change of state prints at once).
	followQuiet = 5 * time.Second
	// followExit bounds the wait for the agent to exit once its node left.
	followExit = 60 * time.Second
	// followGone is how long the socket may stay silent before the agent
	// counts as exited, unless it still holds its data dir (then up to
	// followExit): an agent that stays up reclaimed closes its socket as
	// its cluster incarnation ends and opens it again, out of the
	// cluster, a moment later.
	followGone = 3 * time.Second
)

// followReclaim prints the reclaim's progress as it changes, until the
// node has left (its agent exited, or stays up holding it reclaimed), then
// the owner's report. Ctrl-C stops
// following; the reclaim goes on.
func followReclaim(ctx context.Context, env *Env, dataDir string, asJSON bool) error {
	f := &follower{w: env.Stdout, lines: map[string]string{}, printed: map[string]time.Time{}}
	tick := time.NewTicker(followPeriod)
	defer tick.Stop()
	var last *localapi.ReclaimStatus
	var left, gone time.Time
	for {
		st, transfers, err := reclaimProgress(ctx, dataDir)
		if !errors.Is(err, localapi.ErrNoAgent) {
			gone = time.Time{}
		} else if gone.IsZero() {
			gone = time.Now()
		}
		switch {
		case errors.Is(err, localapi.ErrNoAgent) && (time.Since(gone) < followGone ||
			time.Since(gone) < followExit && localapi.AgentHoldsDataDir(dataDir)):
			// Silent for a moment, or longer while the agent process still
			// holds its data dir (ending its cluster incarnation takes
			// longer than followGone on a loaded machine): it may come
			// back reclaimed.
		case errors.Is(err, localapi.ErrNoAgent):
			// The agent exited: its report file has the final report.
			rep, rerr := localapi.ReadReport(dataDir)
			if rerr != nil {
				return rerr
			}
			if asJSON {
				printJSONLine(env.Stdout, localapi.ReclaimStatus{Node: nodeOf(last), Complete: true, Report: rep})
				return nil
			}
			fmt.Fprintln(env.Stdout, "the node has left the cluster")
			if rep != nil {
				printReport(env.Stdout, rep)
			}
			return nil
		case err != nil && ctx.Err() == nil:
			// The agent is shutting down (it answers until its socket
			// closes) or busy: read again.
		case err == nil && st.Reclaimed:
			// The node left and its agent holds it out of the cluster.
			if asJSON {
				printJSONLine(env.Stdout, st)
				return nil
			}
			fmt.Fprintln(env.Stdout, "the node has left the cluster; its agent holds it reclaimed until 'reclaimnet lend'")
			if st.Report != nil {
				printReport(env.Stdout, st.Report)
			}
			return nil
		case err == nil:
			if asJSON {
				if last == nil || !reflect.DeepEqual(*last, st) {
					printJSONLine(env.Stdout, st)
				}
			} else if done := f.update(st, transfers, time.Now()); done {
				return nil
			}
			if st.Report != nil && !st.Report.Left.IsZero() && left.IsZero() {
				left = time.Now()
			}
			if !st.Active && st.Report == nil {
				return nil // cancelled: update said so
			}
			last = &st
		}
		if !left.IsZero() && time.Since(left) > followExit {
			return fmt.Errorf("the node left at %s but its agent had not exited %s later", left.Format(time.RFC3339), followExit)
		}
		select {
		case <-ctx.Done():
			if !asJSON {
				fmt.Fprintln(env.Stdout, "stopped following; the reclaim goes on ('reclaimnet reclaim --status' shows it)")
			}
			return nil
		case <-tick.C:
		}
	}
}

func nodeOf(st *localapi.ReclaimStatus) string {
	if st == nil {
		return ""
	}
	return st.Node
}

// reclaimProgress reads the reclaim's progress and the node's transfers.
func reclaimProgress(ctx context.Context, dataDir string) (localapi.ReclaimStatus, []web.Transfer, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := localapi.Call(cctx, dataDir, localapi.Request{Op: localapi.OpReclaimStatus})
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil || resp.Reclaim == nil {
		return localapi.ReclaimStatus{}, nil, orError(err, "the agent sent no reclaim status")
	}
	st := *resp.Reclaim
	// Bytes left come from the status document's transfers; without it the
	// progress still shows.
	var transfers []web.Transfer
	if doc, err := localapi.Call(cctx, dataDir, localapi.Request{Op: localapi.OpStatus}); err == nil && doc.Error == "" {
		if d, err := decodeDocument(doc); err == nil {
			transfers = d.Transfers
		}
	}
	return st, transfers, nil
}

// orError is err, or an error saying msg when err is nil.
func orError(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

// follower turns successive reclaim progress into the lines an owner
// reads: one per job when its state changes (or its bytes left, at most
// every followQuiet), one when every job is accounted for, and the
// owner's report once the node leaves.
type follower struct {
	w        io.Writer
	lines    map[string]string    // each job's last state line, without bytes
	printed  map[string]time.Time // when each job's line was last printed
	complete bool
	left     bool
}

// update prints what changed in st; it reports whether following is over
// (the reclaim was cancelled).
func (f *follower) update(st localapi.ReclaimStatus, transfers []web.Transfer, now time.Time) bool {
	if !st.Active && st.Report == nil {
		fmt.Fprintf(f.w, "the reclaim of %s was cancelled; the kill-switch is %s\n", st.Node, killSwitchWord(&st))
		return true
	}
	prefix := ""
	if !st.Deadline.IsZero() {
		prefix = fmt.Sprintf("[%s left] ", max(st.Deadline.Sub(now), 0).Round(time.Second))
	}
	for _, j := range st.Jobs {
		line := j.Job + ": " + j.Detail
		bytes := bytesLeft(st.Node, j.Job, transfers)
		changed := line != f.lines[j.Job]
		if !changed && (bytes == "" || now.Sub(f.printed[j.Job]) < followQuiet) {
			continue
		}
		f.lines[j.Job], f.printed[j.Job] = line, now
		if bytes != "" {
			line += "; " + bytes
		}
		fmt.Fprintln(f.w, prefix+line)
	}
	if st.Complete && !f.complete {
		f.complete = true
		if len(st.Jobs) == 0 {
			fmt.Fprintf(f.w, "%sno jobs ran here; the node leaves at the deadline, %s\n", prefix, st.Deadline.UTC().Format(time.RFC3339))
		} else {
			fmt.Fprintf(f.w, "%severy job is handed off or accounted for; the node leaves at the deadline, %s\n", prefix, st.Deadline.UTC().Format(time.RFC3339))
		}
	}
	if rep := st.Report; rep != nil && !rep.Left.IsZero() && !f.left {
		f.left = true
		fmt.Fprintf(f.w, "the node is leaving (%s); waiting for its agent to exit\n", rep.Left.UTC().Format(time.RFC3339))
	}
	return false
}

// bytesLeft sums what the node's transfers of job still have to send.
func bytesLeft(node, job string, transfers []web.Transfer) string {
	var left, total int64
	var rate float64
	n := 0
	for _, t := range transfers {
		if string(t.Flow.From) != node || string(t.Flow.Job) != job || t.BytesTotal <= 0 {
			continue
		}
		n++
		left += max(t.BytesTotal-t.BytesDone, 0)
		total += t.BytesTotal
		rate += t.Achieved
	}
	if n == 0 {
		return ""
	}
	s := fmt.Sprintf("%s of %s left", humanize.IBytes(uint64(left)), humanize.IBytes(uint64(total)))
	if rate > 0 {
		s += fmt.Sprintf(" at %s/s", humanize.IBytes(uint64(rate)))
	}
	return s
}

// printJSONLine writes v as one line of JSON.
func printJSONLine(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(w, "{\"error\":%q}\n", err.Error())
		return
	}
	w.Write(append(b, '\n'))
}
