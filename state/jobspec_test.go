package state

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// The per-job checkpoint signal and stop grace survive encoding, the FSM
// and a snapshot.
func TestJobSpecSignalGraceRoundTrip(t *testing.T) {
	rec := JobRecord{Job: policy.Job{ID: "j1", GPUs: 1, LossBudget: time.Minute},
		Spec: JobSpec{Command: []string{"python3", "train.py"}, Signal: "USR2", Grace: 5 * time.Second}, Owner: "alice", Submitted: t0}
	b, err := EncodeCommand(SubmitJob{Job: rec})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	got := cmd.(SubmitJob).Job.Spec
	if got.Signal != "USR2" || got.Grace != 5*time.Second {
		t.Fatalf("decoded spec %+v, want signal USR2 and grace 5s", got)
	}
	f := NewStore()
	if res := applyEncoded(t, f, 1, SubmitJob{Job: rec}); res != nil {
		t.Fatalf("apply: %v", res)
	}
	var snap bytes.Buffer
	if err := f.Snapshot().Encode(&snap); err != nil {
		t.Fatal(err)
	}
	g := NewStore()
	if err := g.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	j, ok := g.Job("j1")
	if !ok || j.Spec.Signal != "USR2" || j.Spec.Grace != 5*time.Second {
		t.Fatalf("restored job %+v (found %v), want signal USR2 and grace 5s", j.Spec, ok)
	}
	// Resubmitting with another signal is a different definition.
	other := rec
	other.Spec.Signal = "HUP"
	if res := applyEncoded(t, f, 2, SubmitJob{Job: other}); !isErr(res, ErrJobExists) {
		t.Fatalf("resubmit with another signal: got %v, want ErrJobExists", res)
	}
}

// An entry written before the fields existed (its bytes, verbatim) still
// decodes, to the defaults: no signal, no grace.
func TestOldSubmitJobEntryDecodesToDefaults(t *testing.T) {
	old := `{"Job":{"ID":"j1","State":0,"Node":"","CheckpointBytes":3221225472,"Standby":"","StandbyHas":0,"Replicas":null,` +
		`"LossBudget":60000000000,"GPUs":1,"VRAM":0,"Capability":0,"RestartTime":0,"Remaining":0,"WriteCap":0,` +
		`"Spec":{"Command":["python3","train.py"],"Env":["A=1"]},"Owner":"alice","Submitted":"2026-03-02T09:00:00Z","Restarts":0,"Started":false}}`
	cmd, err := DecodeCommand(append([]byte{1, byte(KindSubmitJob)}, old...))
	if err != nil {
		t.Fatalf("old entry: %v", err)
	}
	spec := cmd.(SubmitJob).Job.Spec
	want := JobSpec{Command: []string{"python3", "train.py"}, Env: []string{"A=1"}}
	if !reflect.DeepEqual(spec, want) {
		t.Fatalf("old entry's spec %+v, want %+v", spec, want)
	}
	// And a spec without the fields encodes to the same bytes as before.
	b, err := EncodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[2:]) != old {
		t.Fatalf("re-encoded old entry:\n got %s\nwant %s", b[2:], old)
	}
}

