package skillworker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

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
