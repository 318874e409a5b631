package scheduler

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/messages"
)

// outcomeKeyName is the key of outcome tokens in KV narratoria_keys.
const outcomeKeyName = "outcomes"

// keys holds the schedulers' shared secret for outcome tokens: every
// scheduler of a deployment reads the same key from KV narratoria_keys (the
// first creates it), so any of them can check an outcome of a job another
// sent. Only schedulers may read the bucket (deploy/nats/accounts.conf).
type keys struct {
	outcome []byte
	// macs keeps MACs keyed with outcome: making one hashes the key, and
	// every job and outcome needs one.
	macs sync.Pool
}

// loadKeys reads the outcome key, creating it when the deployment has none.
func loadKeys(ctx context.Context, js jetstream.JetStream) (*keys, error) {
	kv, err := js.KeyValue(ctx, messages.BucketKeys)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", messages.BucketKeys, err)
	}
	for range 5 {
		if e, err := kv.Get(ctx, outcomeKeyName); err == nil {
			k, err := base64.StdEncoding.DecodeString(string(e.Value()))
			if err != nil || len(k) < 32 {
				return nil, fmt.Errorf("%s/%s is not a key of at least 32 bytes in base64", messages.BucketKeys, outcomeKeyName)
			}
			return newKeys(k), nil
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read %s/%s: %w", messages.BucketKeys, outcomeKeyName, err)
		}
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		if _, err := kv.Create(ctx, outcomeKeyName, []byte(base64.StdEncoding.EncodeToString(k))); err != nil && !bus.IsConflict(err) &&
			!errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("create %s/%s: %w", messages.BucketKeys, outcomeKeyName, err)
		}
		// Created, or another scheduler was first: read what is stored.
	}
	return nil, fmt.Errorf("read %s/%s: it keeps changing", messages.BucketKeys, outcomeKeyName)
}

// newKeys holds the outcome key k.
func newKeys(k []byte) *keys {
	ks := &keys{outcome: k}
	ks.macs.New = func() any { return hmac.New(sha256.New, ks.outcome) }
	return ks
}

// token is the MAC of one attempt: its plan, tool, skill and number, each
// followed by a zero byte.
func (k *keys) token(plan, tool, skill string, attempt int) string {
	var buf [192]byte
	b := append(buf[:0], plan...)
	b = append(append(b, 0), tool...)
	b = append(append(b, 0), skill...)
	b = strconv.AppendInt(append(b, 0), int64(attempt), 10)
	b = append(b, 0)
	m := k.macs.Get().(hash.Hash)
	m.Reset()
	m.Write(b)
	var sum [sha256.Size]byte
	t := base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0]))
	k.macs.Put(m)
	return t
}

// valid reports whether an outcome carries its attempt's token.
func (k *keys) valid(o *messages.Outcome) bool {
	want := k.token(o.PlanID, o.ToolID, o.Skill, o.Attempt)
	return hmac.Equal([]byte(want), []byte(o.Token))
}

// outcomeAttempt is the attempt of a stored outcome of plan's tool, or -1
// when it is not one or lacks its attempt's token. The takeover probe
// counts an outcome only with its token: one that any worker credential
// could publish (a forgery, issue 27) must not stop a new leader from
// sending the job again. (Jobs only schedulers may publish.)
func (k *keys) outcomeAttempt(b []byte, plan, tool string) int {
	var o messages.Outcome
	if json.Unmarshal(b, &o) != nil || o.PlanID != plan || o.ToolID != tool || !k.valid(&o) {
		return -1
	}
	return o.Attempt
}
