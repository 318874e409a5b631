package natstest

import "syscall"

// dieWithParent has the kernel kill a server whose test binary died (a
// panic, a test timeout) rather than leave it running. The signal follows
// the thread that started the server (node.start keeps one for it).
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
