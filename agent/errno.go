package agent

import "syscall"

func errConnRefused() error { return syscall.ECONNREFUSED }
