package campus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// Exec returns a command that runs name with args inside node's namespace
// (through `ip netns exec`, which execs the command in place: the process is
// the command itself, so it can be signalled and waited for like any child;
// fine for long-running agents). For an unknown node the command's Start
// returns ErrUnknownNode.
func (c *Campus) Exec(ctx context.Context, node string, name string, args ...string) *exec.Cmd {
	n, ok := c.Node(node)
	if !ok {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Err = fmt.Errorf("%w: %q", ErrUnknownNode, node)
		return cmd
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NetNS, name}, args...)...)
}

// RunIn runs fn on the calling goroutine with its OS thread switched into
// node's namespace, then switches back. Sockets fn creates stay in the node's
// namespace after RunIn returns, so a listener opened in RunIn can be served
// from any goroutine. Goroutines fn starts do NOT run in the namespace.
func (c *Campus) RunIn(node string, fn func() error) error {
	n, ok := c.Node(node)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	return runInNS(n.NetNS, fn)
}

// runInNS runs fn on a locked thread inside the named namespace. If the
// thread cannot be switched back it stays locked, so the runtime discards it
// when the goroutine exits rather than reusing a thread in the wrong
// namespace.
func runInNS(name string, fn func() error) (err error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current namespace: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", name, err)
	}
	defer func() {
		if rerr := netns.Set(orig); rerr != nil {
			err = errors.Join(err, fmt.Errorf("leave namespace %s: %w", name, rerr))
			return // keep the thread locked: it dies with the goroutine
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// Close kills every process left inside the campus, deletes every interface
// it created and removes its namespaces. Calling it again does nothing.
func (c *Campus) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return removeNamespaces(c.nsAll)
}

var prefixPattern = regexp.MustCompile(`^cb([0-9]+)x[0-9a-f]{4}$`)

// Cleanup removes every namespace (and the interfaces and processes in it)
// whose name starts with prefix + "-"; prefix must be a campus prefix
// ("cb<pid>x<hex4>") so Cleanup never touches other namespaces.
func Cleanup(prefix string) error {
	if !prefixPattern.MatchString(prefix) {
		return fmt.Errorf("clean up campus: %q is not a campus prefix (cb<pid>x<hex4>)", prefix)
	}
	names, err := listNamespaces()
	if err != nil {
		return err
	}
	var mine []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix+"-") {
			mine = append(mine, n)
		}
	}
	return removeNamespaces(mine)
}

// CleanupStale removes the campuses left by processes that have exited (a
// crashed test or demo) and returns their prefixes. Campuses of live
// processes, and namespaces that are not campus namespaces, are left alone.
func CleanupStale() ([]string, error) {
	names, err := listNamespaces()
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, n := range names {
		prefix, _, ok := strings.Cut(n, "-")
		m := prefixPattern.FindStringSubmatch(prefix)
		if !ok || m == nil || slices.Contains(stale, prefix) {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			stale = append(stale, prefix)
		}
	}
	var errs []error
	for _, p := range stale {
		errs = append(errs, Cleanup(p))
	}
	return stale, errors.Join(errs...)
}

func listNamespaces() ([]string, error) {
	entries, err := os.ReadDir(NetNSDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// removeNamespaces tears namespaces down in three passes: kill their
// processes, delete their interfaces (explicitly, because a socket or
// handle anyone still holds keeps a namespace and its interfaces alive after
// its name is gone), then unmount and remove the names. Missing namespaces
// are skipped, which makes it safe to repeat.
func removeNamespaces(names []string) error {
	var errs []error
	var present []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(NetNSDir, n)); err == nil {
			present = append(present, n)
		}
	}
	for _, n := range present {
		if err := killProcessesIn(n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range present {
		if err := deleteInterfaces(n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range present {
		if err := netns.DeleteNamed(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// deleteInterfaces deletes every interface in ns but loopback. Deleting one
// end of a veth pair deletes the other, so missing links are expected.
func deleteInterfaces(ns string) error {
	h, err := handleAt(ns)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("list interfaces in %s: %w", ns, err)
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().Flags&netFlagLoopback != 0 {
			continue
		}
		if err := h.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
			errs = append(errs, fmt.Errorf("delete %s in %s: %w", l.Attrs().Name, ns, err))
		}
	}
	return errors.Join(errs...)
}

const netFlagLoopback = 1 << 2 // net.FlagLoopback

// killProcessesIn SIGKILLs every process whose network namespace is ns
// (what `ip netns pids` lists), except this process. They were started
// inside the campus, which exists only for its owner.
func killProcessesIn(ns string) error {
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join(NetNSDir, ns), &want); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("stat namespace %s: %w", ns, err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var errs []error
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+p.Name()+"/ns/net", &st) != nil {
			continue // gone, or a kernel thread
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill pid %d in %s: %w", pid, ns, err))
			}
		}
	}
	return errors.Join(errs...)
}

// reachWithin bounds Build's wait for every node to reach the core.
const reachWithin = 30 * time.Second

// waitReachable returns once every node has opened a TCP connection to the
// core across its access link, its building's switch and its uplink. Right
// after the links are configured, the first address resolution a building
// sends can go unanswered; the kernel asks again only a second later, and
// an agent whose join dial (one second) waits on it fails its first join.
// A probe that gets no answer within probeTimeout is abandoned and tried
// again.
func (c *Campus) waitReachable(ctx context.Context) error {
	var ln net.Listener
	err := runInNS(c.nsAll[0], func() error {
		var err error
		ln, err = net.Listen("tcp4", ":0")
		return err
	})
	if err != nil {
		return fmt.Errorf("probe listener in the core: %w", err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	// Node to core and back is four link directions, each delayed by
	// Topology.Delay.
	probeTimeout := 250*time.Millisecond + 4*c.topo.Delay
	ctx, cancel := context.WithTimeout(ctx, reachWithin)
	defer cancel()
	for _, n := range c.nodes {
		addr := netip.AddrPortFrom(n.Gateway, port).String()
		for {
			err := c.RunIn(n.Name, func() error {
				conn, err := net.DialTimeout("tcp4", addr, probeTimeout)
				if err == nil {
					conn.Close()
				}
				return err
			})
			if err == nil {
				break
			}
			// A refusal or an unreachable route comes back at once.
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s does not reach the core at %s: %w", n.Name, addr, err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}
