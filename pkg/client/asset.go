package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
