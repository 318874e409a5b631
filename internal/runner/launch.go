package runner

import (
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
)

// launchSpec is everything one attempt's process starts with.
type launchSpec struct {
	// path is the script, relative to dir when it lies inside it (the
	// process starts in dir, which its user may not reach by path), and
	// args its arguments.
	path string
	args []string
	// dir is the skill folder, the process's working directory.
	dir string
	env []string
	// stdin and stdout are the pipes' ends the script gets; stderr is
	// copied (its tail kept).
	stdin, stdout *os.File
	stderr        io.Writer
	// cred is the user the script runs as; nil keeps the worker's.
	cred *syscall.Credential
	// umask is the script's file mask; -1 keeps the worker's.
	umask int
	// confine, when set, is the Landlock confinement of the script.
	confine *Confinement
	// rlimits are the kernel limits set before the script runs.
	rlimits []rlimit
	// killUID, when above 0, is the attempt's own user: every process
	// it still has is killed once the script ended.
	killUID int
}

// rlimit is one kernel resource limit of an attempt.
type rlimit struct {
	name     string
	resource int
	// value is the soft limit; hard, when above it, the hard one.
	value, hard uint64
}

// launched is a started attempt's process.
type launched struct {
	cmd *exec.Cmd
	// wait receives the process's end (cmd.Wait), after every process of
	// an attempt's own user was killed.
	wait chan error
	// userGone, read after wait, says that an attempt's own user has no
	// process left (zombies included): it may serve another attempt.
	userGone bool
}

// untraced counts attempts whose limits were set just after their start,
// not before it, because the kernel refused ptrace (Untraced).
var untraced atomic.Int64

// Untraced reports how many attempts of this process got their kernel
// limits a moment after they started rather than before, because the
// kernel (a seccomp profile, Yama's ptrace scope 3) refused to stop them
// at their start.
func Untraced() int64 { return untraced.Load() }