func TestJobSpecSignalGraceRejected(t *testing.T) {
	cases := []struct {
		name string
		spec JobSpec
		want string
	}{
		{"KILL", JobSpec{Signal: "KILL"}, "want one of"},
		{"STOP", JobSpec{Signal: "STOP"}, "want one of"},
		{"TERM", JobSpec{Signal: "TERM"}, "want one of"},
		{"number", JobSpec{Signal: "12"}, "want one of"},
		{"not canonical", JobSpec{Signal: "SIGUSR2"}, "canonical"},
		{"lower case", JobSpec{Signal: "usr2"}, "canonical"},
		{"negative grace", JobSpec{Grace: -time.Second}, "stop grace"},
		{"grace over an hour", JobSpec{Grace: time.Hour + time.Nanosecond}, "stop grace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Command = []string{"true"}
			_, err := EncodeCommand(SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j"}, Spec: tc.spec}})
			if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidCommand mentioning %q", err, tc.want)
			}
		})
	}
	// The decoder checks the same (a forwarded entry is not trusted).
	bad := `{"Job":{"ID":"j","Spec":{"Command":["true"],"Signal":"KILL"}}}`
	if _, err := DecodeCommand(append([]byte{1, byte(KindSubmitJob)}, bad...)); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("decode of signal KILL: got %v, want ErrInvalidCommand", err)
	}
	for _, g := range []time.Duration{time.Nanosecond, time.Hour} {
		if err := ValidStopGrace(g); err != nil {
			t.Errorf("ValidStopGrace(%v): %v, want nil", g, err)
		}
	}
	for in, want := range map[string]string{"usr2": "USR2", "SIGURG": "URG", " hup ": "HUP", "USR1": "USR1"} {
		if got, err := CanonicalSignal(in); err != nil || got != want {
			t.Errorf("CanonicalSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func isErr(res any, target error) bool {
	err, ok := res.(error)
	return ok && errors.Is(err, target)
}

// A job's own memory and CPU limits survive encoding, the FSM and a
// snapshot, and are part of its definition.
func TestJobSpecLimitsRoundTrip(t *testing.T) {
	rec := JobRecord{Job: policy.Job{ID: "j1", GPUs: 1, LossBudget: time.Minute},
		Spec: JobSpec{Command: []string{"python3", "train.py"}, Memory: 16 << 30, CPUs: 2.5}, Owner: "alice", Submitted: t0}
	b, err := EncodeCommand(SubmitJob{Job: rec})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := cmd.(SubmitJob).Job.Spec; got.Memory != 16<<30 || got.CPUs != 2.5 {
		t.Fatalf("decoded spec %+v, want memory 16 GiB and 2.5 CPUs", got)
	}
	f := NewStore()
	if res := applyEncoded(t, f, 1, SubmitJob{Job: rec}); res != nil {
		t.Fatalf("apply: %v", res)
	}
	var snap bytes.Buffer
	if err := f.Snapshot().Encode(&snap); err != nil {
		t.Fatal(err)
	}
	g := NewStore()
	if err := g.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	if j, ok := g.Job("j1"); !ok || j.Spec.Memory != 16<<30 || j.Spec.CPUs != 2.5 {
		t.Fatalf("restored job %+v (found %v), want memory 16 GiB and 2.5 CPUs", j.Spec, ok)
	}
	other := rec
	other.Spec.CPUs = 4
	if res := applyEncoded(t, f, 2, SubmitJob{Job: other}); !isErr(res, ErrJobExists) {
		t.Fatalf("resubmit with other limits: got %v, want ErrJobExists", res)
	}
}

func TestJobSpecLimitsRejected(t *testing.T) {
	for name, spec := range map[string]JobSpec{
		"negative memory":   {Memory: -1},
		"memory below 4MiB": {Memory: MinJobMemory - 1},
		"negative cpus":     {CPUs: -1},
		"cpus below 0.01":   {CPUs: 0.009},
		"NaN cpus":          {CPUs: math.NaN()},
		"infinite cpus":     {CPUs: math.Inf(1)},
	} {
		t.Run(name, func(t *testing.T) {
			spec.Command = []string{"true"}
			_, err := EncodeCommand(SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j"}, Spec: spec}})
			if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), "limit") {
				t.Fatalf("got %v, want ErrInvalidCommand naming the limit", err)
			}
		})
	}
	// The state machine checks a forwarded entry too.
	bad := `{"Job":{"ID":"j","Spec":{"Command":["true"],"Memory":1000}}}`
	if _, err := DecodeCommand(append([]byte{1, byte(KindSubmitJob)}, bad...)); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("decode of a 1000-byte memory limit: got %v, want ErrInvalidCommand", err)
	}
	for _, l := range []struct {
		mem  int64
		cpus float64
	}{{0, 0}, {MinJobMemory, MinJobCPUs}, {16 << 30, 4}} {
		if err := ValidJobLimits(l.mem, l.cpus); err != nil {
			t.Errorf("ValidJobLimits(%d, %v): %v, want nil", l.mem, l.cpus, err)
		}
	}
}

// A job's replica count is 0 (the default) or 1 to MaxReplicas, checked
// when the command is made and when a forwarded entry is decoded; a valid
// one survives encoding and the FSM.
func TestJobReplicas(t *testing.T) {
	for _, k := range []int{-1, MaxReplicas + 1} {
		_, err := EncodeCommand(SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j", Copies: k}, Spec: JobSpec{Command: []string{"true"}}}})
		if !errors.Is(err, ErrInvalidCommand) || !strings.Contains(err.Error(), "replicas") {
			t.Errorf("copies %d: got %v, want ErrInvalidCommand naming the replicas", k, err)
		}
	}
	bad := `{"Job":{"ID":"j","Copies":99,"Spec":{"Command":["true"]}}}`
	if _, err := DecodeCommand(append([]byte{1, byte(KindSubmitJob)}, bad...)); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("decode of 99 replicas: got %v, want ErrInvalidCommand", err)
	}
	f := NewStore()
	rec := JobRecord{Job: policy.Job{ID: "j", GPUs: 1, Copies: 3}, Spec: JobSpec{Command: []string{"true"}}, Submitted: t0}
	if res := applyEncoded(t, f, 1, SubmitJob{Job: rec}); res != nil {
		t.Fatalf("apply: %v", res)
	}
	if j, ok := f.Job("j"); !ok || j.Copies != 3 {
		t.Errorf("replicated record %+v, want 3 replicas", j.Job)
	}
	// The same job with another replica count is another definition.
	rec.Copies = 2
	if err, _ := applyEncoded(t, f, 2, SubmitJob{Job: rec}).(error); !errors.Is(err, ErrJobExists) {
		t.Errorf("resubmission with 2 replicas: %v, want ErrJobExists", err)
	}
}
