package owner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// GPUWatcher lists the owner's processes on lent GPUs (GPUSource).
type GPUWatcher interface {
	OwnerGPUProcesses(ctx context.Context) ([]GPUProcess, error)
}

// InputWatcher tells the console's last input (EventDevices, Logind).
type InputWatcher interface {
	LastInput(ctx context.Context) (Input, error)
}

// CPUWatcher measures the owner's CPU load since its previous call, ok
// false when it has no interval yet (ProcCPU).
type CPUWatcher interface {
	OwnerCPU(ctx context.Context) (load CPULoad, ok bool, err error)
}

// Observer polls the sources of the activities a policy watches; a nil
// source is not watched.
type Observer struct {
	GPU   GPUWatcher
	Input InputWatcher
	CPU   CPUWatcher
	// closers are stopped by Close (the input device watch).
	closers []func() error
}

// Observe polls every source once. A failing source makes its kind
// unknown this round and its error a problem in words.
func (o *Observer) Observe(ctx context.Context) Observations {
	var obs Observations
	if o.GPU != nil {
		ps, err := o.GPU.OwnerGPUProcesses(ctx)
		if err != nil {
			obs.Problems = append(obs.Problems, "gpu: "+err.Error())
		} else {
			obs.GPU, obs.GPUKnown = ps, true
		}
	}
	if o.Input != nil {
		in, err := o.Input.LastInput(ctx)
		if err != nil {
			obs.Problems = append(obs.Problems, "input: "+err.Error())
		} else {
			obs.Input, obs.InputKnown = in, true
		}
	}
	if o.CPU != nil {
		load, ok, err := o.CPU.OwnerCPU(ctx)
		if err != nil {
			obs.Problems = append(obs.Problems, "cpu: "+err.Error())
		} else {
			obs.CPU, obs.CPUKnown = load, ok
		}
	}
	return obs
}

// Close stops the sources that run in the background.
func (o *Observer) Close() error {
	var errs []error
	for _, c := range o.closers {
		errs = append(errs, c())
	}
	o.closers = nil
	return errors.Join(errs...)
}

// SourceOptions are the machine's facts the real sources need.
type SourceOptions struct {
	// GPUs lists GPU processes: the node's gpu.Discoverer.
	GPUs GPUProcessLister
	// LentGPUs are the lent devices' indexes; nil lends every GPU.
	LentGPUs []int
	// GuestCgroup is the guests' parent cgroup as /proc/PID/cgroup
	// shows it; needed to watch GPU processes or CPU load.
	GuestCgroup string
	// ProcRoot is where proc is mounted (empty: /proc).
	ProcRoot string
	// InputDir holds the input devices (empty: /dev/input).
	InputDir string
	// Loginctl is the loginctl binary (empty: on PATH).
	Loginctl string
	// Self is the agent's PID, left out of the CPU load (0: this
	// process).
	Self int
}

// NewObserver builds the real sources of the activities p watches. For
// input, InputDevices reads the input devices, InputLogind the login
// manager, and InputAuto both where they work (the most recent input of
// either counts): the devices see the machine's own keyboard and mouse at
// once, the login manager also sees remote sessions. It fails when a
// watched activity has no source here.
func NewObserver(p *Policy, opts SourceOptions) (*Observer, error) {
	o := &Observer{}
	var guests Guests
	if !p.GPU.Off() || !p.CPU.Off() {
		g, err := NewGuests(opts.ProcRoot, opts.GuestCgroup)
		if err != nil {
			return nil, fmt.Errorf("owner activity: telling guests' processes from the owner's: %w", err)
		}
		guests = g
	}
	if !p.GPU.Off() {
		if opts.GPUs == nil {
			return nil, errors.New("owner gpu: no GPU process list")
		}
		o.GPU = GPUSource{Lister: opts.GPUs, Lent: opts.LentGPUs, Guests: guests}
	}
	if !p.CPU.Off() {
		self := opts.Self
		if self == 0 {
			self = os.Getpid()
		}
		o.CPU = &ProcCPU{Guests: guests, Exclude: []int{self}}
	}
	if !p.Input.Off() {
		in, closer, err := inputSource(p.InputSource, opts)
		if err != nil {
			return nil, fmt.Errorf("owner input: %w", err)
		}
		o.Input = in
		if closer != nil {
			o.closers = append(o.closers, closer)
		}
	}
	return o, nil
}

func inputSource(which string, opts SourceOptions) (InputWatcher, func() error, error) {
	var srcs latestInput
	var closer func() error
	var errs []error
	if which == InputAuto || which == InputDevices {
		dev, err := WatchEventDevices(opts.InputDir, time.Now, 0)
		if err != nil {
			errs = append(errs, err)
		} else {
			srcs, closer = append(srcs, dev), dev.Close
		}
	}
	if which == InputAuto || which == InputLogind {
		l := Logind{Path: opts.Loginctl}
		ctx, cancel := context.WithTimeout(context.Background(), loginctlTimeout)
		_, err := l.LastInput(ctx)
		cancel()
		if err != nil {
			errs = append(errs, err)
		} else {
			srcs = append(srcs, l)
		}
	}
	if len(srcs) == 0 {
		return nil, nil, fmt.Errorf("no input source works here: %w", errors.Join(errs...))
	}
	return srcs, closer, nil
}
