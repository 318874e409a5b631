//go:build linux

package runner

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Defaults of UserPool.
const (
	// ScriptUIDBaseDefault is the first user ID of the attempts' users:
	// the top of the range Debian's adduser fills from the bottom (1000
	// up), below systemd's dynamic users (61184 up). IDs that an account
	// or another worker on the host already uses are skipped.
	ScriptUIDBaseDefault = 59000
	// ScriptUIDCountDefault is how many IDs the range spans.
	ScriptUIDCountDefault = 1000
	// UserLockDirDefault holds the lock files by which the workers of a
	// host share the range.
	UserLockDirDefault = "/run/narratoria-script-users"
)

// UserPool gives each running attempt a user of its own: a user ID no
// account or other running attempt on the host has, taken for the
// attempt and given back at its end. The kernel then keeps attempts
// apart from the worker and from each other (files, signals, /proc,
// ptrace), bounds each attempt's processes exactly (RLIMIT_NPROC counts
// per user), and lets the worker kill everything an attempt left behind,
// whatever process group or session it moved to. Only root can run
// scripts as other users.
//
// The workers of one host share the range through a lock file per ID
// (flock, released by the kernel when a worker dies): a worker takes an
// ID for as long as it runs and first kills whatever that user still had
// (an earlier worker's scripts).
type UserPool struct {
	// Base is the first user ID; Count how many IDs the range spans.
	Base, Count int
	// GID is the group of every attempt's user; the skills' data folders
	// are given to it (mode 2770), so attempts share them.
	GID int
	// LockDir holds one lock file per ID this process took.
	LockDir string

	mu    sync.Mutex
	free  []int
	next  int
	locks []*os.File
	dirs  map[string]bool // data folders given to GID
	// asideCount counts users set aside (SetAside).
	asideCount int
}

// NewUserPool makes a pool of count IDs from base (0 takes the defaults),
// its group's ID the base.
func NewUserPool(base, count int) *UserPool {
	if base <= 0 {
		base = ScriptUIDBaseDefault
	}
	if count <= 0 {
		count = ScriptUIDCountDefault
	}
	return &UserPool{Base: base, Count: count, GID: base, LockDir: UserLockDirDefault, dirs: map[string]bool{}}
}

// Acquire takes a user for one attempt.
func (p *UserPool) Acquire() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		uid := p.free[n-1]
		p.free = p.free[:n-1]
		return uid, nil
	}
	if err := os.MkdirAll(p.LockDir, 0o700); err != nil {
		return 0, fmt.Errorf("script users: %w", err)
	}
	for p.next < p.Count {
		uid := p.Base + p.next
		p.next++
		if _, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			continue // an account's ID
		}
		f, err := os.OpenFile(filepath.Join(p.LockDir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, fmt.Errorf("script users: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // another worker's
			continue
		}
		p.locks = append(p.locks, f)
		clearUser(uid)
		return uid, nil
	}
	return 0, fmt.Errorf("script users: every ID of %d..%d is taken (worker.scriptUIDBase)", p.Base, p.Base+p.Count-1)
}

// Release gives back a user whose attempt ended (and whose processes are
// gone).
func (p *UserPool) Release(uid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, uid)
}

// Close gives up the pool's IDs (tests; a worker keeps them until it
// exits).
func (p *UserPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.locks {
		f.Close()
	}
	p.locks, p.free, p.next = nil, nil, 0
}

// shareDataDir makes a skill's data folder (created if missing) the
// attempts' group's, setgid, writable by the group, and what it holds
// group-writable, once per folder and process.
func (p *UserPool) shareDataDir(dir string) error {
	p.mu.Lock()
	done := p.dirs[dir]
	p.mu.Unlock()
	if done {
		return nil
	}
	if err := os.MkdirAll(dir, 0o770|fs.ModeSetgid); err != nil {
		return err
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if err := os.Lchown(path, -1, p.GID); err != nil {
			return err
		}
		add := fs.FileMode(0o660)
		if d.IsDir() {
			add = 0o770 | fs.ModeSetgid
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(path, info.Mode().Perm()|add)
	})
	if err != nil {
		return fmt.Errorf("share the data folder %s with the attempts' users: %w", dir, err)
	}
	p.mu.Lock()
	p.dirs[dir] = true
	p.mu.Unlock()
	return nil
}

// ReachableByOthers says why a user that is neither a folder's owner nor
// in its group (an attempt's own user) could not start a script of the
// skill folder dir, or nil: every folder above it must let others pass
// (o+x), and dir itself be readable (o+rx). Interpreters (Python, Node)
// open a script by its absolute path, so starting in the folder is not
// enough.
func ReachableByOthers(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		need := fs.FileMode(0o001)
		if p == dir {
			need = 0o005
		}
		if st.Mode().Perm()&need != need {
			return fmt.Errorf("%s is closed to other users (mode %s): scripts run as a user of their own cannot reach %s; open it (chmod o+%s %s), move the skills, or set worker.scriptUser", p, st.Mode().Perm(), dir, map[bool]string{true: "rx", false: "x"}[p == dir], p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// SetAside keeps a user whose processes outlived its attempt from every
// later attempt of this worker (it stays claimed, so no other worker of
// the host takes it either).
func (p *UserPool) SetAside(uid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asideCount++
}
