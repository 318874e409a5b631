package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
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

// ErrAssetTooLarge is matched by the error of a fetch of an asset object
// larger than the client's limit (WithAssetMaxSize): refused before any
// of it is read.
var ErrAssetTooLarge = errors.New("asset object over the size limit")

// WithAssetMaxSize bounds the asset objects the client reads: a larger one
// is ErrAssetTooLarge, refused before any of it is read. Default
// messages.AssetMaxSizeDefault (16 MiB), what the workers store at most
// unless the deployment's nats.assetMaxSize says otherwise.
func WithAssetMaxSize(n int64) Option { return func(c *Client) { c.assetMax = n } }

// WithDirectAssetReads makes the client read an asset object one chunk at
// a time through the asset stream's direct get API
// ($JS.API.DIRECT.GET.OBJ_narratoria_assets), holding one chunk (128 KiB)
// in memory whatever the reader's speed. By default it reads through an
// ordered consumer (what the shipped game user may do), which the server
// may run up to 32 MiB ahead of a slow reader. The credential needs that
// subject.
func WithDirectAssetReads() Option { return func(c *Client) { c.assetDirect = true } }

// AssetObjectInfo describes an asset object.
type AssetObjectInfo struct {
	// Name is the object's name, sha256-<hex of the content>.
	Name string
	// MediaType is what the worker stored it as (empty if it said none).
	MediaType string
	// Size is its size in bytes.
	Size int64
}

