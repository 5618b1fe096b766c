package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	secbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompProgram compiles Docker's default seccomp profile, as it applies
// to a process with no capabilities, into a classic BPF program for this
// architecture, encoded as struct sock_filter entries. System calls the
// profile does not allow fail with EPERM (clone3 with ENOSYS, so C
// libraries fall back to clone, whose namespace flags are refused), and
// so do those of other ABIs (32-bit x86 on amd64).
func seccompProgram() ([]byte, error) {
	prof, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	def, err := seccompAction(prof.DefaultAction, prof.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	if def != secbpf.ActionErrno {
		return nil, fmt.Errorf("seccomp profile: default action %s, want EPERM", prof.DefaultAction)
	}
	policy := secbpf.Policy{DefaultAction: def}
	for _, sc := range prof.Syscalls {
		act, err := seccompAction(sc.Action, sc.ErrnoRet)
		if err != nil {
			return nil, err
		}
		conds, err := seccompConditions(sc.Args)
		if err != nil {
			return nil, fmt.Errorf("seccomp rule for %v: %w", sc.Names, err)
		}
		g := secbpf.SyscallGroup{Action: act}
		for _, name := range sc.Names {
			if _, ok := info.SyscallNames[name]; !ok {
				continue // another architecture's call
			}
			if conds == nil {
				g.Names = append(g.Names, name)
			} else {
				g.NamesWithCondtions = append(g.NamesWithCondtions, secbpf.NameWithConditions{Name: name, Conditions: conds})
			}
		}
		if len(g.Names)+len(g.NamesWithCondtions) > 0 {
			policy.Syscalls = append(policy.Syscalls, g)
		}
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, len(raw)*8)
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

func seccompAction(a specs.LinuxSeccompAction, errno *uint) (secbpf.Action, error) {
	switch a {
	case specs.ActAllow:
		return secbpf.ActionAllow, nil
	case specs.ActErrno:
		if errno == nil || *errno == uint(unix.EPERM) {
			return secbpf.ActionErrno, nil
		}
		return secbpf.ActionErrno | secbpf.Action(*errno&0xffff), nil
	}
	return 0, fmt.Errorf("seccomp profile: action %s is not supported", a)
}

// seccompConditions converts one rule's argument checks (all must hold).
func seccompConditions(args []specs.LinuxSeccompArg) (secbpf.ArgumentConditions, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var out secbpf.ArgumentConditions
	for _, a := range args {
		c := secbpf.Condition{Argument: uint32(a.Index), Value: a.Value}
		switch a.Op {
		case specs.OpEqualTo:
			c.Operation = secbpf.Equal
		case specs.OpNotEqual:
			c.Operation = secbpf.NotEqual
		case specs.OpLessThan:
			c.Operation = secbpf.LessThan
		case specs.OpLessEqual:
			c.Operation = secbpf.LessOrEqual
		case specs.OpGreaterThan:
			c.Operation = secbpf.GreaterThan
		case specs.OpGreaterEqual:
			c.Operation = secbpf.GreaterOrEqual
		case specs.OpMaskedEqual:
			// (arg & mask) == 0 is "none of the mask's bits set"; other
			// masked comparisons do not occur on these architectures.
			if a.ValueTwo != 0 {
				return nil, fmt.Errorf("masked comparison with %#x is not supported", a.ValueTwo)
			}
			c.Operation = secbpf.BitsNotSet
		default:
			return nil, fmt.Errorf("comparison %s is not supported", a.Op)
		}
		out = append(out, c)
	}
	return out, nil
}

// loadSeccomp installs the program on the calling thread (no_new_privs
// must be set); the threads and processes it starts inherit it.
func loadSeccomp(prog []byte) error {
	if len(prog) == 0 || len(prog)%8 != 0 {
		return errors.New("seccomp program is empty or truncated")
	}
	filters := make([]unix.SockFilter, len(prog)/8)
	for i := range filters {
		b := prog[i*8:]
		filters[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return nil
}
