package jobs

import (
	"fmt"
	"syscall"

	"github.com/reclaimnet/reclaimnet/state"
)

// checkpointSignalNumbers maps state.CheckpointSignals (names, as the
// replicated job spec carries them) to this machine's signal numbers.
var checkpointSignalNumbers = map[string]syscall.Signal{
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "HUP": syscall.SIGHUP, "INT": syscall.SIGINT,
	"QUIT": syscall.SIGQUIT, "ALRM": syscall.SIGALRM, "URG": syscall.SIGURG, "PWR": syscall.SIGPWR,
}

// supervisorSignal returns the spec's checkpoint signal as the supervisor
// takes it: 0 (the spec names none) leaves the supervisor's default.
func supervisorSignal(spec state.JobSpec) (syscall.Signal, error) {
	if spec.Signal == "" {
		return 0, nil
	}
	sig, ok := checkpointSignalNumbers[spec.Signal]
	if !ok {
		return 0, fmt.Errorf("checkpoint signal %q: unknown on this node", spec.Signal)
	}
	return sig, nil
}
