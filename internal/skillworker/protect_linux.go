//go:build linux

package skillworker

import "golang.org/x/sys/unix"

// protectProcess makes the worker's process non-dumpable: the kernel then
// gives its /proc/<pid> files (environ, mem, maps, fd…) to root, so a
// script — running as the same user — can read neither the worker's
// environment (its NATS password) nor its memory, and cannot ptrace it.
// A script's own process is dumpable again after its exec, and none of
// this needs privileges. It returns the protections now active.
func protectProcess() []string {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil
	}
	return []string{"non-dumpable worker (scripts cannot read its /proc environ or memory)"}
}
