package owner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Event types (linux/input-event-codes.h) that a person makes: keys and
// buttons, relative motion (mice), absolute motion (touchpads, tablets).
// Synchronisation, LEDs, switches (a lid) and the like are not input.
const (
	evKey = 1
	evRel = 2
	evAbs = 3
)

// eventSize is sizeof(struct input_event) on 64-bit Linux: a struct
// timeval (16 bytes), then type, code (2 bytes each) and value (4).
const eventSize = 24

// DefaultRescan is how often EventDevices looks for new input devices (a
// keyboard plugged in).
const DefaultRescan = 10 * time.Second

// EventDevices watches the input devices under a directory (/dev/input):
// it reads every event* device (reading needs root, which the agent has;
// it does not grab them, so the desktop still gets every event) and
// remembers when the last key, button or motion arrived. It sees the
// machine's own console, not remote logins.
type EventDevices struct {
	dir    string
	now    func() time.Time
	rescan time.Duration
	stop   chan struct{}
	wg     sync.WaitGroup

	mu sync.Mutex // guards the fields below
	// open are the devices being read, by path.
	open map[string]*os.File
	last time.Time
	via  string
	// scanErr is the last scan's failure (no devices, an unreadable dir).
	scanErr error
	closed  bool
}

// WatchEventDevices starts watching dir (empty: /dev/input), stamping
// events with now (nil: time.Now) and looking for new devices every
// rescan (0: DefaultRescan). It fails when dir holds no event device it
// can open. Close stops it.
func WatchEventDevices(dir string, now func() time.Time, rescan time.Duration) (*EventDevices, error) {
	if dir == "" {
		dir = "/dev/input"
	}
	if now == nil {
		now = time.Now
	}
	if rescan <= 0 {
		rescan = DefaultRescan
	}
	e := &EventDevices{dir: dir, now: now, rescan: rescan, stop: make(chan struct{}), open: map[string]*os.File{}}
	if err := e.scan(); err != nil {
		e.Close()
		return nil, err
	}
	e.wg.Go(e.rescanLoop)
	return e, nil
}

func (e *EventDevices) rescanLoop() {
	t := time.NewTicker(e.rescan)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			err := e.scan()
			e.mu.Lock()
			e.scanErr = err
			e.mu.Unlock()
		}
	}
}

// scan opens the event devices not yet read; it fails when none is open
// afterwards. Devices are opened non-blocking (the runtime's poller then
// waits for their events, and Close interrupts a read).
func (e *EventDevices) scan() error {
	paths, err := filepath.Glob(filepath.Join(e.dir, "event*"))
	if err != nil {
		return fmt.Errorf("input devices: %w", err)
	}
	e.mu.Lock()
	paths = slices.DeleteFunc(paths, func(p string) bool { return e.open[p] != nil })
	e.mu.Unlock()
	var errs []error
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.mu.Lock()
		if e.closed || e.open[p] != nil {
			e.mu.Unlock()
			f.Close()
			continue
		}
		e.open[p] = f
		e.wg.Go(func() { e.read(p, f) })
		e.mu.Unlock()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.open) == 0 && !e.closed {
		if len(errs) == 0 {
			return fmt.Errorf("input devices: no event device in %s", e.dir)
		}
		return fmt.Errorf("input devices: none readable in %s: %w", e.dir, errors.Join(errs...))
	}
	return nil
}

// read reads one device's events until it fails (the device went away,
// or Close closed it).
func (e *EventDevices) read(p string, f *os.File) {
	defer func() {
		e.mu.Lock()
		if e.open[p] == f {
			delete(e.open, p)
		}
		e.mu.Unlock()
		f.Close()
	}()
	r := bufio.NewReaderSize(f, 64*eventSize)
	var ev [eventSize]byte
	name := "input device " + filepath.Base(p)
	for {
		if _, err := io.ReadFull(r, ev[:]); err != nil {
			return
		}
		switch binary.NativeEndian.Uint16(ev[16:18]) {
		case evKey, evRel, evAbs:
			at := e.now()
			e.mu.Lock()
			if !at.Before(e.last) {
				e.last, e.via = at, name
			}
			e.mu.Unlock()
		}
	}
}

// LastInput returns the last input seen since the watch began (a zero
// time when none), or the scan's error when no device is being read.
func (e *EventDevices) LastInput(context.Context) (Input, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.open) == 0 {
		if e.scanErr != nil {
			return Input{}, e.scanErr
		}
		return Input{}, fmt.Errorf("input devices: none open in %s", e.dir)
	}
	return Input{At: e.last, Via: e.via}, nil
}

// Close stops the watch and closes the devices.
func (e *EventDevices) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.stop)
	for _, f := range e.open {
		f.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
	return nil
}

// loginctlTimeout bounds one loginctl call.
const loginctlTimeout = 5 * time.Second

// Logind reads the login manager's idle hint with loginctl: the manager's
// IdleHint and IdleSinceHint, which systemd-logind aggregates over every
// session (a graphical session reports it from the desktop's idle timer;
// a text session, local or ssh, from its terminal's last use). It sees
// remote logins too, but only as finely as the sessions report: a desktop
// sets the hint only after its own idle delay (GNOME's is 5 minutes), and
// one that never sets it looks active all the time.
type Logind struct {
	// Path is the loginctl binary; empty looks it up on PATH.
	Path string
}

// LastInput runs loginctl show-session (no session: the manager).
func (l Logind) LastInput(ctx context.Context) (Input, error) {
	path := l.Path
	if path == "" {
		p, err := exec.LookPath("loginctl")
		if err != nil {
			return Input{}, fmt.Errorf("login manager: loginctl not found: %w", err)
		}
		path = p
	}
	ctx, cancel := context.WithTimeout(ctx, loginctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "show-session", "--property=IdleHint", "--property=IdleSinceHint")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Input{}, fmt.Errorf("login manager: %s show-session: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return parseLogind(out)
}

// parseLogind reads "IdleHint=yes|no" and "IdleSinceHint=USEC" (µs of
// the realtime clock; 0 when never set).
func parseLogind(out []byte) (Input, error) {
	var hint string
	var since int64 = -1
	for line := range strings.Lines(string(out)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "IdleHint":
			hint = v
		case "IdleSinceHint":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return Input{}, fmt.Errorf("login manager: IdleSinceHint %q is not a µs count", v)
			}
			since = n
		}
	}
	in := Input{Via: "login manager's idle hint"}
	switch hint {
	case "no":
		in.Active = true
		return in, nil
	case "yes":
		if since > 0 {
			in.At = time.UnixMicro(since)
		}
		if since < 0 {
			return Input{}, errors.New("login manager: no IdleSinceHint in loginctl's output")
		}
		return in, nil
	}
	return Input{}, fmt.Errorf("login manager: IdleHint %q, want yes or no", hint)
}

// latestInput is the most recent input any of its sources saw; it fails
// only when all fail.
type latestInput []InputWatcher

func (l latestInput) LastInput(ctx context.Context) (Input, error) {
	var best Input
	var errs []error
	for _, s := range l {
		in, err := s.LastInput(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case in.Active:
			return in, nil
		case in.At.After(best.At), best.Via == "":
			best = in
		}
	}
	if len(errs) == len(l) {
		return Input{}, errors.Join(errs...)
	}
	return best, nil
}
