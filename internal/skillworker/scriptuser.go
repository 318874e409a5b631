package skillworker

import (
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/pkg/messages"
)

// processRunner builds the runner of real scripts the configuration asks
// for: who scripts run as (scriptUser), confined (landlock) and limited
// (attemptLimits).
func processRunner(cfg Config) (*runner.ProcessRunner, error) {
	pr := &runner.ProcessRunner{Limits: cfg.Limits, AttemptLimits: cfg.AttemptLimits, Landlock: *cfg.Landlock}
	switch {
	case cfg.ScriptUser == ScriptUserSelf:
	case cfg.ScriptUser == "" && os.Geteuid() == 0:
		pr.Users = runner.NewUserPool(cfg.ScriptUIDBase, max(runner.ScriptUIDCountDefault, cfg.Concurrency))
	case cfg.ScriptUser == "":
	default:
		cred, err := scriptCredential(cfg.ScriptUser)
		if err != nil {
			return nil, err
		}
		pr.Credential = cred
	}
	return pr, nil
}

// logProtections says once at start what keeps scripts from the worker's
// secrets and from each other, and what does not (docs/writing-skills.md,
// "What a script can reach"); a protection turned off, or missing where
// the kernel cannot give it, is logged as an error.
func (w *Worker) logProtections() {
	active := append([]string{"minimal script environment (PATH, HOME, LANG, TMPDIR, the skills bin folder, the skill's own settings)"}, protectProcess()...)
	var missing []string
	pr, real := w.run.(*runner.ProcessRunner)
	if !real {
		w.log.Info("skillworker: scripts run in process", slog.Any("active", active))
		return
	}
	switch abi := runner.LandlockABI(); {
	case pr.Landlock && abi > 0:
		active = append(active, fmt.Sprintf("landlock ABI %d (scripts read their skill folder, the shared .bin and the system's; write their data/ and TMPDIR only; no ptrace or /proc environ of other processes)", abi))
	case pr.Landlock:
		missing = append(missing, "landlock (this kernel offers none: scripts can read whatever their user can)")
	default:
		missing = append(missing, "landlock (turned off: worker.landlock false)")
	}
	switch {
	case pr.Users != nil:
		active = append(active, fmt.Sprintf("a user of its own for each attempt (IDs from %d; no process of it outlives the attempt)", pr.Users.Base))
	case pr.Credential != nil:
		active = append(active, "scripts run as user "+w.cfg.ScriptUser)
	case os.Geteuid() == 0:
		missing = append(missing, "a user other than root (worker.scriptUser self: scripts run as root)")
	default:
		active = append(active, "scripts run as the worker's own user, not root (a root worker would give each attempt a user of its own)")
	}
	active = append(active, "kernel limits per attempt (memory, CPU time, processes, file size, open files)")
	if len(missing) > 0 {
		w.log.Error("skillworker: scripts run with protections missing", slog.Any("active", active), slog.Any("missing", missing))
		return
	}
	w.log.Info("skillworker: script protections", slog.Any("active", active))
}

// scriptCredential resolves worker.scriptUser to the credential scripts
// run with: the user's ID and primary group, no supplementary groups. ""
// keeps the worker's own user.
func scriptCredential(name string) (*syscall.Credential, error) {
	if name == "" {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("worker.scriptUser: no user %q", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("worker.scriptUser: user %q has no numeric IDs (%s:%s)", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// attemptLimits are one attempt's kernel limits: the script's manifest
// entry over the skill's over the worker's, each lowered to the
// operator's maximum.
func (w *Worker) attemptLimits(sk *skills.Skill, sc *skills.Script) messages.ResourceLimits {
	l, _ := sc.Spec.Limits.Over(sk.Manifest.Limits).Over(w.cfg.AttemptLimits).Capped(w.cfg.AttemptLimitsMax)
	return l
}

// checkLimits warns once, when a skill is loaded, of each manifest limit
// over the operator's maximum (its attempts get the maximum).
func (w *Worker) checkLimits(sk *skills.Skill) {
	for name, sc := range sk.Scripts {
		if _, lowered := sc.Spec.Limits.Over(sk.Manifest.Limits).Capped(w.cfg.AttemptLimitsMax); len(lowered) > 0 {
			w.log.Warn("skillworker: manifest limits over the operator's maximum; the maximum applies (worker.attemptLimitsMax)",
				slog.String("skill", sk.Name), slog.String("script", name), slog.Any("limits", lowered))
		}
	}
}
