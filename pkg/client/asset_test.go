package client_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestAssetObjectsCheckedWhileStreaming, through an ordered consumer (the
// default, what the shipped game user may do) and through direct gets:
// an object is written to the writer as it is read and comes whole when
// its content hashes to its name; content put under another content's name
// (as any writer of the store can) is ErrAssetChanged and the writer never
// gets all of it; an object over the limit is ErrAssetTooLarge with
// nothing written; an asset whose digest is not its object's is refused.
func TestAssetObjectsCheckedWhileStreaming(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	put := func(name string, data []byte) {
		// Laid out as a worker lays an object out (the store refuses the
		// client Put's roll-up header).
		require.NoError(t, bus.PutObject(ctx, srv.JS, messages.BucketAssets, jetstream.ObjectMeta{Name: name, Headers: nats.Header{"Content-Type": []string{"image/png"}}},
			bytes.NewReader(data)))
	}
	nameOf := func(data []byte) string {
		sum := sha256.Sum256(data)
		return messages.AssetObjectName(hex.EncodeToString(sum[:]))
	}
	good := bytes.Repeat([]byte("a picture "), 50_000) // 500 KB: four chunks
	put(nameOf(good), good)
	forged := bytes.Repeat([]byte("forged "), 50_000)
	wanted := []byte("what the name says")
	put(nameOf(wanted), forged)
	big := bytes.Repeat([]byte("b"), 2<<20)
	put(nameOf(big), big)

	for mode, opts := range map[string][]client.Option{
		"consumer": {client.WithAssetMaxSize(1 << 20)},
		"direct":   {client.WithAssetMaxSize(1 << 20), client.WithDirectAssetReads()},
	} {
		t.Run(mode, func(t *testing.T) {
			c, err := client.New(srv.NC, opts...)
			require.NoError(t, err)
			var w bytes.Buffer
			info, n, err := c.CopyAssetObject(ctx, nameOf(good), &w)
			require.NoError(t, err)
			require.Equal(t, client.AssetObjectInfo{Name: nameOf(good), MediaType: "image/png", Size: int64(len(good))}, info)
			require.EqualValues(t, len(good), n)
			require.Equal(t, good, w.Bytes())

			w.Reset()
			_, n, err = c.CopyAssetObject(ctx, nameOf(wanted), &w)
			require.ErrorIs(t, err, client.ErrAssetChanged)
			require.Less(t, n, int64(len(forged)), "never the whole of the forged content")
			require.NotEqual(t, forged, w.Bytes())

			w.Reset()
			_, n, err = c.CopyAssetObject(ctx, nameOf(big), &w)
			require.ErrorIs(t, err, client.ErrAssetTooLarge)
			require.Zero(t, n)
			require.Zero(t, w.Len())

			data, err := c.Asset(ctx, messages.Asset{AssetID: "pic", Object: nameOf(good), SHA256: strings.TrimPrefix(nameOf(good), "sha256-")})
			require.NoError(t, err)
			require.Equal(t, good, data)
			_, err = c.Asset(ctx, messages.Asset{AssetID: "pic", Object: nameOf(good), SHA256: strings.TrimPrefix(nameOf(wanted), "sha256-")})
			require.ErrorIs(t, err, client.ErrAssetChanged, "the asset's digest names another object")
			_, _, err = c.AssetObject(ctx, messages.AssetObjectName(strings.Repeat("0", 64)))
			require.ErrorIs(t, err, jetstream.ErrObjectNotFound)
			_, _, err = c.AssetObject(ctx, "sha256-XYZ")
			require.ErrorContains(t, err, "sha256-<64 lower-case hex digits>")
		})
	}
}
