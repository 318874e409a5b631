//go:build linux

package runner

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// launch starts one attempt's script on an OS thread of its own, which
// lives exactly as long as the script (the kernel's parent-death signal
// follows the thread that forked) and is thrown away after it, because
// the launch changes it for good:
//
//   - it gets a working directory and file mask of its own (unshare of
//     CLONE_FS): the script starts in its skill folder even when a user
//     of its own could not reach that folder's parents by path, and what
//     it creates is group-writable for the next attempt's user;
//   - Landlock confines it (when asked), so the script it forks is
//     confined from its first instruction, with no helper process;
//   - the script is forked stopped at its exec (ptrace), so the attempt's
//     kernel limits (prlimit) and the reaper's record of its group are in
//     place before it runs a single instruction of its own;
//   - after the script's end, when the attempt ran as a user of its own,
//     the thread takes that user's identity and kills every process it
//     still has (kill(-1)): whatever the script left, in its group or
//     out of it, dies before the user serves another attempt.
//
// ready is called between the stop and the start, on the caller's side
// of a handshake (so the reaper is never started from the confined
// thread); an error from it kills the script before it runs.
func launch(s launchSpec, ready func(pid int) error) (*launched, error) {
	type startResult struct {
		cmd *exec.Cmd
		err error
	}
	started := make(chan startResult, 1)
	proceed := make(chan error, 1)
	l := &launched{wait: make(chan error, 1)}
	onDisposableThread(func() {
		cmd, traced, err := s.startOnThisThread()
		if err != nil {
			started <- startResult{err: err}
			return
		}
		pid := cmd.Process.Pid
		if traced {
			// The script stopped at its exec: the caller readies it, then
			// it runs (or is killed, never having run).
			started <- startResult{cmd: cmd}
			if err := <-proceed; err != nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = unix.PtraceDetach(pid)
		} else {
			started <- startResult{cmd: cmd}
			<-proceed
		}
		err = cmd.Wait()
		if s.killUID > 0 {
			killAllOf(s.killUID)
		}
		l.wait <- err
	})
	r := <-started
	if r.err != nil {
		return nil, r.err
	}
	l.cmd = r.cmd
	err := ready(r.cmd.Process.Pid)
	proceed <- err
	if err != nil {
		<-l.wait
		return nil, err
	}
	return l, nil
}

// startOnThisThread prepares the calling (locked) thread and starts the
// script from it, stopped at its exec where ptrace is allowed. It reports
// whether the script is stopped (traced), and applies the limits itself,
// after the start, where it is not (a small window; counted).
func (s launchSpec) startOnThisThread() (*exec.Cmd, bool, error) {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, false, fmt.Errorf("unshare the thread's file context: %w", err)
	}
	if s.umask >= 0 {
		unix.Umask(s.umask)
	}
	if err := unix.Chdir(s.dir); err != nil {
		return nil, false, fmt.Errorf("enter the skill folder: %w", err)
	}
	if s.confine != nil {
		if err := restrictThread(*s.confine); err != nil {
			return nil, false, err
		}
	}
	if s.cred != nil {
		if err := becomeUser(s.cred); err != nil {
			return nil, false, err
		}
	}
	cmd, err := s.start(true)
	if err == nil {
		return cmd, true, s.waitStop(cmd)
	}
	if errors.Is(err, syscall.EPERM) {
		// ptrace refused (a seccomp profile, Yama's scope 3): start it
		// running and limit it at once.
		untraced.Add(1)
		if cmd, err = s.start(false); err == nil {
			return cmd, false, s.applyLimits(cmd.Process.Pid)
		}
	}
	return nil, false, err
}

// start starts the script (or, without a "#!" line, the shell on it),
// again for a moment when its file is busy being written.
func (s launchSpec) start(traced bool) (*exec.Cmd, error) {
	cmd, err := s.startOnce(traced, s.path, s.args)
	for try := 1; errors.Is(err, syscall.ETXTBSY) && try <= 5; try++ {
		// The file is open for writing somewhere: a deploy replacing it
		// in place, or (in one process that writes scripts and runs them,
		// as tests do) a copy of the writer's descriptor held by a child
		// forked meanwhile, until that child's exec. Both pass soon.
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
		cmd, err = s.startOnce(traced, s.path, s.args)
	}
	if errors.Is(err, syscall.ENOEXEC) {
		// No "#!" line: a shell would run it as a shell script, so do we.
		cmd, err = s.startOnce(traced, GuardShell, append([]string{s.path}, s.args...))
	}
	return cmd, err
}

