package dice

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "1d20", want: "1d20"},
		{in: "d20", want: "1d20"},
		{in: " 2d6 + 3 ", want: "2d6+3"},
		{in: "4d6kh3", want: "4d6kh3"},
		{in: "4d6h3", want: "4d6kh3"},
		{in: "2d20kl1", want: "2d20kl1"},
		{in: "2D20L1", want: "2d20kl1"},
		{in: "1d8+1d6-1", want: "1d8+1d6-1"},
		{in: "-1+1d4", want: "-1+1d4"},
		{in: "5", want: "5"},
		{in: "", wantErr: "empty formula"},
		{in: "abc", wantErr: "expected a number or NdM"},
		{in: "1d", wantErr: "expected the number of sides"},
		{in: "1d1", wantErr: "sides must be 2..1000"},
		{in: "0d6", wantErr: "dice count must be 1..100"},
		{in: "101d6", wantErr: "dice count must be 1..100"},
		{in: "1d1001", wantErr: "sides must be 2..1000"},
		{in: "2d6kh3", wantErr: "keep must be 1..2"},
		{in: "2d6kh", wantErr: "expected how many dice to keep"},
		{in: "1d6 2", wantErr: "space inside or between terms"},
		{in: "1d6x", wantErr: "expected + or -"},
		{in: "1d6++2", wantErr: "expected a number or NdM"},
		{in: "9999999", wantErr: "number too large"},
		{in: "200000", wantErr: "constant 200000 is over"},
	}
	for _, tt := range tests {
		f, err := Parse(tt.in)
		if tt.wantErr != "" {
			require.Error(t, err, tt.in)
			require.True(t, errors.Is(err, ErrSyntax), tt.in)
			require.Contains(t, err.Error(), tt.wantErr, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, f.Text, tt.in)
	}
}

func TestRollWithinBoundsAndKeeps(t *testing.T) {
	t.Parallel()
	f, err := Parse("4d6kh3+2")
	require.NoError(t, err)
	lo, hi := f.Bounds()
	require.Equal(t, 5, lo)
	require.Equal(t, 20, hi)
	src := Seeded(42)
	for range 1000 {
		r := f.Roll(src)
		require.GreaterOrEqual(t, r.Total, lo)
		require.LessOrEqual(t, r.Total, hi)
		require.Len(t, r.Rolls, 4)
		require.Len(t, r.Terms[0].Kept, 3)
		min := 7
		for _, v := range r.Rolls {
			require.True(t, v >= 1 && v <= 6)
			if v < min {
				min = v
			}
		}
		sum := 0
		for _, v := range r.Rolls {
			sum += v
		}
		require.Equal(t, sum-min+2, r.Total, "keep highest 3 drops the lowest die")
	}
}

func TestSeededIsDeterministic(t *testing.T) {
	t.Parallel()
	f, err := Parse("10d20")
	require.NoError(t, err)
	require.Equal(t, f.Roll(Seeded(7)), f.Roll(Seeded(7)))
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1d20", "4d6kh3+2", "2d20kl1-1d4+3", "d", "100d1000kl100", "-5", "1d6 + + 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fm, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error does not wrap ErrSyntax: %v", err)
			}
			return
		}
		again, err := Parse(fm.Text)
		if err != nil || again.Text != fm.Text {
			t.Fatalf("normalised %q does not re-parse to itself: %v", fm.Text, err)
		}
		lo, hi := fm.Bounds()
		r := fm.Roll(Seeded(1))
		if r.Total < lo || r.Total > hi {
			t.Fatalf("%s rolled %d outside [%d,%d]", fm.Text, r.Total, lo, hi)
		}
	})
}

func ExampleParse() {
	f, err := Parse("4d6kh3 + 2")
	if err != nil {
		fmt.Println(err)
		return
	}
	lo, hi := f.Bounds()
	fmt.Println(f.Text, lo, hi)
	_, err = Parse("2d6kh3")
	fmt.Println(err)
	// Output:
	// 4d6kh3+2 5 20
	// bad dice formula: keep must be 1..2, got 3 at position 1 of "2d6kh3"
}
