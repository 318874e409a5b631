package natstest

import "syscall"

// dieWithParent has the kernel kill a server whose test binary died (a
// panic, a test timeout) rather than leave it running.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
