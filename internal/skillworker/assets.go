package skillworker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// assetStoreTimeout bounds storing one asset file.
const assetStoreTimeout = 30 * time.Second

// storeAssets puts each asset file the attempt listed into the asset
// object store, named by its content, and records the object's name on
// the asset. A file is read beneath its skill folder (no link followed
// out) and stored only if it is still the content listed; one already in
// the store (the same attempt redelivered, or the same picture drawn
// again) is not sent twice. An asset that cannot be stored keeps its
// path only: the tool's outcome does not depend on it, and the log and
// narratoria_skillworker_assets_total say why.
func (w *Worker) storeAssets(assets []messages.Asset, log *slog.Logger) {
	if len(assets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), assetStoreTimeout)
	defer cancel()
	obs, err := w.assetStore(ctx)
	if err != nil {
		w.m.assets.WithLabelValues("failed").Add(float64(len(assets)))
		log.Warn("skillworker: asset object store unreachable; assets keep their worker paths only", slog.Any("error", err))
		return
	}
	for i := range assets {
		a := &assets[i]
		outcome, err := putAsset(ctx, obs, a)
		w.m.assets.WithLabelValues(outcome).Inc()
		if err != nil {
			log.Warn("skillworker: asset not stored as an object; it keeps its worker path only", slog.String("assetId", a.AssetID),
				slog.String("outcome", outcome), slog.Any("error", err))
			continue
		}
		a.Object = messages.AssetObjectName(a.SHA256)
	}
}

// putAsset stores one asset and says how it went.
func putAsset(ctx context.Context, obs jetstream.ObjectStore, a *messages.Asset) (string, error) {
	if a.Size > bus.AssetMaxSize {
		return "too_large", fmt.Errorf("%d bytes, over the %d-byte limit of an asset object", a.Size, bus.AssetMaxSize)
	}
	name := messages.AssetObjectName(a.SHA256)
	if info, err := obs.GetInfo(ctx, name); err == nil && !info.Deleted && int64(info.Size) == a.Size {
		return "present", nil
	}
	// Read as any reader of the path would: beneath the skill folder,
	// and only if it is still the content listed.
	data, err := client.ReadAsset(*a)
	if err != nil {
		return "changed", err
	}
	meta := jetstream.ObjectMeta{Name: name, Description: a.Kind, Headers: nats.Header{"Content-Type": []string{a.MediaType}}}
	if _, err := obs.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return "failed", err
	}
	return "stored", nil
}

// assetStore opens the asset object store once and keeps its handle.
func (w *Worker) assetStore(ctx context.Context) (jetstream.ObjectStore, error) {
	if p := w.assets.Load(); p != nil {
		return *p, nil
	}
	obs, err := w.js.ObjectStore(ctx, messages.BucketAssets)
	if err != nil {
		return nil, err
	}
	w.assets.Store(&obs)
	return obs, nil
}
