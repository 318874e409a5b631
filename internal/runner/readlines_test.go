package runner

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// collect reads r's lines with readLines.
func collect(t testing.TB, in []byte, maxLine int) ([][]byte, *messages.ToolError) {
	var got [][]byte
	err := readLines(bytes.NewReader(in), maxLine, func(l []byte) *messages.ToolError {
		got = append(got, bytes.Clone(l))
		return nil
	})
	return got, err
}

// wantLines is what a line reader must return: every line, the last one
// even without a newline.
func wantLines(in []byte) [][]byte {
	if len(in) == 0 {
		return nil
	}
	parts := bytes.Split(in, []byte("\n"))
	if in[len(in)-1] == '\n' {
		parts = parts[:len(parts)-1]
	}
	return parts
}

func TestReadLinesBufferMultiples(t *testing.T) {
	for _, n := range []int{1, 64<<10 - 1, 64 << 10, 64<<10 + 1, 128 << 10, 3 * 64 << 10} {
		for _, tail := range []string{"", "\n"} {
			in := []byte(`{"version":"0","type":"log","level":"info","message":"a"}` + "\n" + strings.Repeat("x", n) + tail)
			got, err := collect(t, in, 1<<20)
			require.Nil(t, err)
			require.Equal(t, wantLines(in), got, "last line of %d bytes, newline %q", n, tail)
		}
	}
}

func TestReadLinesLimit(t *testing.T) {
	_, err := collect(t, []byte(strings.Repeat("x", 1001)+"\n"), 1000)
	require.NotNil(t, err)
	require.Equal(t, "line_too_long", err.Code)
	got, err := collect(t, []byte(strings.Repeat("x", 1000)), 1000)
	require.Nil(t, err)
	require.Len(t, got, 1)
}

// FuzzReadLines: every byte of the input comes back, split into lines
// exactly, whatever the line lengths against the reader's buffer.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte("a\nb\n"), 0)
	f.Add([]byte("no newline"), 0)
	f.Add([]byte("\n\n\n"), 0)
	f.Add([]byte("x"), 64<<10)
	f.Add([]byte("y\n"), 128<<10-1)
	f.Fuzz(func(t *testing.T, in []byte, pad int) {
		if pad < 0 || pad > 256<<10 {
			pad = 0
		}
		in = append(bytes.Repeat([]byte("z"), pad), in...)
		got, err := collect(t, in, 1<<20)
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		want := wantLines(in)
		if len(got) != len(want) {
			t.Fatalf("got %d lines, want %d", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d differs (%d vs %d bytes)", i, len(got[i]), len(want[i]))
			}
		}
	})
}
