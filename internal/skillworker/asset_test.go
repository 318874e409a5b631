package skillworker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestAssetPathsStayInTheSkill: an asset is listed only when its path
// names a file inside the skill's folder (data/ included).
func TestAssetPathsStayInTheSkill(t *testing.T) {
	dir := t.TempDir()
	skill := filepath.Join(dir, "sk")
	require.NoError(t, os.MkdirAll(filepath.Join(skill, "data"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(skill, "data", "map.png"), []byte("png"), 0o644))
	outside := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(outside, []byte("x"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(skill, "data", "link")))
	for path, ok := range map[string]bool{
		"data/map.png":                       true,
		filepath.Join(skill, "data/map.png"): true,
		"/etc/passwd":                        false,
		"../../etc/passwd":                   false,
		"../secret":                          false,
		"data/link":                          false, // a symlink out of the folder
		"data":                               false, // a folder
		"data/missing.png":                   false,
	} {
		a, got := checkAsset(skill, &messages.AssetEvent{AssetID: "a", Kind: "image", Path: path})
		require.Equal(t, ok, got, path)
		if ok {
			require.True(t, filepath.IsAbs(a.Path))
		}
	}
}

// TestAssetReadSafely: an asset listed by the worker reads back through
// client.ReadAsset as listed; after the script swaps the file for a link
// to a file outside the skill folder, or rewrites it, reading it is an
// error and never the other file's content.
func TestAssetReadSafely(t *testing.T) {
	dir := t.TempDir()
	skill := filepath.Join(dir, "sk")
	require.NoError(t, os.MkdirAll(filepath.Join(skill, "data"), 0o755))
	pic := filepath.Join(skill, "data", "pic.png")
	require.NoError(t, os.WriteFile(pic, []byte("png bytes"), 0o644))
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("the host's secret"), 0o644))

	a, ok := checkAsset(skill, &messages.AssetEvent{AssetID: "a", Kind: "image", Path: "data/pic.png"})
	require.True(t, ok)
	require.Equal(t, int64(len("png bytes")), a.Size)
	got, err := client.ReadAsset(a)
	require.NoError(t, err)
	require.Equal(t, "png bytes", string(got))

	// The swap: the listed file becomes a link out of the folder.
	require.NoError(t, os.Remove(pic))
	require.NoError(t, os.Symlink(secret, pic))
	got, err = client.ReadAsset(a)
	require.Error(t, err, "a link out of the skill folder is not followed")
	require.NotContains(t, string(got), "secret")

	// A link inside the folder to another file, or a rewrite: changed.
	require.NoError(t, os.Remove(pic))
	require.NoError(t, os.WriteFile(filepath.Join(skill, "data", "other"), []byte("other bytes"), 0o644))
	require.NoError(t, os.Symlink("other", pic))
	_, err = client.ReadAsset(a)
	require.ErrorIs(t, err, client.ErrAssetChanged)
	require.NoError(t, os.Remove(pic))
	require.NoError(t, os.WriteFile(pic, []byte("png bytez"), 0o644))
	_, err = client.ReadAsset(a)
	require.ErrorIs(t, err, client.ErrAssetChanged)
}
