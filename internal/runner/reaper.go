package runner

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
)

// reaperScript is the one helper process a worker keeps, whatever it runs:
// it reads "+ <pgid>" when a script's process group starts and "- <pgid>"
// when it is gone, and when its stdin reaches end of file — the worker
// died, even by SIGKILL, and the kernel closed the pipe's write end — it
// kills every group still listed (the scripts and whatever they started)
// and exits. It ignores the signals a terminal or a supervisor sends to
// the worker's process group: it must outlive the worker by that moment.
const reaperScript = `trap '' INT TERM HUP QUIT
live=' '
while read -r op pg; do
  case $op in
  +) live="$live$pg " ;;
  -) case $live in *" $pg "*) live="${live%% $pg *} ${live#* $pg }" ;; esac ;;
  esac
done
for pg in $live; do kill -s KILL -- "-$pg" 2>/dev/null; done`

// reaper tracks the process groups of the scripts this process runs, so
// none outlives it. It replaces a guard shell per attempt (a second
// fork and exec of a shell for every script, 1.4 ms of CPU each on the
// bench machine) with one helper for the process's lifetime, told of
// each group with one pipe write.
type reaper struct {
	mu   sync.Mutex
	pipe *os.File     // the helper's stdin; nil until the first script
	proc *os.Process  // the helper
	live map[int]bool // groups announced and not yet gone
}

// groups is the process's reaper, shared by every ProcessRunner.
var groups = &reaper{live: map[int]bool{}}

// add announces a script's process group. An error means the helper
// cannot run: the caller must not leave the script running.
func (r *reaper) add(pgid int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live[pgid] = true
	return r.send("+ " + strconv.Itoa(pgid) + "\n")
}

// ready starts the helper now if it is not running, so that announcing a
// script's group later is one pipe write: a helper started on the first
// script took a fork and exec of a shell after the script began, a window
// in which a worker killed would leave the script's children behind.
func (r *reaper) ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.send("")
}

// remove says a group is gone (its script exited and the group was
// killed), so a later process reusing the number is never killed.
func (r *reaper) remove(pgid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, pgid)
	_ = r.send("- " + strconv.Itoa(pgid) + "\n")
}

// send writes one line to the helper, starting it (again) when it is not
// running: a helper that died (killed by hand, say) is replaced and told
// every live group.
func (r *reaper) send(line string) error {
	if r.pipe != nil {
		if _, err := r.pipe.WriteString(line); err == nil {
			return nil
		}
		r.stop()
	}
	if err := r.start(); err != nil {
		return err
	}
	b := make([]byte, 0, 16*len(r.live))
	for pg := range r.live {
		b = fmt.Appendf(b, "+ %d\n", pg)
	}
	if _, err := r.pipe.Write(b); err != nil {
		r.stop()
		return fmt.Errorf("script reaper: %w", err)
	}
	return nil
}

// start runs the helper in a process group of its own, its stdin the read
// end of a pipe only this process can write to (the write end is
// close-on-exec, so no script inherits it and holds it open).
func (r *reaper) start() error {
	rd, wr, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("script reaper: %w", err)
	}
	cmd := exec.Command(GuardShell, "-c", reaperScript, "narratoria-reaper")
	cmd.Stdin = rd
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + PathDefault}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	rd.Close()
	if err != nil {
		wr.Close()
		return fmt.Errorf("script reaper: cannot start %s: %w", GuardShell, err)
	}
	r.pipe, r.proc = wr, cmd.Process
	return nil
}

// stop closes the pipe of a helper that failed a write (so it is gone or
// going) and reaps it.
func (r *reaper) stop() {
	_ = r.pipe.Close()
	r.pipe = nil
	if r.proc != nil {
		_ = r.proc.Kill()
		_, _ = r.proc.Wait()
		r.proc = nil
	}
}
