package runner

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// GuardShell is the POSIX shell that runs the reaper of scripts' process
// groups (one per worker process), and scripts that have no "#!" line.
const GuardShell = "/bin/sh"

// PathDefault is the PATH a script gets when the worker has none.
const PathDefault = "/usr/local/bin:/usr/bin:/bin"

// ProcessRunner runs each attempt as an OS process: in its own process
// group, started in the skill folder, with a minimal environment (PATH,
// HOME, LANG, a TMPDIR of its own and NARRATORIA_SKILLS_BIN from the
// worker, plus Invocation.Env — nothing else is inherited), under the
// attempt's kernel limits (set before its first instruction), the input
// as JSON on stdin, NDJSON events read from stdout as they come. At the
// timeout the whole group gets SIGTERM, then SIGKILL after
// Limits.KillGrace. When the script exits, whatever it left running in its
// group is killed (and, when the attempt had a user of its own, every
// process of that user), so a background child holding stdout cannot
// stall the attempt; its temporary folder is removed whatever happened.
type ProcessRunner struct {
	// Limits bound the attempt's output.
	Limits Limits
	// AttemptLimits are the kernel limits of an attempt whose invocation
	// leaves a field unset (AttemptLimitsDefault fills what these leave
	// unset).
	AttemptLimits messages.ResourceLimits
	// Users, when set (the worker runs as root), gives each attempt a
	// user of its own; Credential is then not used.
	Users *UserPool
	// Credential, when set, is the one user and group every script runs
	// as (skillworker's scriptUser naming a user).
	Credential *syscall.Credential
	// Landlock, when set and the kernel offers Landlock, confines each
	// script's file access: it may read and execute its skill folder, the
	// skills' shared .bin folder and the system's programs and libraries
	// (/usr, /bin, /lib…, /etc, /proc, and the character devices of
	// landlockDevices), and write only its skill's data/ folder and its
	// temporary folder. Another skill's folder, the worker's files, the
	// store and home folders are refused by the kernel, and so is ptrace
	// of any process outside the script's own (reading another process's
	// /proc environment included). The thread that forks the script
	// confines itself first, so no helper process is started.
	Landlock bool
}

