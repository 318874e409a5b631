//go:build !linux

package skillworker

// protectProcess has no protection to offer off Linux.
func protectProcess() []string { return nil }
