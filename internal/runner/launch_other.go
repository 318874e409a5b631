//go:build !linux

package runner

import (
	"errors"
	"os/exec"
	"syscall"
)

// launch starts the script plainly: kernel limits, Landlock and users of
// an attempt's own are Linux's.
func launch(s launchSpec, ready func(pid int) error) (*launched, error) {
	name, args := s.path, s.args
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
	cmd.WaitDelay = DrainGraceDefault
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	err := cmd.Start()
	if errors.Is(err, syscall.ENOEXEC) {
		cmd = exec.Command(GuardShell, append([]string{name}, args...)...)
		cmd.Dir, cmd.Env = s.dir, s.env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
		cmd.WaitDelay = DrainGraceDefault
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
		err = cmd.Start()
	}
	if err != nil {
		return nil, err
	}
	if err := ready(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	l := &launched{cmd: cmd, wait: make(chan error, 1)}
	go func() { l.wait <- cmd.Wait() }()
	return l, nil
}

func clearUser(int) {}

// The resource numbers are Linux's; elsewhere no limit is set.
var (
	rlimitData   = -1
	rlimitCPU    = -1
	rlimitNproc  = -1
	rlimitFsize  = -1
	rlimitNofile = -1
)