// landlockRead are the system folders and devices a confined script may
// read and execute from, besides its skill folder.
var landlockRead = append([]string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/opt"}, landlockDevices...)

// landlockDevices are the devices a script may read, one by one: not the
// whole of /dev, whose /dev/shm is a folder every process on the machine
// shares (another skill's, or a worker's, files would be readable there;
// a test run that keeps its folders on tmpfs showed it). /dev/fd and
// /dev/stdin… are links into /proc, which scripts may read.
var landlockDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// Prepare starts the helper that kills scripts' process groups when this
// process dies (reaper.go), so that the first script does not wait for it
// and no script runs unannounced while it starts. Run starts it too when
// Prepare was not called.
func (r *ProcessRunner) Prepare() error { return groups.ready() }

// confined reports whether attempts are confined by Landlock.
func (r *ProcessRunner) confined() bool { return r.Landlock && LandlockABI() > 0 }

// SkillsBinEnv names the binary the sample skills' wrappers run when the
// sample skills binary was not built; the worker passes it through to
// scripts (`narratoria up` sets it to its own executable).
const SkillsBinEnv = "NARRATORIA_SKILLS_BIN"

// minimalEnv builds the script's environment.
func minimalEnv(extra map[string]string) []string {
	env := make([]string, 0, 4+len(extra))
	path := os.Getenv("PATH")
	if path == "" {
		path = PathDefault
	}
	env = append(env, "PATH="+path)
	for _, k := range []string{"HOME", "LANG", "TMPDIR", SkillsBinEnv} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// withoutVar returns env without the variable name.
func withoutVar(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// checkExecutable gives a clear error for a script that cannot run.
func checkExecutable(path string) *messages.ToolError {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: fmt.Sprintf("script %s does not exist", path)}
	case err != nil:
		return &messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: fmt.Sprintf("script %s: %v", path, err)}
	case st.IsDir():
		return &messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: fmt.Sprintf("script %s is a directory", path)}
	case st.Mode()&0o111 == 0:
		return &messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: fmt.Sprintf("script %s is not executable (chmod +x it)", path)}
	}
	return nil
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.n {
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Run implements Runner.
func (r *ProcessRunner) Run(ctx context.Context, inv Invocation, onEvent EventFunc) Result {
	began := time.Now()
	limits := r.Limits.WithDefaults()
	timeout := cmp.Or(inv.Timeout, TimeoutDefault)
	if timeout < 0 {
		timeout = TimeoutDefault
	}
	res := Result{ExitCode: -1}
	fail := func(e *messages.ToolError) Result {
		res.State, res.Error, res.Duration = messages.ToolFailed, e, time.Since(began)
		return res
	}
	if e := checkExecutable(inv.Path); e != nil {
		return fail(e)
	}
	input, err := json.Marshal(inv.Input)
	if err != nil {
		return fail(&messages.ToolError{Code: "bad_input", Category: messages.CategoryProcessError, Message: err.Error()})
	}
	att, err := r.prepare(inv, timeout)
	if err != nil {
		return fail(spawnFailed("prepare the attempt: %v", err))
	}
	defer att.cleanup()
	p, err := att.start(limits)
	if err != nil {
		return fail(spawnFailed("cannot start script %s: %v", inv.Path, err))
	}
	res.StartLatency = time.Since(began)
	h := &lines{limits: limits, onEvent: onEvent}
	state, endErr := p.follow(ctx, input, h, timeout, limits)
	att.proc, att.userGone = p.proc, p.proc.userGone
	res.Duration = time.Since(began)
	res.Done = h.done
	res.Events = h.events
	res.StderrTail = p.stderr.String()
	ps := p.proc.cmd.ProcessState
	if ps != nil && ps.Exited() {
		res.ExitCode = ps.ExitCode()
	}
	if endErr == nil {
		if res.ExitCode == -1 {
			state = messages.ToolFailed
			endErr = &messages.ToolError{Code: "killed", Category: messages.CategoryProcessError, Message: fmt.Sprintf("script ended abnormally: %v", p.exitErr)}
		} else {
			state, endErr = h.verdict(res.ExitCode)
		}
	}
	if endErr != nil && endErr.Category != messages.CategoryTimeout && endErr.Category != messages.CategoryCancelled {
		if hit := att.limitHit(ps, res.StderrTail); hit != nil {
			endErr = hit
		}
	}
	res.State = state
	if endErr != nil {
		if res.StderrTail != "" {
			if endErr.Details == nil {
				endErr.Details = map[string]any{}
			}
			endErr.Details["stderrTail"] = res.StderrTail
		}
		res.Error = endErr
	}
	return res
}

// spawnFailed is the error of an attempt whose script could not start.
func spawnFailed(format string, args ...any) *messages.ToolError {
	return &messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: fmt.Sprintf(format, args...)}
}

// attempt is one attempt being set up: its user, temporary folder,
// limits and confinement.
type attempt struct {
	r    *ProcessRunner
	inv  Invocation
	spec launchSpec
	// res are the attempt's kernel limits, every field set.
	res messages.ResourceLimits
	// uid is the attempt's own user (0: none); tmp its temporary folder.
	uid int
	tmp string
	// proc is the started script; userGone says its user has no process
	// left once it ended.
	proc     *launched
	userGone bool
}

// prepare takes the attempt's user, makes its temporary folder and works
// out its limits, environment and confinement.
func (r *ProcessRunner) prepare(inv Invocation, timeout time.Duration) (*attempt, error) {
	a := &attempt{r: r, inv: inv, res: inv.Resources.Over(r.AttemptLimits).Over(AttemptLimitsDefault(timeout))}
	a.spec = launchSpec{dir: inv.Dir, umask: -1, cred: r.Credential}
	a.spec.path, a.spec.args = scriptPath(inv.Dir, inv.Path), nil
	if r.Users != nil {
		uid, err := r.Users.Acquire()
		if err != nil {
			return nil, err
		}
		a.uid = uid
		a.spec.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(r.Users.GID), Groups: []uint32{}}
		a.spec.umask, a.spec.killUID = 0o007, uid
		if err := r.Users.shareDataDir(filepath.Join(inv.Dir, "data")); err != nil {
			a.cleanup()
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "narratoria-script-")
	if err != nil {
		a.cleanup()
		return nil, err
	}
	a.tmp = tmp
	if c := a.spec.cred; c != nil {
		if err := os.Chown(tmp, int(c.Uid), int(c.Gid)); err != nil {
			a.cleanup()
			return nil, err
		}
	}
	env := append(withoutVar(withoutVar(minimalEnv(inv.Env), "TMPDIR"), "HOME"), "TMPDIR="+tmp)
	if home, ok := os.LookupEnv("HOME"); ok && a.spec.cred == nil {
		env = append(env, "HOME="+home)
	} else {
		env = append(env, "HOME="+tmp) // a user of its own has no home of the worker's
	}
	a.spec.env = env
	if r.confined() {
		c := Confinement{Read: append([]string{inv.Dir, filepath.Join(filepath.Dir(inv.Dir), SharedBinDir)}, landlockRead...),
			Write: []string{filepath.Join(inv.Dir, DataDirName), tmp, "/dev/null"}}
		if bin := os.Getenv(SkillsBinEnv); bin != "" {
			c.Read = append(c.Read, bin)
		}
		a.spec.confine = &c
	}
	a.spec.rlimits = a.rlimits()
	return a, nil
}

