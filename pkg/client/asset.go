package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// ErrAssetChanged is matched by ReadAsset's error when the file is not the
// one the worker listed: its content or size differs (a file swapped, or
// written to, after the script named it).
var ErrAssetChanged = errors.New("asset changed since it was listed")

// ReadAsset reads an asset of a result or narration from a file system
// the skill folders are shared on, safely: the path is opened beneath the
// asset's skill folder (a.Root) following no link out of it, at the moment
// of reading, and the content must be what the worker hashed when the
// script listed it (a.SHA256, a.Size). A link swapped in to reach another
// file, or a file rewritten since, is an error (ErrAssetChanged for the
// latter), never its content.
func ReadAsset(a messages.Asset) ([]byte, error) {
	if a.Root == "" || a.SHA256 == "" {
		return nil, fmt.Errorf("asset %s: no root or digest (listed by a worker older than this client): not read", a.AssetID)
	}
	rel, err := filepath.Rel(a.Root, a.Path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("asset %s: %s is not inside %s", a.AssetID, a.Path, a.Root)
	}
	root, err := os.OpenRoot(a.Root)
	if err != nil {
		return nil, fmt.Errorf("asset %s: %w", a.AssetID, err)
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("asset %s: %w", a.AssetID, err)
	}
	defer f.Close()
	var buf bytes.Buffer
	// One byte more than listed shows a file that grew.
	if _, err := io.Copy(&buf, io.LimitReader(f, a.Size+1)); err != nil {
		return nil, fmt.Errorf("asset %s: %w", a.AssetID, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if int64(buf.Len()) != a.Size || hex.EncodeToString(sum[:]) != a.SHA256 {
		return nil, fmt.Errorf("asset %s (%s): %w", a.AssetID, a.Path, ErrAssetChanged)
	}
	return buf.Bytes(), nil
}

// ErrNoAssetObject is matched by Asset's error for an asset the worker
// could not store as an object (its Object is empty; the worker logged
// why): only its worker path is known.
var ErrNoAssetObject = errors.New("asset has no object")

// Asset fetches an asset of a result or narration from the asset object
// store, from any host that reaches NATS: no file system is shared with
// the worker. The content is checked against the asset's digest (and the
// object's name, which is that digest), so an object overwritten since is
// an error (ErrAssetChanged), never its content.
func (c *Client) Asset(ctx context.Context, a messages.Asset) ([]byte, error) {
	if a.Object == "" {
		return nil, fmt.Errorf("asset %s: %w", a.AssetID, ErrNoAssetObject)
	}
	data, _, err := c.AssetObject(ctx, a.Object)
	if err != nil {
		return nil, fmt.Errorf("asset %s: %w", a.AssetID, err)
	}
	sum := sha256.Sum256(data)
	if a.SHA256 != "" && hex.EncodeToString(sum[:]) != a.SHA256 {
		return nil, fmt.Errorf("asset %s (object %s): %w", a.AssetID, a.Object, ErrAssetChanged)
	}
	return data, nil
}

// AssetObject fetches an object of the asset store by name
// ("sha256-<hex>", messages.AssetObjectName) and returns its content and
// media type. The content must hash to the name: anything else is
// ErrAssetChanged.
func (c *Client) AssetObject(ctx context.Context, name string) ([]byte, string, error) {
	want, ok := strings.CutPrefix(name, "sha256-")
	if !ok || len(want) != 64 {
		return nil, "", fmt.Errorf("object name %q: an asset object is named sha256-<64 hex digits>", name)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	obs, err := c.js.ObjectStore(ctx, messages.BucketAssets)
	if err != nil {
		return nil, "", fmt.Errorf("open the asset store %s: %w", messages.BucketAssets, err)
	}
	r, err := obs.Get(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, "", fmt.Errorf("object %s: not in %s (expired after the history window, or never stored): %w", name, messages.BucketAssets, err)
		}
		return nil, "", fmt.Errorf("object %s: %w", name, err)
	}
	defer r.Close()
	info, err := r.Info()
	if err != nil {
		return nil, "", fmt.Errorf("object %s: %w", name, err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, "", fmt.Errorf("object %s: %w", name, err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != want {
		return nil, "", fmt.Errorf("object %s: %w", name, ErrAssetChanged)
	}
	return data, info.Headers.Get("Content-Type"), nil
}
