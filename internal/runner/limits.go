package runner

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Defaults of an attempt's kernel limits (messages.ResourceLimits).
const (
	// MemoryMBDefault bounds the writable memory an attempt's processes
	// map (RLIMIT_DATA, not the address space: Node, Go and Java reserve
	// far more address space than they use, and a limit on it breaks
	// them). Node, Python and Go scripts start and run well under it.
	MemoryMBDefault = 1024
	// CPUSecondsMinDefault is the least CPU time an attempt gets; the
	// default is the larger of it and twice the attempt's timeout.
	CPUSecondsMinDefault = 60
	// ProcessesDefault bounds the processes and threads an attempt has at
	// once.
	ProcessesDefault = 64
	// FileSizeMBDefault is the largest file an attempt may write.
	FileSizeMBDefault = 256
	// OpenFilesDefault bounds each process's open files.
	OpenFilesDefault = 1024
	// cpuHardGrace is how far the hard CPU limit (SIGKILL) lies past the
	// soft one (SIGXCPU, which a script may catch to end cleanly).
	cpuHardGrace = 5
)

// DataDirName is a skill's private storage folder, which its scripts may
// write (skills.DataDirName).
const DataDirName = "data"

// SharedBinDir is the folder beside the skills that holds programs every
// skill's scripts may run (the sample skills' Go binary): confined
// scripts may read and execute it, never write it.
const SharedBinDir = ".bin"

// AttemptLimitsDefault are the kernel limits of an attempt with the given
// timeout when neither the manifest nor the worker sets them.
func AttemptLimitsDefault(timeout time.Duration) messages.ResourceLimits {
	return messages.ResourceLimits{
		MemoryMB:   MemoryMBDefault,
		CPUSeconds: max(CPUSecondsMinDefault, int(2*timeout/time.Second)),
		Processes:  ProcessesDefault,
		FileSizeMB: FileSizeMBDefault,
		OpenFiles:  OpenFilesDefault,
	}
}

// AttemptLimitsMaxDefault is the operator's maximum when the worker's
// configuration sets none: what a manifest may raise its limits to.
var AttemptLimitsMaxDefault = messages.ResourceLimits{MemoryMB: 8192, CPUSeconds: 3600, Processes: 1024, FileSizeMB: 4096, OpenFiles: 65536}

// rlimits are the attempt's limits as the kernel takes them. The
// processes limit counts every process of the script's user: a user of
// the attempt's own has none but the script's; a user shared with the
// worker or other attempts has its current processes added.
func (a *attempt) rlimits() []rlimit {
	l := a.res
	procs := uint64(l.Processes)
	if a.uid == 0 {
		uid := os.Geteuid()
		if a.spec.cred != nil {
			uid = int(a.spec.cred.Uid)
		}
		procs += uint64(tasksOf(uid))
	}
	out := []rlimit{
		{"memory", rlimitData, uint64(l.MemoryMB) << 20, 0},
		{"cpu", rlimitCPU, uint64(l.CPUSeconds), uint64(l.CPUSeconds + cpuHardGrace)},
		{"processes", rlimitNproc, procs, 0},
		{"file size", rlimitFsize, uint64(l.FileSizeMB) << 20, 0},
		{"open files", rlimitNofile, uint64(l.OpenFiles), 0},
	}
	kept := out[:0]
	for _, r := range out {
		if r.resource >= 0 {
			kept = append(kept, r)
		}
	}
	return kept
}

// Names of the limit errors (ToolError.Code) of an attempt that hit one
// of its kernel limits.
const (
	LimitMemory    = "limit_memory"
	LimitCPU       = "limit_cpu"
	LimitProcesses = "limit_processes"
	LimitFileSize  = "limit_file_size"
	LimitOpenFiles = "limit_open_files"
)