// scriptPath is the script's path relative to the skill folder (where the
// process starts) when it lies inside it, else the path itself.
func scriptPath(dir, path string) string {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return path
	}
	return "./" + rel
}

// cleanup removes the attempt's temporary folder and gives its user
// back, once it has no process left; a user whose processes outlived the
// wait (killed, but not yet reaped) is set aside, never given to another
// attempt, whose processes limit they would count against.
func (a *attempt) cleanup() {
	if a.tmp != "" {
		removeTree(a.tmp)
	}
	if a.uid != 0 {
		if a.userGone || a.proc == nil {
			a.r.Users.Release(a.uid)
		} else {
			a.r.Users.SetAside(a.uid)
		}
	}
}

// process is a started attempt's script and its pipes.
type process struct {
	proc     *launched
	pgid     int
	stdinW   *os.File
	stdoutR  *os.File
	stderr   *tail
	exitErr  error
	exited   bool
	killGrp  func(syscall.Signal)
	unlisted func()
}

// start starts the script with its pipes; the reaper knows its group
// before it runs.
func (a *attempt) start(limits Limits) (*process, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	p := &process{stdinW: stdinW, stdoutR: stdoutR, stderr: &tail{n: limits.MaxStderrTail}}
	spec := a.spec
	spec.stdin, spec.stdout, spec.stderr = stdinR, stdoutW, p.stderr
	// The script leads its own process group. When the worker dies (even
	// by SIGKILL) the kernel kills the script (Pdeathsig) and the reaper
	// (reaper.go) kills the rest of its group, so no script or child of
	// one outlives its worker; it is told of the group before the script
	// runs its first instruction.
	p.proc, err = launch(spec, func(pid int) error { return groups.add(pid) })
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		stdinW.Close()
		stdoutR.Close()
		return nil, err
	}
	p.pgid = p.proc.cmd.Process.Pid
	pgid := p.pgid
	p.killGrp = func(sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }
	p.unlisted = func() { groups.remove(pgid) }
	return p, nil
}

// follow feeds the script its input, reads its events and waits for its
// end, its timeout or its cancellation; it returns the state and error
// of an attempt that did not end by itself (nil error otherwise).
func (p *process) follow(ctx context.Context, input []byte, h *lines, timeout time.Duration, limits Limits) (messages.ToolState, *messages.ToolError) {
	defer p.unlisted()
	// stdin: written in the background so a script that never reads it
	// cannot block the attempt; closed at the end in any case.
	go func() {
		_, _ = p.stdinW.Write(input)
		_ = p.stdinW.Close()
	}()
	// stdout: parsed line by line as it arrives.
	protoErr := make(chan *messages.ToolError, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		if e := readLines(p.stdoutR, limits.MaxLineBytes, h.line); e != nil {
			protoErr <- e
		}
	}()
	var (
		endErr *messages.ToolError
		state  messages.ToolState
	)
	end, perr := p.await(ctx, protoErr, timeout)
	switch end {
	case endExited:
	case endProtocol:
		endErr, state = perr, messages.ToolFailed
		p.killGrp(syscall.SIGKILL)
	case endTimeout:
		endErr, state = &messages.ToolError{Code: "timeout", Category: messages.CategoryTimeout,
			Message: fmt.Sprintf("script ran past its %s timeout", timeout)}, messages.ToolTimeout
		p.stop(limits.KillGrace)
	case endCancelled:
		endErr, state = &messages.ToolError{Code: "cancelled", Category: messages.CategoryCancelled,
			Message: "script ended because its plan was cancelled or the worker is stopping"}, messages.ToolFailed
		p.stop(limits.KillGrace)
	}
	// Whatever the script left in its group goes with it.
	p.killGrp(syscall.SIGKILL)
	if !p.exited {
		p.exitErr = <-p.proc.wait
	}
	// Read what is left on stdout; a process outside the group holding it
	// open is cut off after a short grace.
	select {
	case <-readDone:
	case <-time.After(DrainGraceDefault):
		p.stdoutR.Close()
		<-readDone
	}
	p.stdoutR.Close()
	_ = p.stdinW.Close()
	if endErr == nil {
		select {
		case e := <-protoErr:
			endErr, state = e, messages.ToolFailed
		default:
		}
	}
	return state, endErr
}

