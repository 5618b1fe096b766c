package supervisor

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// groupMembers returns the live (not zombie) processes whose process group
// is pgid, read from /proc. Zombies are excluded: they hold no resources
// and, once the job's leader is gone, are reaped by whoever adopted them.
func groupMembers(pgid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		state, pg, ok := parseStat(b)
		if ok && pg == pgid && state != 'Z' && state != 'X' {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// parseStat reads the state and process group from /proc/PID/stat. The
// command name (field 2) may contain spaces and parentheses, so fields are
// counted after the last ')'.
func parseStat(b []byte) (state byte, pgrp int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] state, f[1] ppid, f[2] pgrp
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pg, true
}

// signalGroup sends sig to every process of the group; a group that is
// already empty is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