// What runtimes print when the kernel refuses them memory, processes or
// files, read from the end of stderr: the kernel does not say which limit
// a failed allocation or fork ran into, the program that met it does.
var (
	outOfMemory = regexp.MustCompile(`(?i)out of memory|MemoryError|Cannot allocate memory|allocation failed|std::bad_alloc|memory exhausted|ENOMEM`)
	outOfProcs  = regexp.MustCompile(`(?i)Resource temporarily unavailable|fork: retry|can't fork|cannot fork|EAGAIN|pthread_create failed|newosproc`)
	outOfFiles  = regexp.MustCompile(`(?i)Too many open files|EMFILE`)
	outOfSpace  = regexp.MustCompile(`(?i)File size limit exceeded|File too large|EFBIG`)
)

// limitHit names the kernel limit a failed attempt ran into, or nil: a
// signal the kernel sends at a limit (SIGXCPU, SIGXFSZ, SIGKILL at the
// hard CPU limit), or what the script's runtime said of a refused
// allocation, fork or file on stderr.
func (a *attempt) limitHit(ps *os.ProcessState, stderr string) *messages.ToolError {
	hit := func(code, format string, args ...any) *messages.ToolError {
		return &messages.ToolError{Code: code, Category: messages.CategoryProcessError, Message: fmt.Sprintf(format, args...),
			Details: map[string]any{"limits": a.res}}
	}
	if ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			switch ws.Signal() {
			case syscall.SIGXCPU:
				return hit(LimitCPU, "script used its %d s of CPU time (limits.cpuSeconds)", a.res.CPUSeconds)
			case syscall.SIGXFSZ:
				return hit(LimitFileSize, "script wrote a file past %d MiB (limits.fileSizeMB)", a.res.FileSizeMB)
			case syscall.SIGKILL:
				if ps.UserTime()+ps.SystemTime() >= time.Duration(a.res.CPUSeconds)*time.Second {
					return hit(LimitCPU, "script used its %d s of CPU time (limits.cpuSeconds)", a.res.CPUSeconds)
				}
			}
		}
		if ps.Exited() && ps.ExitCode() == 128+int(syscall.SIGXFSZ) {
			return hit(LimitFileSize, "script wrote a file past %d MiB (limits.fileSizeMB)", a.res.FileSizeMB)
		}
	}
	switch {
	case outOfSpace.MatchString(stderr):
		return hit(LimitFileSize, "script wrote a file past %d MiB (limits.fileSizeMB)", a.res.FileSizeMB)
	case outOfMemory.MatchString(stderr):
		return hit(LimitMemory, "script was refused memory past %d MiB (limits.memoryMB)", a.res.MemoryMB)
	case outOfFiles.MatchString(stderr):
		return hit(LimitOpenFiles, "script opened more than %d files (limits.openFiles)", a.res.OpenFiles)
	case outOfProcs.MatchString(stderr):
		return hit(LimitProcesses, "script was refused a process past %d (limits.processes)", a.res.Processes)
	}
	return nil
}

// removeTree removes a temporary folder whatever its content's modes: a
// script may leave folders it made unreadable.
func removeTree(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// tasksOf counts the processes and threads of user uid (what the kernel
// counts against RLIMIT_NPROC), read from /proc at most once a second.
func tasksOf(uid int) int {
	taskCount.mu.Lock()
	defer taskCount.mu.Unlock()
	c, ok := taskCount.by[uid]
	if ok && time.Since(c.at) < time.Second {
		return c.n
	}
	n := countTasks(uid)
	taskCount.by[uid] = counted{n: n, at: time.Now()}
	return n
}

type counted struct {
	n  int
	at time.Time
}

var taskCount = struct {
	mu sync.Mutex
	by map[int]counted
}{by: map[int]counted{}}

// countTasks reads the real user and thread count of every process.
func countTasks(uid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.Itoa(uid)
	n := 0
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real, threads string
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real = f[0]
				}
			} else if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads = strings.TrimSpace(v)
			}
		}
		if real == want {
			t, _ := strconv.Atoi(threads)
			n += max(t, 1)
		}
	}
	return n
}
