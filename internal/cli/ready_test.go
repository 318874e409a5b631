package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPureReadyFileIsWholeOnceItExists: a script (or a test) that waits for
// the ready file to exist and then reads it gets every line, never an empty
// or cut file — up writes it beside and renames it into place. A fresh-clone
// make test once read the file between its creation and its write and ran
// the nats CLI against an empty URL.
func TestPureReadyFileIsWholeOnceItExists(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ready")
	cons := upConsoles{url: "http://127.0.0.1:8080", tenants: []string{"http://127.0.0.1:8081", "http://127.0.0.1:8082"}}
	want := "nats://127.0.0.1:4222\nhttp://127.0.0.1:8080\nhttp://127.0.0.1:8081\nhttp://127.0.0.1:8082\n"
	for i := 0; i < 300; i++ {
		require.NoError(t, os.RemoveAll(path))
		done := make(chan struct{})
		go func() {
			defer close(done)
			writeReadyFile(path, "nats://127.0.0.1:4222", cons, slog.New(slog.DiscardHandler))
		}()
		for {
			b, err := os.ReadFile(path)
			if err == nil {
				require.Equal(t, want, string(b), "round %d: the ready file read as soon as it exists", i)
				break
			}
		}
		<-done
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing but the ready file is left beside it")
}
