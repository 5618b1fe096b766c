package localapi

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// AgentHoldsDataDir reports whether a process holds the agent's flock on
// dir (LockFile): an agent runs there, even while its control socket is
// closed (between a cluster incarnation and its reclaimed standby). It
// reads the kernel's lock table (/proc/locks) and never takes the lock
// itself, so it cannot make a starting agent find its data dir locked;
// it needs no permission on the lock file. False when it cannot tell.
func AgentHoldsDataDir(dir string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, LockFile), &st); err != nil {
		return false
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return false
	}
	defer f.Close()
	// A held lock's line: "1: FLOCK  ADVISORY  WRITE 1234 fe:00:9978267 0 EOF";
	// a waiter's has "->" after the number.
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff) // Linux's dev_t layout
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	file := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[1] == "FLOCK" && fields[5] == file {
			return true
		}
	}
	return false
}
