package bus

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// PutObject stores what r reads as the object meta names in bucket, as
// jetstream.ObjectStore.Put lays an object out (chunks of 128 KiB on
// $O.<bucket>.C.<nuid>, then its info on $O.<bucket>.M.<name>), but
// without the roll-up header Put sends with the info: the asset store
// refuses roll-ups (one from a worker would wipe it), and an object named
// by its content is never written over, so no earlier info of the name
// needs rolling up. Chunks of an object whose info never lands are not
// purged (no worker may purge the store): they age out with it.
func PutObject(ctx context.Context, js jetstream.JetStream, bucket string, meta jetstream.ObjectMeta, r io.Reader) error {
	const chunkSize = 128 << 10
	id := nuid.Next()
	chunks := fmt.Sprintf("$O.%s.C.%s", bucket, id)
	sum := sha256.New()
	info := jetstream.ObjectInfo{ObjectMeta: meta, Bucket: bucket, NUID: id}
	info.Opts = &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}
	buf := make([]byte, chunkSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			sum.Write(buf[:n])
			if _, perr := js.Publish(ctx, chunks, buf[:n]); perr != nil {
				return fmt.Errorf("store chunk %d of %s: %w", info.Chunks, meta.Name, perr)
			}
			info.Chunks++
			info.Size += uint64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", meta.Name, err)
		}
	}
	info.Digest = jetstream.GetObjectDigestValue(sum)
	body, err := json.Marshal(&info)
	if err != nil {
		return fmt.Errorf("encode the info of %s: %w", meta.Name, err)
	}
	if _, err := js.Publish(ctx, ObjectInfoSubject(bucket, meta.Name), body); err != nil {
		return fmt.Errorf("store the info of %s: %w", meta.Name, err)
	}
	return nil
}

// ObjectInfoSubject is the subject of the info of the object name in
// bucket ($O.<bucket>.M.<name, base64url>): purging it removes the object
// (its chunks then age out), with no roll-up.
func ObjectInfoSubject(bucket, name string) string {
	return fmt.Sprintf("$O.%s.M.%s", bucket, base64.URLEncoding.EncodeToString([]byte(name)))
}