// How an attempt's wait ended.
type ending int

const (
	endExited ending = iota
	endProtocol
	endTimeout
	endCancelled
)

// pauseTick is how often a running attempt looks at the clock to notice
// that the worker was not running (pauseGap between two looks).
const (
	pauseTick = 250 * time.Millisecond
	pauseGap  = time.Second
)

// await waits for the script's end, a protocol error, its timeout or the
// context's end. The timeout is judged by the worker as it observes the
// script, never by a clock that ran while the worker could not: time the
// worker spent stopped (SIGSTOP, a VM pause, a debugger, a long
// stop-the-world: a gap of over pauseGap between two looks at the clock)
// does not count, and a script that ended meanwhile ended — its exit
// wins over a timeout that fell due in the same pause.
func (p *process) await(ctx context.Context, protoErr <-chan *messages.ToolError, timeout time.Duration) (ending, *messages.ToolError) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	tick := time.NewTicker(pauseTick)
	defer tick.Stop()
	last, paused := time.Now(), time.Duration(0)
	exited := func() bool {
		select {
		case p.exitErr = <-p.proc.wait:
			p.exited = true
			return true
		default:
			return false
		}
	}
	for {
		select {
		case p.exitErr = <-p.proc.wait:
			p.exited = true
			return endExited, nil
		case e := <-protoErr:
			return endProtocol, e
		case now := <-tick.C:
			if gap := now.Sub(last); gap > pauseGap {
				paused += gap - pauseTick
			}
			last = now
		case <-timer.C:
			if exited() {
				return endExited, nil
			}
			if gap := time.Since(last); gap > pauseGap {
				paused += gap - pauseTick
				last = time.Now()
			}
			if paused > 0 {
				// The worker did not see that much of the run: it is
				// given back.
				timer.Reset(paused)
				paused = 0
				continue
			}
			return endTimeout, nil
		case <-ctx.Done():
			return endCancelled, nil
		}
	}
}

// stop ends the script: SIGTERM, then SIGKILL after the grace.
func (p *process) stop(grace time.Duration) {
	p.killGrp(syscall.SIGTERM)
	select {
	case p.exitErr = <-p.proc.wait:
		p.exited = true
	case <-time.After(grace):
	}
	p.killGrp(syscall.SIGKILL)
}

// readLines calls fn for each line of r (without the newline). A line
// longer than maxLine ends the reading with an error; memory stays bounded
// by maxLine.
func readLines(r io.Reader, maxLine int, fn func([]byte) *messages.ToolError) *messages.ToolError {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			if complete {
				chunk = chunk[:len(chunk)-1]
			}
			if len(long)+len(chunk) > maxLine {
				return &messages.ToolError{Code: "line_too_long", Category: messages.CategoryProcessError,
					Message: fmt.Sprintf("stdout line longer than %d bytes (limits.maxLineBytes)", maxLine)}
			}
			if complete || err == io.EOF {
				line := chunk
				if long != nil {
					line = append(long, chunk...)
					long = nil
				}
				if e := fn(line); e != nil {
					return e
				}
			} else {
				long = append(long, chunk...)
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if len(long) > 0 {
				// The last line had no newline and filled the buffer exactly
				// (its length a multiple of it): EOF came with no bytes.
				return fn(long)
			}
			return nil
		}
	}
}
