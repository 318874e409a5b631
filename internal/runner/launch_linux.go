//go:build linux

package runner

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
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
	if s.killUID > 0 {
		primeForks()
	}
	// A thread, its PID namespace included, serves one start: a script
	// whose start fails for a moment (its file busy being written), or
	// that must run through the shell (no "#!" line), or must start
	// untraced, gets a thread of its own again.
	l, err := launchOnce(s, ready)
	for try := 1; errors.Is(err, syscall.ETXTBSY) && try <= 5; try++ {
		// The file is open for writing somewhere: a deploy replacing it
		// in place, or (in one process that writes scripts and runs them,
		// as tests do) a copy of the writer's descriptor held by a child
		// forked meanwhile, until that child's exec. Both pass soon.
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
		l, err = launchOnce(s, ready)
	}
	if errors.Is(err, syscall.ENOEXEC) {
		// No "#!" line: a shell would run it as a shell script, so do we.
		s.path, s.args = GuardShell, append([]string{s.path}, s.args...)
		l, err = launchOnce(s, ready)
	}
	if errors.Is(err, errUntraced) {
		l, err = launchOnce(s, ready)
	}
	return l, err
}

// launchOnce is one start of the script on a thread of its own.
func launchOnce(s launchSpec, ready func(pid int) error) (*launched, error) {
	type startResult struct {
		cmd *exec.Cmd
		err error
	}
	started := make(chan startResult, 1)
	proceed := make(chan error, 1)
	l := &launched{wait: make(chan error, 1)}
	onDisposableThread(func() {
		cmd, traced, pidns, err := s.startOnThisThread()
		if err != nil {
			started <- startResult{err: err}
			return
		}
		pid := cmd.Process.Pid
		started <- startResult{cmd: cmd}
		// The caller readies the script, then it runs (or is killed,
		// never having run a single instruction of its own when traced).
		if err := <-proceed; err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if traced {
			_ = unix.PtraceDetach(pid)
		}
		err = cmd.Wait()
		if s.killUID > 0 {
			// In a PID namespace of its own, the kernel killed and reaped
			// every process of the attempt when the script (its first
			// process) ended; without one, the user's processes are killed
			// here and waited for.
			killAllOf(s.killUID)
			l.userGone = pidns || userGone(s.killUID)
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

// primeForks makes sure the process has started a child before a thread
// forks a script into a PID namespace of its own: Go's first start of a
// process checks, once, what the kernel's clone offers by forking a child
// that exits at once — from a thread with a new PID namespace, that child
// would be the namespace's first process, and its end would close the
// namespace to the script (fork: "cannot allocate memory"). A worker has
// started its reaper by then; this covers a runner used without Prepare.
var primeForks = sync.OnceFunc(func() { _ = exec.Command(GuardShell, "-c", ":").Run() })

// errUntraced asks for a start again, untraced: the kernel refused ptrace.
var errUntraced = errors.New("start again untraced")

// startOnThisThread prepares the calling (locked) thread and starts the
// script from it, stopped at its exec where ptrace is allowed, and first
// process of a PID namespace of its own when the attempt has a user of its
// own and the kernel lets the worker make one (CAP_SYS_ADMIN). It reports
// whether the script is stopped (traced) and in a namespace of its own;
// where ptrace is refused it applies the limits itself, just after the
// start (a small window; counted by Untraced).
func (s launchSpec) startOnThisThread() (cmd *exec.Cmd, traced, pidns bool, err error) {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, false, false, fmt.Errorf("unshare the thread's file context: %w", err)
	}
	if s.umask >= 0 {
		unix.Umask(s.umask)
	}
	if err := unix.Chdir(s.dir); err != nil {
		return nil, false, false, fmt.Errorf("enter the skill folder: %w", err)
	}
	if s.confine != nil {
		if err := restrictThread(*s.confine); err != nil {
			return nil, false, false, err
		}
	}
	pidns = s.killUID > 0 && !noPIDNamespace.Load()
	if pidns {
		// Made while the thread is still root: the namespace belongs to
		// the worker, not to the script's user.
		if err := unix.Unshare(unix.CLONE_NEWPID); err != nil {
			noPIDNamespace.Store(true) // a root without CAP_SYS_ADMIN (a container)
			pidns = false
		}
	}
	if s.cred != nil {
		if err := becomeUser(s.cred); err != nil {
			return nil, false, false, err
		}
	}
	traced = !ptraceRefused.Load()
	if cmd, err = s.startOnce(traced, s.path, s.args); err == nil {
		if traced {
			return cmd, true, pidns, s.waitStop(cmd)
		}
		untraced.Add(1)
		return cmd, false, pidns, s.applyLimits(cmd.Process.Pid)
	}
	if traced && errors.Is(err, syscall.EPERM) {
		// ptrace refused (a seccomp profile, Yama's scope 3): from now on
		// scripts start running and are limited at once.
		ptraceRefused.Store(true)
		err = errUntraced
	}
	return nil, false, false, err
}

// ptraceRefused is set once the kernel refused to stop a script at its
// start: later attempts start untraced.
var ptraceRefused atomic.Bool

// noPIDNamespace is set once the kernel refused this worker a PID
// namespace: later attempts do without.
var noPIDNamespace atomic.Bool

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

// userGone waits, up to userGoneWait, until user uid has no process left,
// zombies included (the kernel counts them against the next attempt's
// processes limit until their parent, init by then, reaps them), reading
// /proc; it reports whether none is left.
func userGone(uid int) bool {
	for wait, deadline := 100*time.Microsecond, time.Now().Add(userGoneWait); ; wait = min(2*wait, 20*time.Millisecond) {
		if countTasks(uid) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}

// userGoneWait bounds the wait for an attempt's user to have no process
// left; a user that still has some is not given to another attempt.
const userGoneWait = 5 * time.Second

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
