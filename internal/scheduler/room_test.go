package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoomAdmitsUpToTheReserve: a plan fits while the bucket's size as
// last read, plus what was written since, plus its record stays within
// the 80 % new plans may fill — whatever plans wrote before (nothing is
// learned, nothing held for the plans running); an unbounded bucket takes
// every plan.
func TestRoomAdmitsUpToTheReserve(t *testing.T) {
	r := &room{max: 10000, used: 7000}
	_, _, _, ok := r.fits(1000)
	require.True(t, ok, "8,000 bytes of 10,000: at the reserve")
	_, _, _, ok = r.fits(1001)
	require.False(t, ok, "past the 8,000 bytes new plans may fill")
	r.wrote.Add(500)
	used, max, _, ok := r.fits(600)
	require.False(t, ok, "what was written since the last read counts")
	require.Equal(t, int64(7500), used)
	require.Equal(t, int64(10000), max)
	_, _, _, ok = r.fits(500)
	require.True(t, ok)

	require.True(t, func() bool { _, _, _, ok := (&room{used: 1 << 40}).fits(1 << 20); return ok }(), "no limit")
}
