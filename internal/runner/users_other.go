//go:build !linux

package runner

import "errors"

// UserPool gives each attempt a user of its own; Linux only.
type UserPool struct {
	// Base is the first user ID; Count how many IDs the range spans.
	Base, Count int
	// GID is the group of every attempt's user.
	GID int
}

// Defaults of UserPool (Linux only).
const (
	// ScriptUIDBaseDefault is the first user ID of the attempts' users.
	ScriptUIDBaseDefault = 59000
	// ScriptUIDCountDefault is how many IDs the range spans.
	ScriptUIDCountDefault = 1000
)

// NewUserPool makes a pool; elsewhere than Linux it cannot be used.
func NewUserPool(base, count int) *UserPool { return &UserPool{Base: base, Count: count, GID: base} }

// Acquire fails off Linux.
func (p *UserPool) Acquire() (int, error) { return 0, errors.New("script users: Linux only") }

// Release does nothing off Linux.
func (p *UserPool) Release(int) {}

// Close does nothing off Linux.
func (p *UserPool) Close() {}

func (p *UserPool) shareDataDir(string) error { return nil }

// ReachableByOthers is nil off Linux, where scripts run as the worker.
func ReachableByOthers(string) error { return nil }

// SetAside does nothing off Linux.
func (p *UserPool) SetAside(int) {}
