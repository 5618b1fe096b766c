package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// caller is the local user on the other end of the control socket, as the
// kernel reports it (SO_PEERCRED): never what the client claims.
type caller struct {
	UID, GID int
	// Name is the user's login name ("uid:N" where it has none).
	Name string
}

// peerCaller identifies the process that connected to the control socket.
func peerCaller(conn net.Conn) (caller, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return caller{}, errors.New("control connection is not a Unix socket")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return caller{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return caller{}, err
	}
	if serr != nil {
		return caller{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	c := caller{UID: int(cred.Uid), GID: int(cred.Gid), Name: "uid:" + strconv.Itoa(int(cred.Uid))}
	if u, err := user.LookupId(strconv.Itoa(c.UID)); err == nil {
		c.Name = u.Username
	}
	return c, nil
}

// privileged reports whether c is root or the agent's own user, who can
// read the agent's keys anyway.
func (c caller) privileged() bool { return c.UID == 0 || c.UID == os.Getuid() }

// in reports whether c is named by list: a user name, or "%group" for the
// members of a Unix group (its primary group included).
func (c caller) in(list []string) bool {
	for _, e := range list {
		g, isGroup := strings.CutPrefix(e, "%")
		if !isGroup {
			if e == c.Name {
				return true
			}
			continue
		}
		grp, err := user.LookupGroup(g)
		if err != nil {
			continue
		}
		if grp.Gid == strconv.Itoa(c.GID) {
			return true
		}
		if u, err := user.LookupId(strconv.Itoa(c.UID)); err == nil {
			if ids, err := u.GroupIds(); err == nil && slices.Contains(ids, grp.Gid) {
				return true
			}
		}
	}
	return false
}
