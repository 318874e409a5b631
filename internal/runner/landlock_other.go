//go:build !linux

package runner

// Confinement says which files a script may touch once Landlock confines
// it (Linux only).
type Confinement struct {
	// Read may be read, listed and executed.
	Read []string `json:"read"`
	// Write may also be written, created and removed.
	Write []string `json:"write"`
}

// LandlockABI is 0: Landlock is Linux's.
func LandlockABI() int { return 0 }