// Asset fetches an asset of a result or narration from the asset object
// store, from any host that reaches NATS: no file system is shared with
// the worker. The content is checked against the asset's digest (and the
// object's name, which is that digest), so an object overwritten since is
// an error (ErrAssetChanged), never its content. It is read whole, up to
// the client's limit (WithAssetMaxSize); CopyAsset streams it instead.
func (c *Client) Asset(ctx context.Context, a messages.Asset) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := c.CopyAsset(ctx, a, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CopyAsset writes an asset of a result or narration to w as it reads it
// from the asset object store, checking it on the way (OpenAssetObject):
// w never gets the whole of content that is not the asset's, and the error
// says why (ErrAssetChanged, ErrAssetTooLarge).
func (c *Client) CopyAsset(ctx context.Context, a messages.Asset, w io.Writer) (int64, error) {
	if a.Object == "" {
		return 0, fmt.Errorf("asset %s: %w", a.AssetID, ErrNoAssetObject)
	}
	if a.SHA256 != "" && a.Object != messages.AssetObjectName(a.SHA256) {
		return 0, fmt.Errorf("asset %s (object %s): %w", a.AssetID, a.Object, ErrAssetChanged)
	}
	_, n, err := c.CopyAssetObject(ctx, a.Object, w)
	if err != nil {
		return n, fmt.Errorf("asset %s: %w", a.AssetID, err)
	}
	return n, nil
}

// AssetObject fetches an object of the asset store by name
// ("sha256-<hex>", messages.AssetObjectName) and returns its content and
// media type. The content must hash to the name: anything else is
// ErrAssetChanged. It is read whole, up to the client's limit
// (WithAssetMaxSize); CopyAssetObject streams it instead.
func (c *Client) AssetObject(ctx context.Context, name string) ([]byte, string, error) {
	var buf bytes.Buffer
	info, _, err := c.CopyAssetObject(ctx, name, &buf)
	if err != nil {
		return nil, "", err
	}
	return buf.Bytes(), info.MediaType, nil
}

// CopyAssetObject writes an object of the asset store to w as it reads
// it, checking it on the way (OpenAssetObject), and returns what it is and
// how many bytes w got. On an error w has not got the whole object.
func (c *Client) CopyAssetObject(ctx context.Context, name string, w io.Writer) (AssetObjectInfo, int64, error) {
	r, err := c.OpenAssetObject(ctx, name)
	if err != nil {
		return AssetObjectInfo{}, 0, err
	}
	defer r.Close()
	n, err := io.Copy(w, r)
	return r.Info(), n, err
}

// OpenAssetObject opens an object of the asset store by name
// ("sha256-<hex>") to read it as a stream. An object larger than the
// client's limit (WithAssetMaxSize) is ErrAssetTooLarge, before any of it
// is read. The reader hashes what it reads and holds the object's last
// byte back until the whole content has been read and hashes to the name:
// content that does not is an error (ErrAssetChanged), so whoever copies
// the reader somewhere never gets all of it. ctx bounds the whole read;
// the reader must be closed.
func (c *Client) OpenAssetObject(ctx context.Context, name string) (*AssetObjectReader, error) {
	want, ok := strings.CutPrefix(name, "sha256-")
	sum, err := hex.DecodeString(want)
	if !ok || err != nil || len(sum) != sha256.Size || strings.ToLower(want) != want {
		return nil, fmt.Errorf("object name %q: an asset object is named sha256-<64 lower-case hex digits>", name)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &AssetObjectReader{want: sum, max: c.assetMax, h: sha256.New(), cancel: cancel}
	open := c.openConsumer
	if c.assetDirect {
		open = c.openDirect
	}
	if err := open(ctx, name, r); err != nil {
		cancel()
		return nil, err
	}
	return r, nil
}

// store opens the asset object store.
func (c *Client) store(ctx context.Context) (jetstream.ObjectStore, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	obs, err := c.js.ObjectStore(ctx, messages.BucketAssets)
	if err != nil {
		return nil, fmt.Errorf("open the asset store %s: %w", messages.BucketAssets, err)
	}
	return obs, nil
}

// objectError names an error of looking an object up.
func objectError(name string, err error) error {
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("object %s: not in %s (expired after the history window, or never stored): %w", name, messages.BucketAssets, err)
	}
	return fmt.Errorf("object %s: %w", name, err)
}

// openConsumer reads the object through the object store's ordered
// consumer.
func (c *Client) openConsumer(ctx context.Context, name string, r *AssetObjectReader) error {
	obs, err := c.store(ctx)
	if err != nil {
		return err
	}
	res, err := obs.Get(ctx, name)
	if err != nil {
		return objectError(name, err)
	}
	info, err := res.Info()
	if err == nil {
		err = r.describe(name, info)
	}
	if err != nil {
		_ = res.Close()
		return err
	}
	r.src, r.closeSrc = res, func() { _ = res.Close() }
	return nil
}

// openDirect reads the object's chunks one by one through direct gets.
func (c *Client) openDirect(ctx context.Context, name string, r *AssetObjectReader) error {
	obs, err := c.store(ctx)
	if err != nil {
		return err
	}
	ictx, cancel := c.bounded(ctx)
	info, err := obs.GetInfo(ictx, name)
	cancel()
	if err != nil {
		return objectError(name, err)
	}
	if err := r.describe(name, info); err != nil {
		return err
	}
	r.src = &chunkReader{c: c, ctx: ctx, left: int64(info.Chunks),
		subject: "$O." + messages.BucketAssets + ".C." + info.NUID, api: "$JS.API.DIRECT.GET.OBJ_" + messages.BucketAssets}
	return nil
}

// AssetObjectReader reads one asset object as a stream, checking it as it
// goes (Client.OpenAssetObject).
type AssetObjectReader struct {
	info     AssetObjectInfo
	want     []byte
	max      int64
	h        hash.Hash
	src      io.Reader
	closeSrc func()
	cancel   context.CancelFunc

	chunk []byte // the buffer buf lives in
	buf   []byte // read and hashed, not yet returned from off on
	off   int
	n     int64 // bytes read from src
	done  bool  // src ended and the content is the name's
	err   error
}

// describe checks the object's metadata before any of it is read.
func (r *AssetObjectReader) describe(name string, info *jetstream.ObjectInfo) error {
	r.info = AssetObjectInfo{Name: name, Size: int64(info.Size)}
	if info.Headers != nil {
		r.info.MediaType = info.Headers.Get("Content-Type")
	}
	if info.Deleted {
		return objectError(name, jetstream.ErrObjectNotFound)
	}
	if r.max > 0 && r.info.Size > r.max {
		return fmt.Errorf("object %s: %d bytes, over the %d-byte limit (nats.assetMaxSize): %w", name, r.info.Size, r.max, ErrAssetTooLarge)
	}
	return nil
}

// Info says what the object is (its metadata, as stored).
func (r *AssetObjectReader) Info() AssetObjectInfo { return r.info }

// Read reads the object. Its last byte comes only once the whole content
// has been read and hashes to the object's name; content that does not is
// ErrAssetChanged, content longer than its metadata or the limit too.
func (r *AssetObjectReader) Read(p []byte) (int, error) {
	for {
		if r.err != nil {
			return 0, r.err
		}
		avail := len(r.buf) - r.off
		if !r.done {
			avail-- // the last byte read waits for the check
		}
		if avail > 0 {
			n := copy(p, r.buf[r.off:r.off+avail])
			r.off += n
			return n, nil
		}
		if r.done {
			return 0, io.EOF
		}
		r.fill()
	}
}

// assetReadBuffer is how much the reader takes from its source at once.
const assetReadBuffer = 32 << 10

// fill reads the next piece of the object behind the byte held back.
func (r *AssetObjectReader) fill() {
	if r.chunk == nil {
		r.chunk = make([]byte, assetReadBuffer+1)
	}
	held := copy(r.chunk, r.buf[r.off:]) // at most the one byte held back
	n, err := r.src.Read(r.chunk[held:])
	r.h.Write(r.chunk[held : held+n])
	r.n += int64(n)
	r.buf, r.off = r.chunk[:held+n], 0
	switch {
	case r.n > r.info.Size || (r.max > 0 && r.n > r.max):
		r.err = fmt.Errorf("object %s: more than the %d bytes it says it holds: %w", r.info.Name, r.info.Size, ErrAssetChanged)
	case err == io.EOF:
		if r.n != r.info.Size || !bytes.Equal(r.h.Sum(nil), r.want) {
			r.err = fmt.Errorf("object %s: its content does not hash to its name: %w", r.info.Name, ErrAssetChanged)
			return
		}
		r.done = true
	case errors.Is(err, jetstream.ErrDigestMismatch):
		r.err = fmt.Errorf("object %s: %w (%v)", r.info.Name, ErrAssetChanged, err)
	case err != nil:
		r.err = fmt.Errorf("object %s: %w", r.info.Name, err)
	}
}

// Close ends the read (and the consumer or requests behind it).
func (r *AssetObjectReader) Close() error {
	if r.closeSrc != nil {
		r.closeSrc()
	}
	r.cancel()
	return nil
}

// chunkReader reads an object's chunks in order with direct gets of the
// next message on its chunk subject, one chunk in memory at a time.
type chunkReader struct {
	c       *Client
	ctx     context.Context
	api     string
	subject string
	seq     uint64
	left    int64 // chunks still to read
	data    []byte
}

func (cr *chunkReader) Read(p []byte) (int, error) {
	for len(cr.data) == 0 {
		if cr.left == 0 {
			return 0, io.EOF
		}
		if err := cr.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, cr.data)
	cr.data = cr.data[n:]
	return n, nil
}

// next fetches the next chunk.
func (cr *chunkReader) next() error {
	body, _ := json.Marshal(map[string]any{"seq": cr.seq, "next_by_subj": cr.subject})
	ctx, cancel := cr.c.bounded(cr.ctx)
	defer cancel()
	m, err := cr.c.nc.RequestWithContext(ctx, cr.api, body)
	if err != nil {
		return fmt.Errorf("direct get of a chunk: %w", err)
	}
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return fmt.Errorf("a chunk is missing (%d still to read): %w", cr.left, io.ErrUnexpectedEOF)
	default:
		return fmt.Errorf("direct get of a chunk: status %s %s", status, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return errors.New("direct get of a chunk: no sequence in the answer")
	}
	cr.seq, cr.data = seq+1, m.Data
	cr.left--
	return nil
}
