package skillworker

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
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

// TestWorkerNeverWritesOverAnAsset, on a real NATS server: the worker
// stores a new asset; the same content again is found present and not
// sent; content another writer put under the asset's name (a hostile
// worker) is found tampered and left as it is — replacing it would purge
// its chunks, which no worker may do — and the worker never asks for a
// purge; a deleted object is stored again; a file over nats.assetMaxSize
// is not stored.
func TestWorkerNeverWritesOverAnAsset(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	purges, err := srv.NC.SubscribeSync("$JS.API.STREAM.PURGE.>")
	require.NoError(t, err)
	small := srv.Bus
	small.AssetMaxSize = 1 << 10
	w, err := New(srv.Connect(t), Config{SkillsDir: t.TempDir(), WatchInterval: -1}, Options{Bus: small})
	require.NoError(t, err)
	obs, err := srv.JS.ObjectStore(ctx, messages.BucketAssets)
	require.NoError(t, err)
	st, err := srv.JS.Stream(ctx, "OBJ_"+messages.BucketAssets)
	require.NoError(t, err)
	lastSeq := func() uint64 {
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.State.LastSeq
	}
	skill := t.TempDir()
	asset := func(file string, content []byte) *messages.Asset {
		require.NoError(t, os.WriteFile(filepath.Join(skill, file), content, 0o644))
		a, ok := checkAsset(skill, &messages.AssetEvent{AssetID: file, Kind: "image", MediaType: "image/png", Path: file})
		require.True(t, ok)
		return &a
	}
	// put stores an asset as the worker does, and checks it asked for no
	// purge meanwhile.
	put := func(a *messages.Asset) (string, error) {
		for {
			if _, err := purges.NextMsg(50 * time.Millisecond); err != nil {
				break // what the test's own deletes purged
			}
		}
		outcome, err := w.putAsset(ctx, obs, a)
		_, perr := purges.NextMsg(100 * time.Millisecond)
		require.ErrorIs(t, perr, nats.ErrTimeout, "the worker asked for a purge")
		return outcome, err
	}

	pic := asset("pic.png", []byte("a picture"))
	outcome, err := put(pic)
	require.NoError(t, err)
	require.Equal(t, "stored", outcome)
	seq := lastSeq()
	outcome, err = put(asset("again.png", []byte("a picture")))
	require.NoError(t, err)
	require.Equal(t, "present", outcome)
	require.Equal(t, seq, lastSeq(), "nothing written")

	// A hostile writer got there first with other bytes of the same size
	// (and again with another size).
	for _, c := range []struct{ real, forged string }{{"the real picture", "the fake picture"}, {"another real one", "short"}} {
		forged := c.forged
		target := asset("target.png", []byte(c.real))
		name := messages.AssetObjectName(target.SHA256)
		// Not with the client's Put: the store refuses its roll-up header
		// (one could wipe the store); laid out as a worker does.
		_, err = obs.PutBytes(ctx, name, []byte(forged))
		require.ErrorContains(t, err, "rollup not permitted")
		require.NoError(t, bus.PutObject(ctx, srv.JS, messages.BucketAssets, jetstream.ObjectMeta{Name: name}, strings.NewReader(forged)))
		seq = lastSeq()
		outcome, err = put(target)
		require.Error(t, err)
		require.Equal(t, "tampered", outcome)
		require.Equal(t, seq, lastSeq(), "the tampered object is left as it is")
		got, err := obs.GetBytes(ctx, messages.AssetObjectName(target.SHA256))
		require.NoError(t, err)
		require.Equal(t, forged, string(got))
		// An operator removes its info (the purge the worker's log names;
		// nats object rm needs a roll-up); the next attempt stores the
		// asset.
		require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject(assetInfoSubject(name))))
		outcome, err = put(target)
		require.NoError(t, err)
		require.Equal(t, "stored", outcome)
		got, err = obs.GetBytes(ctx, messages.AssetObjectName(target.SHA256))
		require.NoError(t, err)
		require.Equal(t, c.real, string(got))
	}

	outcome, err = put(asset("big.png", bytes.Repeat([]byte("x"), 2<<10)))
	require.Error(t, err)
	require.Equal(t, "too_large", outcome)
}
