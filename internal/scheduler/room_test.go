package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoomLearnsWhatPlansWrite: what a plan is expected to write follows
// plans that wrote more than expected at once (half-way each time) and
// plans that wrote less slowly, never under twice the record; a plan that
// did not finish here (its partition moved) teaches nothing; and what
// running plans hold is released whatever the way they stop.
func TestRoomLearnsWhatPlansWrite(t *testing.T) {
	r := &room{growth: growthDefault}
	require.Equal(t, int64(4000), r.expect(1000))

	r.hold(r.expect(1000))
	r.hold(r.expect(1000))
	require.Equal(t, int64(8000), r.held)

	r.done(1000, 4000, 20000, true) // wrote 20× its record
	require.Equal(t, 12.0, r.growth, "half-way to 20× at once")
	require.Equal(t, int64(4000), r.held)

	r.done(1000, 4000, 100000, false) // moved away: nothing learned
	require.Equal(t, 12.0, r.growth)
	require.Zero(t, r.held)

	for range 100 {
		r.hold(r.expect(1000))
		r.done(1000, r.expect(1000), 1000, true) // wrote only its record
	}
	require.Equal(t, growthMin, r.growth, "slowly down, to the floor")
	require.Zero(t, r.held)

	r.growth = 10
	r.done(1000, 0, 2000, true)
	require.Equal(t, 9.5, r.growth, "a sixteenth of the way down")

	// A bounded bucket: the check and the hold are one step, so what two
	// intakes admit together fits (80 % of 10,000 bytes here).
	b := &room{growth: growthDefault, max: 10000}
	_, _, _, ok := b.hold(5000)
	require.True(t, ok)
	_, _, _, ok = b.hold(5000)
	require.False(t, ok, "5,000 more would pass the 8,000 bytes new plans may fill")
	require.Equal(t, int64(5000), b.held, "a plan refused holds nothing")
	b.wrote.Add(2000)
	_, _, _, ok = b.hold(1001)
	require.False(t, ok, "what was written since the last read counts")
	_, _, _, ok = b.hold(1000)
	require.True(t, ok)
}