func (s launchSpec) startOnce(traced bool, name string, args []string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = s.env
	cmd.Stdin = s.stdin
	cmd.Stdout = s.stdout
	cmd.Stderr = s.stderr // copied by exec's goroutine; WaitDelay bounds it
	cmd.WaitDelay = DrainGraceDefault
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Ptrace: traced}
	return cmd, cmd.Start()
}

// waitStop waits for a traced script's stop at its exec and limits it.
func (s launchSpec) waitStop(cmd *exec.Cmd) error {
	pid := cmd.Process.Pid
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the script's start: %w", err)
		}
		break
	}
	if !ws.Stopped() {
		return fmt.Errorf("the script did not stop at its start (%v)", ws)
	}
	if err := s.applyLimits(pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = unix.PtraceDetach(pid)
		_ = cmd.Wait()
		return err
	}
	return nil
}

// applyLimits sets the attempt's kernel limits on the script.
func (s launchSpec) applyLimits(pid int) error {
	for _, l := range s.rlimits {
		lim := unix.Rlimit{Cur: l.value, Max: max(l.hard, l.value)}
		if err := unix.Prlimit(pid, l.resource, &lim, nil); err != nil {
			return fmt.Errorf("limit %s: %w", l.name, err)
		}
	}
	return nil
}

// becomeUser gives the calling thread, and so the script it forks, the
// script's user and group and no supplementary group. Raw system calls
// change this thread only (the C library, and Go's syscall package, would
// change every thread of the worker). The thread then limits the script
// it forks as that script's own user would (prlimit of another user's
// process needs CAP_SYS_RESOURCE, which a container's root often lacks).
// The calling thread must be locked and discarded afterwards.
func becomeUser(c *syscall.Credential) error {
	groups := make([]uint32, len(c.Groups))
	copy(groups, c.Groups)
	var gp uintptr
	if len(groups) > 0 {
		gp = uintptr(unsafe.Pointer(&groups[0]))
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), gp, 0); errno != 0 {
		return fmt.Errorf("become the script's user: setgroups: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(c.Gid), uintptr(c.Gid), uintptr(c.Gid)); errno != 0 {
		return fmt.Errorf("become the script's user: setresgid %d: %w", c.Gid, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(c.Uid), uintptr(c.Uid), uintptr(c.Uid)); errno != 0 {
		return fmt.Errorf("become the script's user: setresuid %d: %w", c.Uid, errno)
	}
	runtime.KeepAlive(groups)
	return nil
}

// killAllOf kills every process of user uid, from the calling thread,
// which it gives that user's identity for good (raw setresuid changes
// this thread only): kill(-1) then reaches exactly the processes that
// user may signal — its own — and never the worker. A fork racing the
// kill cannot finish: the kernel walks the task list under the lock a
// fork needs, and a process with a fatal signal pending forks no more.
// The calling thread must be locked and discarded afterwards.
func killAllOf(uid int) {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
		return
	}
	_ = unix.Kill(-1, unix.SIGKILL)
}

// clearUser kills whatever processes user uid still has (an earlier
// worker's scripts, left when it died), from a thread made for it.
func clearUser(uid int) {
	done := make(chan struct{})
	onDisposableThread(func() {
		defer close(done)
		killAllOf(uid)
	})
	<-done
}

// onDisposableThread runs fn on a goroutine locked to an OS thread that is
// discarded when fn returns (the goroutine ends locked), so fn may change
// the thread for good. That thread is never the process's main thread,
// which Go keeps (wedged, with whatever fn made of it) instead of
// discarding, and whose identity is the one /proc shows for the process:
// a goroutine that finds itself there holds it while another one takes a
// thread of its own (the main thread, held, cannot run it).
func onDisposableThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			fn()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// rlimitOf are the kernel's resource numbers of the attempt limits.
var (
	rlimitData   = unix.RLIMIT_DATA
	rlimitCPU    = unix.RLIMIT_CPU
	rlimitNproc  = unix.RLIMIT_NPROC
	rlimitFsize  = unix.RLIMIT_FSIZE
	rlimitNofile = unix.RLIMIT_NOFILE
)
