package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// TestLandlockConfinesScripts: a hostile script, confined, tries to read
// another skill's folder, to write outside its data and temporary
// folders, to list /dev (and so /dev/shm, which every process shares),
// and to read the system's files and /dev/urandom. The kernel refuses the
// first three and allows the rest; unconfined, every one succeeds. Skipped where
// the kernel has no Landlock (the skip says so).
func TestLandlockConfinesScripts(t *testing.T) {
	abi := LandlockABI()
	if abi == 0 {
		t.Skip("this kernel offers no Landlock: scripts cannot be confined here")
	}
	t.Logf("Landlock ABI %d", abi)
	root := t.TempDir()
	mine, other := filepath.Join(root, "mine"), filepath.Join(root, "other")
	for _, d := range []string{filepath.Join(mine, "data"), filepath.Join(other, "data")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(other, "data", "secret"), []byte("other skill's secret"), 0o644))
	outside := filepath.Join(root, "outside")
	// Each probe prints yes when the act succeeded.
	body := `try() { if "$@" >/dev/null 2>&1; then printf yes; else printf no; fi; }
r_other=$(try cat ` + filepath.Join(other, "data", "secret") + `)
l_other=$(try ls ` + other + `)
w_out=$(try sh -c 'echo x > ` + outside + `')
w_data=$(try sh -c 'echo x > data/out')
w_tmp=$(try sh -c 'echo x > "$TMPDIR/t"')
r_etc=$(try cat /etc/hostname)
l_dev=$(try ls /dev/)
r_rand=$(try head -c 4 /dev/urandom)
printf '{"version":"0","type":"done","ok":true,"output":{"readOther":"%s","listOther":"%s","writeOutside":"%s","writeData":"%s","writeTmp":"%s","readEtc":"%s","listDev":"%s","readRandom":"%s"}}\n' \
  "$r_other" "$l_other" "$w_out" "$w_data" "$w_tmp" "$r_etc" "$l_dev" "$r_rand"`
	path := writeScript(t, mine, "probe", body)
	probe := func(r *ProcessRunner) map[string]string {
		res := r.Run(context.Background(), invocation(mine, path, 0), nil)
		require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
		var out map[string]string
		require.NoError(t, json.Unmarshal(res.Done.Output, &out))
		_ = os.Remove(outside)
		return out
	}
	require.Equal(t, map[string]string{"readOther": "yes", "listOther": "yes", "writeOutside": "yes", "writeData": "yes", "writeTmp": "yes", "readEtc": "yes", "listDev": "yes", "readRandom": "yes"},
		probe(&ProcessRunner{}), "unconfined, the script can do everything")
	// /dev is not listed, and so not /dev/shm, a folder every process
	// shares; the devices scripts use are read one by one.
	require.Equal(t, map[string]string{"readOther": "no", "listOther": "no", "writeOutside": "no", "writeData": "yes", "writeTmp": "yes", "readEtc": "yes", "listDev": "no", "readRandom": "yes"},
		probe(&ProcessRunner{Landlock: true}), "confined: its own folders and the system's files only")
}
