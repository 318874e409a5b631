package skillworker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
		outcome, err := w.putAsset(ctx, obs, a)
		w.m.assets.WithLabelValues(outcome).Inc()
		if outcome == "tampered" {
			name := messages.AssetObjectName(a.SHA256)
			log.Error("skillworker: the asset store holds other content under this asset's name; it is not replaced (that needs a purge, which no worker may do): an operator removes its info (nats stream purge OBJ_narratoria_assets --subject SUBJECT) and the next attempt stores it",
				slog.String("assetId", a.AssetID), slog.String("object", name), slog.String("subject", assetInfoSubject(name)), slog.Any("error", err))
			continue
		}
		if err != nil {
			log.Warn("skillworker: asset not stored as an object; it keeps its worker path only", slog.String("assetId", a.AssetID),
				slog.String("outcome", outcome), slog.Any("error", err))
			continue
		}
		a.Object = messages.AssetObjectName(a.SHA256)
	}
}

// putAsset stores one asset and says how it went. Objects are named by
// their content, so the worker never writes over one: that would purge the
// old object's chunks, and no worker may purge the store (one credential
// could then wipe it). An object already there is checked, as a reader
// checks it, by reading it through (a chunk at a time): if it is this
// content it is "present"; if not (another writer put other bytes under
// the name) it is "tampered" and left for an operator. A deleted object
// is written again (that needs no purge).
func (w *Worker) putAsset(ctx context.Context, obs jetstream.ObjectStore, a *messages.Asset) (string, error) {
	if a.Size > w.bus.AssetMaxSize {
		return "too_large", fmt.Errorf("%d bytes, over the %d-byte limit of an asset object (nats.assetMaxSize)", a.Size, w.bus.AssetMaxSize)
	}
	name := messages.AssetObjectName(a.SHA256)
	info, err := obs.GetInfo(ctx, name)
	switch {
	case err == nil && int64(info.Size) != a.Size:
		return "tampered", fmt.Errorf("object %s holds %d bytes, not %d", name, info.Size, a.Size)
	case err == nil:
		if _, _, err := w.assetReader.CopyAssetObject(ctx, name, io.Discard); err != nil {
			if errors.Is(err, client.ErrAssetChanged) {
				return "tampered", err
			}
			return "failed", fmt.Errorf("check the object already stored: %w", err)
		}
		return "present", nil
	case !errors.Is(err, jetstream.ErrObjectNotFound):
		return "failed", err
	}
	// Read as any reader of the path would: beneath the skill folder,
	// and only if it is still the content listed.
	data, err := client.ReadAsset(*a)
	if err != nil {
		return "changed", err
	}
	meta := jetstream.ObjectMeta{Name: name, Description: a.Kind, Headers: nats.Header{"Content-Type": []string{a.MediaType}}}
	if err := bus.PutObject(ctx, w.js, messages.BucketAssets, meta, bytes.NewReader(data)); err != nil {
		return "failed", err
	}
	return "stored", nil
}

// assetInfoSubject is the subject of an asset object's info: purging it
// (an operator's nats stream purge OBJ_narratoria_assets --subject ...)
// removes the object, whose chunks then age out.
func assetInfoSubject(name string) string { return bus.ObjectInfoSubject(messages.BucketAssets, name) }

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
