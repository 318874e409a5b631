package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
// group, in the skill folder, with a minimal environment (PATH, HOME, LANG,
// TMPDIR and NARRATORIA_SKILLS_BIN from the worker, plus Invocation.Env —
// nothing else is inherited),
// the input as JSON on stdin, NDJSON events read from stdout as they come.
// At the timeout the whole group gets SIGTERM, then SIGKILL after
// Limits.KillGrace. When the script exits, whatever it left running in its
// group is killed, so a background child holding stdout cannot stall the
// attempt.
type ProcessRunner struct {
	// Limits bound the attempt's output.
	Limits Limits
	// Credential, when set, is the user and group scripts run as
	// (skillworker's scriptUser).
	Credential *syscall.Credential
	// Landlock, when set and the kernel offers Landlock, confines each
	// script's file access: it may read and execute its skill folder and
	// the system's programs and libraries (/usr, /bin, /lib…, /etc, /proc,
	// and the character devices of landlockDevices), and write only its skill's data/ folder and a temporary folder
	// of its own (TMPDIR), removed after the attempt. Another skill's
	// folder, the worker's files and home folders are refused by the
	// kernel. The script is started through the worker's own executable,
	// which applies the rules to itself and becomes the script (a few
	// milliseconds per attempt); with Credential, that executable must be
	// executable by the script user.
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
	timeout := inv.Timeout
	if timeout <= 0 {
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
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fail(&messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: err.Error()})
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return fail(&messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: err.Error()})
	}
	stderrT := &tail{n: limits.MaxStderrTail}
	// The script leads its own process group. When the worker dies (even
	// by SIGKILL) the kernel kills the script (Pdeathsig) and the reaper
	// (reaper.go) kills the rest of its group, so no script or child of
	// one outlives its worker.
	env := minimalEnv(inv.Env)
	var sandbox string // the worker's executable, which confines the script and becomes it
	if r.confined() {
		tmp, err := os.MkdirTemp("", "narratoria-script-")
		if err != nil {
			return fail(&messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: err.Error()})
		}
		defer os.RemoveAll(tmp)
		if r.Credential != nil {
			_ = os.Chown(tmp, int(r.Credential.Uid), int(r.Credential.Gid))
		}
		c := Confinement{Read: append([]string{inv.Dir}, landlockRead...), Write: []string{filepath.Join(inv.Dir, "data"), tmp, "/dev/null"}}
		if bin := os.Getenv(SkillsBinEnv); bin != "" {
			c.Read = append(c.Read, bin)
		}
		rules, _ := json.Marshal(c)
		env = append(withoutVar(env, "TMPDIR"), "TMPDIR="+tmp, sandboxEnv+"="+string(rules))
		if sandbox, err = os.Executable(); err != nil {
			return fail(&messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError, Message: "landlock: " + err.Error()})
		}
	}
	start := func(name string, args ...string) (*exec.Cmd, error) {
		if sandbox != "" {
			name, args = sandbox, append([]string{name}, args...)
		}
		cmd := exec.Command(name, args...)
		cmd.Dir = inv.Dir
		cmd.Env = env
		cmd.Stdin = stdinR
		cmd.Stdout = stdoutW
		cmd.Stderr = stderrT // copied by exec's goroutine; WaitDelay bounds it
		cmd.WaitDelay = DrainGraceDefault
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: r.Credential}
		return cmd, cmd.Start()
	}
	// Pdeathsig follows the thread that started the process: keep this
	// goroutine on it until the process is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	notStarted := func(err error) Result {
		stdinR.Close()
		stdinW.Close()
		stdoutR.Close()
		stdoutW.Close()
		return fail(&messages.ToolError{Code: "spawn_failed", Category: messages.CategoryProcessError,
			Message: fmt.Sprintf("cannot start script %s: %v", inv.Path, err)})
	}
	cmd, err := start(inv.Path)
	for try := 1; errors.Is(err, syscall.ETXTBSY) && try <= 5; try++ {
		// The file is open for writing somewhere: a deploy replacing it
		// in place, or (in one process that writes scripts and runs them,
		// as tests do) a copy of the writer's descriptor held by a child
		// forked meanwhile, until that child's exec. Both pass soon.
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
		cmd, err = start(inv.Path)
	}
	if errors.Is(err, syscall.ENOEXEC) {
		// No "#!" line: a shell would run it as a shell script, so do we.
		cmd, err = start(GuardShell, inv.Path)
	}
	if err != nil {
		return notStarted(err)
	}
	pgid := cmd.Process.Pid
	killGroup := func(sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }
	if err := groups.add(pgid); err != nil {
		// Nothing would kill the group if the worker died: do not run it.
		killGroup(syscall.SIGKILL)
		_ = cmd.Wait()
		groups.remove(pgid)
		return notStarted(err)
	}
	defer groups.remove(pgid)
	res.StartLatency = time.Since(began)
	stdinR.Close()
	stdoutW.Close()

	// stdin: written in the background so a script that never reads it
	// cannot block the attempt; closed at the end in any case.
	go func() {
		_, _ = stdinW.Write(input)
		_ = stdinW.Close()
	}()

	// stdout: parsed line by line as it arrives.
	h := &lines{limits: limits, onEvent: onEvent}
	protoErr := make(chan *messages.ToolError, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		if e := readLines(stdoutR, limits.MaxLineBytes, h.line); e != nil {
			protoErr <- e
		}
	}()

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var (
		endErr  *messages.ToolError
		state   messages.ToolState
		exitErr error
		exited  bool
	)
	// stop ends the script: SIGTERM, then SIGKILL after the grace.
	stop := func() {
		killGroup(syscall.SIGTERM)
		select {
		case exitErr = <-waitErr:
			exited = true
		case <-time.After(limits.KillGrace):
		}
		killGroup(syscall.SIGKILL)
	}
	select {
	case exitErr = <-waitErr:
		exited = true
	case e := <-protoErr:
		endErr, state = e, messages.ToolFailed
		killGroup(syscall.SIGKILL)
	case <-timer.C:
		endErr, state = &messages.ToolError{Code: "timeout", Category: messages.CategoryTimeout,
			Message: fmt.Sprintf("script ran past its %s timeout", timeout)}, messages.ToolTimeout
		stop()
	case <-ctx.Done():
		endErr, state = &messages.ToolError{Code: "cancelled", Category: messages.CategoryCancelled,
			Message: "script ended because its plan was cancelled or the worker is stopping"}, messages.ToolFailed
		stop()
	}
	// Whatever the script left in its group goes with it.
	killGroup(syscall.SIGKILL)
	if !exited {
		exitErr = <-waitErr
	}
	// Read what is left on stdout; a process outside the group holding it
	// open is cut off after a short grace.
	select {
	case <-readDone:
	case <-time.After(DrainGraceDefault):
		stdoutR.Close()
		<-readDone
	}
	stdoutR.Close()
	_ = stdinW.Close()
	if endErr == nil {
		select {
		case e := <-protoErr:
			endErr, state = e, messages.ToolFailed
		default:
		}
	}

	res.Duration = time.Since(began)
	res.Done = h.done
	res.Events = h.events
	res.StderrTail = stderrT.String()
	if ps := cmd.ProcessState; ps != nil && ps.Exited() {
		res.ExitCode = ps.ExitCode()
	}
	if endErr == nil {
		if res.ExitCode == -1 {
			state = messages.ToolFailed
			endErr = &messages.ToolError{Code: "killed", Category: messages.CategoryProcessError, Message: fmt.Sprintf("script ended abnormally: %v", exitErr)}
		} else {
			state, endErr = h.verdict(res.ExitCode)
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
