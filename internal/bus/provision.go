package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// StreamConfigs returns the configuration of every stream of the product.
func (c Config) StreamConfigs() []jetstream.StreamConfig {
	c = c.WithDefaults()
	storage := jetstream.FileStorage
	if c.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	s := func(name, kind, desc string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    []string{c.Prefix + "." + kind + ".>"},
			Storage:     storage,
			Replicas:    c.Replicas,
			MaxAge:      c.HistoryMaxAge,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardNew,
			MaxBytes:    c.StreamMaxBytes,
			Duplicates:  min(c.DuplicateWindow, c.HistoryMaxAge),
			AllowDirect: true,
		}
	}
	// Partitioned streams: <prefix>.<kind>.<session>… is stored as
	// <prefix>.<kind>.<partition>.<session>…, the partition computed by
	// the server, so each partition's owner consumes it through a filter.
	// With tenants the session is two tokens (<tenant>.<session>), hashed
	// together (messages.PartitionOf).
	partitioned := func(sc *jetstream.StreamConfig, kind string, tokens int) {
		src, dst := c.Prefix+"."+kind, fmt.Sprintf("%s.%s.{{partition(%d,1)}}", c.Prefix, kind, c.Partitions)
		if c.Tenants {
			tokens++
			dst = fmt.Sprintf("%s.%s.{{partition(%d,1,2)}}", c.Prefix, kind, c.Partitions)
		}
		for i := 1; i <= tokens; i++ {
			src += ".*"
			dst += fmt.Sprintf(".{{wildcard(%d)}}", i)
		}
		sc.Subjects = []string{src}
		sc.SubjectTransform = &jetstream.SubjectTransformConfig{Source: src, Destination: dst}
	}
	prompts := s(messages.StreamPrompts, "prompts", "Prompts from game servers, one subject per session, stored with its partition by the narrator that took them; removed once narrated")
	promptsIntake(&prompts, c)
	narrations := s(messages.StreamNarrations, "narrations", "Narrations, one subject per session")
	plans := s(messages.StreamPlans, "plans", "Plan JSON documents to execute, one subject per session (stored with its partition; removed once accepted)")
	partitioned(&plans, "plans", 1)
	plans.Subjects = append(plans.Subjects, c.Prefix+".fence.narrator.*")
	// Intake streams are work queues: a prompt or plan is removed once its
	// partition's owner acknowledges it, so steady load never fills them —
	// only a backlog (nobody consuming) does, and then a publish is refused
	// with an error (discard new), never dropped. The narrators' fences on
	// the plans stream match no consumer and stay.
	prompts.Retention, plans.Retention = jetstream.WorkQueuePolicy, jetstream.WorkQueuePolicy
	results := s(messages.StreamResults, "results", "Execution Results, per session and plan")
	events := s(messages.StreamEvents, "events", "Protocol events emitted by skill scripts")
	// History streams drop their oldest messages at the size limit; the
	// others refuse new ones (the publisher gets an error), so nothing in
	// progress is dropped silently.
	for _, h := range []*jetstream.StreamConfig{&narrations, &results, &events} {
		h.Discard = jetstream.DiscardOld
	}
	events.MaxAge = c.EventsMaxAge
	events.Duplicates = min(c.DuplicateWindow, c.EventsMaxAge)
	jobs := s(messages.StreamJobs, "jobs", "Internal: tool jobs, one subject per skill (work queue)")
	jobs.Retention = jetstream.WorkQueuePolicy
	// A partition's jobs go in atomic batches on replicated streams (one
	// replication round trip for many, partition.Writer).
	jobs.AllowAtomicPublish = true
	outcomes := s(messages.StreamOutcomes, "outcomes", "Internal: tool outcomes from skill workers (work queue, stored with the session's partition)")
	outcomes.Retention = jetstream.WorkQueuePolicy
	partitioned(&outcomes, "outcomes", 3)
	// Approvals are looked up by subject (the last decision for a plan's
	// tool), not consumed, so whichever scheduler owns the plan's
	// partition, now or after a move, finds them.
	// Only the scheduler writes decisions, once it checked them (the
	// plan in flight and the publisher's, the tool one that waits):
	// clients publish them on <prefix>.approvals.…, which no stream takes,
	// and the scheduler stores them on <prefix>.decisions.<plan>.<tool>.
	approvals := s(messages.StreamApprovals, "decisions", "Approval decisions the scheduler checked, the last one per plan and tool, until the plan ends")
	approvals.Subjects = []string{c.Prefix + ".decisions.*.*"}
	approvals.MaxMsgsPerSubject = 1
	approvals.MaxAge = ApprovalsMaxAge
	approvals.Duplicates = min(c.DuplicateWindow, ApprovalsMaxAge)
	// Bounded at the door: a message the product would refuse anyway is
	// refused by the stream, with an error to its publisher, before it
	// takes any space.
	prompts.MaxMsgSize = PromptMsgMax
	approvals.MaxMsgSize = ApprovalMsgMax
	events.MaxMsgSize = EventMsgMax
	// The rest carry whole plans, results or session states: at most the
	// largest payload the product is configured for.
	for _, sc := range []*jetstream.StreamConfig{&narrations, &plans, &results, &jobs, &outcomes} {
		sc.MaxMsgSize = MsgMax
	}
	audit, logins := auditStreams(s)
	return []jetstream.StreamConfig{prompts, narrations, plans, results, events, jobs, outcomes, approvals, audit, logins}
}

// promptsIntake makes sc the prompts stream: it takes only the subjects
// a narrator stores a prompt under — <prefix>.prompts.<partition>.<session>
// (with tenants <prefix>.prompts.<partition>.<tenant>.<session>), the
// partition computed by the narrator (messages.Subjects.Stored) — never a
// client's publish: a game server's prompt on <prefix>.prompts.<session>
// reaches the narrator owning its session, which checks it (a session
// that is a subject token, so no literal wildcard; the prompt decoded
// exactly; the tenant's share, nats.promptsPerTenant), stores it and
// answers with the stream's ack. Each session may have
// nats.promptsPerSession prompts waiting (max_msgs_per_subject with
// discard_new_per_subject).
func promptsIntake(sc *jetstream.StreamConfig, c Config) {
	sc.Subjects = []string{c.Prefix + ".prompts.*.*"}
	if c.Tenants {
		sc.Subjects = []string{c.Prefix + ".prompts.*.*.*"}
	}
	sc.MaxMsgsPerSubject = int64(c.PromptsPerSession)
	sc.DiscardNewPerSubject = true
}

// auditStreams are the console's audit trail, made from s (a history
// stream's configuration): actions on one stream (oldest dropped at the
// size limit, aged out with the history window; entries are small), and
// refused logins apart on another, so their noise never pushes an action
// out — one entry per source address and minute, at most
// AuditLoginsPerScope kept for each console (a tenant's, or the
// service's), so one tenant's flood leaves another's entries alone.
func auditStreams(s func(name, kind, desc string) jetstream.StreamConfig) (audit, logins jetstream.StreamConfig) {
	audit = s(messages.StreamAudit, "audit", "The console's audit trail: logins and state-changing actions, who, what and how it ended")
	audit.Discard = jetstream.DiscardOld
	audit.MaxMsgSize = AuditMsgMax
	logins = s(messages.StreamAuditLogins, "logins", "The console's refused logins, one entry per source address and minute, kept apart from the audit trail's actions")
	logins.Discard = jetstream.DiscardOld
	logins.MaxMsgSize = AuditMsgMax
	logins.MaxMsgsPerSubject = AuditLoginsPerScope
	return audit, logins
}

// The largest messages the streams take where they are smaller than the
// server's maximum payload (8 MiB): a prompt's text is at most 4,000
// characters (at most 16 KB of UTF-8) and its other fields are short; a
// decision is a few fields; an event is one NDJSON line of at most 1 MiB
// (the runner's default line limit).
const (
	PromptMsgMax   = 64 << 10
	ApprovalMsgMax = 16 << 10
	EventMsgMax    = 1<<20 + 4<<10
	// MsgMax is the largest message of the other streams and of the
	// buckets that hold plans, results or states: the embedded server's
	// maximum payload.
	MsgMax = 8 << 20
	// SmallValueMax is the largest value of the buckets of small records
	// (health, leases and heartbeats).
	SmallValueMax = 64 << 10
	// AuditMsgMax bounds a console audit entry (a few short fields and a
	// reason).
	AuditMsgMax = 16 << 10
	// AuditLoginsPerScope bounds the entries of refused logins kept for
	// one console: about 17 hours of the most one console writes (101
	// entries a minute), some 50 MB.
	AuditLoginsPerScope = 100_000
)

// BucketConfigs returns the configuration of every KV bucket of the product.
func (c Config) BucketConfigs() []jetstream.KeyValueConfig {
	c = c.WithDefaults()
	storage := jetstream.FileStorage
	if c.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	b := func(name, desc string, history uint8) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: name, Description: desc, History: history, Storage: storage, Replicas: c.Replicas,
			MaxBytes: c.BucketMaxBytes, MaxValueSize: MsgMax}
	}
	reuse := b(messages.BucketReuse, "Internal: outcomes a replan of the same prompt reuses, and plan lineage", 1)
	reuse.TTL = ReuseTTLDefault
	prompts := b(messages.BucketPrompts, "Internal: narrations of recent prompts by <session>.<promptId>, for dedupe", 1)
	prompts.TTL = c.PromptDedupeTTL
	inflight := b(messages.BucketInflight, "Internal: the running attempt of each prompt being narrated, by <session>.<promptId>", 1)
	inflight.TTL = c.PromptDedupeTTL
	health := b(messages.BucketHealth, "Skill health, key <session>.<skill>", 5)
	health.MaxValueSize = SmallValueMax
	keys := b(messages.BucketKeys, "Internal: the schedulers' secret keys (outcome tokens); only schedulers read it", 1)
	keys.MaxValueSize = SmallValueMax
	owners := b(messages.BucketOwners, "Internal: partition leases and instance heartbeats of schedulers and narrators", 1)
	owners.MaxValueSize = SmallValueMax
	return []jetstream.KeyValueConfig{
		b(messages.BucketSessions, "Session state, key <session>", 5),
		health,
		b(messages.BucketSkills, "Skill registry, key <skill>", 1),
		b(messages.BucketPlans, "Internal: scheduler state of in-flight plans", 1),
		owners,
		prompts,
		reuse,
		inflight,
		keys,
	}
}

// AssetStoreConfig is the configuration of the asset object store: kept
// for the history window, bounded by AssetsMaxBytes.
func (c Config) AssetStoreConfig() jetstream.ObjectStoreConfig {
	c = c.WithDefaults()
	storage := jetstream.FileStorage
	if c.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	return jetstream.ObjectStoreConfig{Bucket: messages.BucketAssets, Storage: storage, Replicas: c.Replicas,
		Description: "Asset files scripts listed, named sha256-<hex of the content>",
		TTL:         c.HistoryMaxAge, MaxBytes: c.AssetsMaxBytes}
}

// DoorMappings are the subject mappings an account whose clients publish
// prompts carries (deploy/nats/accounts.conf, the embedded server of
// `narratoria up`, each tenant's account): a prompt on a subject whose
// session token holds a "*" — the literal narratoria.prompts.* — is split
// at it into an empty token, a subject no stream takes, so its publisher
// gets an error and nothing is stored. Real session IDs pass unchanged.
func DoorMappings(prefix string) map[string]string {
	return map[string]string{prefix + ".prompts.*": prefix + ".prompts.{{split(1,*)}}"}
}

// TenantStateMaxDefault is the default quota of a tenant's session states.
const TenantStateMaxDefault = 64 << 20

// TenantWeightMetadata is the key of a tenant's weight (§12) in the
// metadata of its state stream, where the schedulers read it.
const TenantWeightMetadata = "narratoria.weight"

// TenantStateStream is the configuration of a tenant's session state
// stream (messages.Tenant.StateStream): l.StateMaxBytes large
// (TenantStateMaxDefault when 0), the last 5 states of each session kept
// (as the sessions bucket keeps 5), refusing writes when full. The
// tenant's other limits are kept in its metadata: its weight
// (TenantWeightMetadata; 1 when l.Weight ≤ 0) and its token budget
// (MetaMaxTokensPerHour).
func (c Config) TenantStateStream(tenant messages.Tenant, l TenantLimits) jetstream.StreamConfig {
	c = c.WithDefaults()
	storage := jetstream.FileStorage
	if c.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	sc := jetstream.StreamConfig{
		Name:        tenant.StateStream(),
		Description: "Session states of tenant " + string(tenant) + ", one subject per session",
		Subjects:    []string{c.Prefix + ".state." + string(tenant) + ".>"},
		Storage:     storage, Replicas: c.Replicas,
		MaxBytes: cmp.Or(l.StateMaxBytes, TenantStateMaxDefault), MaxMsgsPerSubject: 5, MaxMsgSize: MsgMax,
		Discard: jetstream.DiscardNew, AllowDirect: true, Retention: jetstream.LimitsPolicy,
		Metadata: map[string]string{TenantWeightMetadata: strconv.Itoa(max(l.Weight, 1))},
	}
	if l.MaxTokensPerHour > 0 {
		sc.Metadata[MetaMaxTokensPerHour] = strconv.FormatInt(l.MaxTokensPerHour, 10)
	}
	return sc
}

// TenantWeight reads a tenant's weight from its state stream's metadata:
// a positive integer, 1 when absent or unreadable.
func TenantWeight(md map[string]string) int {
	n, err := strconv.Atoi(md[TenantWeightMetadata])
	if err != nil || n <= 0 {
		return 1
	}
	return n
}

// ProvisionTenant creates a tenant's state stream, or sets its limits
// when it exists (narratoria tenant add, narratoria up --tenants).
func ProvisionTenant(ctx context.Context, js jetstream.JetStream, c Config, tenant messages.Tenant, l TenantLimits) error {
	if _, err := js.CreateOrUpdateStream(ctx, c.TenantStateStream(tenant, l)); err != nil {
		return fmt.Errorf("provision tenant %s: %w", tenant, err)
	}
	return nil
}

// Provision creates every stream and bucket that is missing and updates
// those whose configuration differs. It is idempotent and safe to run from
// several components at once; a stream already as configured is not
// touched (which also keeps concurrent starts from updating it in a race).
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	_, err := ProvisionReport(ctx, js, c)
	return err
}

// legacyConsumers are the durables of versions before partitions.
var legacyConsumers = []struct{ stream, name string }{
	{messages.StreamOutcomes, "scheduler-outcomes"},
	{messages.StreamPlans, "scheduler-plans"},
	{messages.StreamApprovals, "scheduler-approvals"},
	{messages.StreamPrompts, "narrator-prompts"},
}

// Provisioned says what Provision did to one stream or bucket.
type Provisioned struct {
	// Name is the stream, or "KV <bucket>".
	Name string
	// Action is created, updated, recreated, unchanged, or removed (a
	// legacy consumer).
	Action string
}

// ProvisionReport is Provision, saying what it did to each stream and
// bucket.
func ProvisionReport(ctx context.Context, js jetstream.JetStream, c Config) ([]Provisioned, error) {
	var out []Provisioned
	for _, sc := range c.StreamConfigs() {
		action, err := provisionStreamAction(ctx, js, sc)
		if err != nil {
			return out, fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
		out = append(out, Provisioned{Name: sc.Name, Action: action})
	}
	// Durable consumers of the single-leader versions, replaced by one per
	// partition: an unfiltered one would overlap them on a work queue.
	for _, lc := range legacyConsumers {
		err := js.DeleteConsumer(ctx, lc.stream, lc.name)
		switch {
		case err == nil:
			out = append(out, Provisioned{Name: lc.stream + " consumer " + lc.name, Action: "removed"})
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		default:
			return out, fmt.Errorf("remove legacy consumer %s of %s: %w", lc.name, lc.stream, err)
		}
	}
	for _, kc := range c.BucketConfigs() {
		action, err := provisionBucket(ctx, js, kc)
		if err != nil {
			return out, fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
		}
		out = append(out, Provisioned{Name: "KV " + kc.Bucket, Action: action})
	}
	action, err := provisionAssets(ctx, js, c.AssetStoreConfig())
	if err != nil {
		return out, fmt.Errorf("provision object store %s: %w", messages.BucketAssets, err)
	}
	return append(out, Provisioned{Name: "OBJ " + messages.BucketAssets, Action: action}), nil
}

// assetChunkMax bounds one message of the asset object store: a chunk
// (the client's default is 128 KiB) or an object's metadata.
const assetChunkMax = 256 << 10

// provisionAssets creates the asset object store and keeps its stream's
// limits (age, size, replicas, message size) as configured, roll-ups
// refused.
func provisionAssets(ctx context.Context, js jetstream.JetStream, oc jetstream.ObjectStoreConfig) (string, error) {
	return again(ctx, func() (string, error) { return provisionAssetsOnce(ctx, js, oc) })
}

// provisionAssetsOnce is one try of provisionAssets.
func provisionAssetsOnce(ctx context.Context, js jetstream.JetStream, oc jetstream.ObjectStoreConfig) (string, error) {
	action := "unchanged"
	st, err := js.Stream(ctx, "OBJ_"+oc.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateObjectStore(ctx, oc); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return "", err
		}
		action = "created"
		st, err = js.Stream(ctx, "OBJ_"+oc.Bucket)
	}
	if err != nil {
		return "", err
	}
	have := st.CachedInfo().Config
	if have.MaxAge == oc.TTL && have.Replicas == oc.Replicas && have.MaxBytes == oc.MaxBytes && have.MaxMsgSize == assetChunkMax && !have.AllowRollup {
		return action, nil
	}
	have.MaxAge, have.Replicas, have.MaxBytes, have.MaxMsgSize = oc.TTL, oc.Replicas, oc.MaxBytes, assetChunkMax
	// Objects are named by their content and never written over, so no
	// writer needs to roll a name's metadata up (the workers put objects
	// without the header): a roll-up, which a worker could send on any
	// chunk or name to wipe the store, is refused.
	have.AllowRollup = false
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return "", err
	}
	if action == "created" {
		return action, nil
	}
	return "updated", nil
}

// provisionBucket creates a bucket, or brings an existing one's limits to
// kc (updateBucket), with what the plans bucket needs beyond a bucket's
// (allowAtomicAndTTL); it returns created, updated or unchanged.
func provisionBucket(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) (string, error) {
	return again(ctx, func() (string, error) { return provisionBucketOnce(ctx, js, kc) })
}

// provisionBucketOnce is one try of provisionBucket.
func provisionBucketOnce(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) (string, error) {
	action := "created"
	if kv, err := js.KeyValue(ctx, kc.Bucket); err == nil {
		if action, err = updateBucket(ctx, js, kv, kc); err != nil {
			return "", err
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return "", err
	} else if kv, err := js.CreateKeyValue(ctx, kc); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		return "", err
	} else if err == nil {
		// Created as nats.go makes every bucket (discard new, one
		// message per key, roll-ups allowed): refuse roll-ups, and make
		// it a cache, or keep every message of a key, as it should be.
		if _, err := updateBucket(ctx, js, kv, kc); err != nil {
			return "", err
		}
	}
	if kc.Bucket == messages.BucketPlans {
		// The plan state of a partition goes in atomic batches on
		// replicated streams (partition.Writer); a finished plan's
		// keys are purged with markers that expire.
		updated, err := allowAtomicAndTTL(ctx, js, KVStream(kc.Bucket))
		if err != nil {
			return "", err
		}
		if updated && action == "unchanged" {
			action = "updated"
		}
	}
	return action, nil
}

// bucketMisfit names what of a bucket's stream, cfg, an earlier version
// provisioned and this one cannot work with ("" when nothing): the plans
// bucket must keep every message of a key (a plan's tool log) and take
// per-message TTLs (the purge markers).
func bucketMisfit(bucket string, cfg jetstream.StreamConfig) string {
	if bucket != messages.BucketPlans {
		return ""
	}
	var problems []string
	if cfg.MaxMsgsPerSubject >= 0 && cfg.MaxMsgsPerSubject < bucketPerKey(bucket, 0) {
		problems = append(problems, fmt.Sprintf("keeps %d message(s) per key, where a plan's tool log needs every one", cfg.MaxMsgsPerSubject))
	}
	if !cfg.AllowMsgTTL {
		problems = append(problems, "takes no per-message TTL (purge markers)")
	}
	return strings.Join(problems, "; ")
}

// cacheBuckets are the buckets whose keys only catch a late retry: the
// narrations of recent prompts, kept for dedupe. Full, they drop their
// oldest keys (discard old) rather than refuse new ones, so a burst above
// the budget shortens how long a prompt is remembered (narratoria status
// shows by how much) and never stops a prompt from being narrated. Every
// other bucket refuses writes when full (discard new): its keys must not
// vanish silently — a running attempt's record or a reusable outcome
// dropped would let a tool run a second time.
var cacheBuckets = map[string]bool{messages.BucketPrompts: true}

// bucketPerKey is how many messages a bucket's stream keeps of each key:
// its history, but every message for the plans bucket, whose tool logs
// keep each transition of a plan's tools under one key (the scheduler's
// store; the purge of a finished plan's log and record removes them).
//
// "Every" is BucketPerKeyEvery, not JetStream's -1: a key-value client
// (nats.go, and the nats CLI's kv commands through it) takes a stream
// whose per-key limit is under 1 for no bucket at all ("bucket not valid
// key-value store"), and math.MaxInt64, what earlier versions set, is not
// a number every client reads exactly (a float64 or a JavaScript number
// rounds it past the limit's own maximum, and the nats CLI v0.4.0 refused
// to list any stream because of it). An existing deployment's stream is
// brought to it by `narratoria provision` and at every start.
func bucketPerKey(bucket string, history uint8) int64 {
	if bucket == messages.BucketPlans {
		return BucketPerKeyEvery
	}
	return int64(max(history, 1))
}

// rollupBuckets are the buckets whose writers roll a key up (a header
// Nats-Rollup: sub, which removes the key's earlier messages): the plans
// bucket, where the scheduler — its only writer — rolls a plan's record
// up at each phase and purges a finished plan's keys with markers. Every
// other bucket refuses roll-ups (allow_rollup_hdrs false), so no writer of
// one key can wipe the whole store with Nats-Rollup: all: the skill
// registry, which every worker writes, first. Their keys are removed by
// deletes, which need none.
var rollupBuckets = map[string]bool{messages.BucketPlans: true}

// BucketPerKeyEvery is the per-key limit of a bucket that keeps every
// message of a key (the plans bucket): 2^31-1, more than any plan writes,
// and exact in every JSON reader (bucketPerKey says why not -1).
const BucketPerKeyEvery = math.MaxInt32

// bucketDiscard is the discard policy of a bucket's stream.
func bucketDiscard(bucket string) jetstream.DiscardPolicy {
	if cacheBuckets[bucket] {
		return jetstream.DiscardOld
	}
	return jetstream.DiscardNew
}

// updateBucket brings an existing bucket's limits (size, largest value,
// TTL, history, discard policy, roll-ups) to kc, so an operator's new budget takes effect at the
// next start or `narratoria provision`; it reports updated or unchanged.
func updateBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, kc jetstream.KeyValueConfig) (string, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return "", err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return "unchanged", nil
	}
	return updateBucketStream(ctx, js, bs.StreamInfo().Config, kc)
}

// updateBucketStream is updateBucket from have, the bucket's stream as
// last read (perhaps stale by now: a concurrent start may have changed it).
func updateBucketStream(ctx context.Context, js jetstream.JetStream, have jetstream.StreamConfig, kc jetstream.KeyValueConfig) (string, error) {
	discard, rollup := bucketDiscard(kc.Bucket), rollupBuckets[kc.Bucket]
	if have.MaxBytes == kc.MaxBytes && unlimited32(have.MaxMsgSize) == unlimited32(kc.MaxValueSize) &&
		have.MaxAge == kc.TTL && have.MaxMsgsPerSubject == bucketPerKey(kc.Bucket, kc.History) && have.Discard == discard &&
		have.AllowRollup == rollup {
		return "unchanged", nil
	}
	have.MaxBytes, have.MaxMsgSize, have.MaxAge, have.MaxMsgsPerSubject = kc.MaxBytes, kc.MaxValueSize, kc.TTL, bucketPerKey(kc.Bucket, kc.History)
	have.Discard, have.AllowRollup = discard, rollup
	if kc.Bucket == messages.BucketPlans {
		// Never turned back off (the server refuses that): a concurrent
		// start may have turned them on since the read above.
		have.AllowAtomicPublish, have.AllowMsgTTL = true, true
	}
	if kc.TTL > 0 && have.Duplicates > kc.TTL {
		have.Duplicates = kc.TTL
	}
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return "", err
	}
	return "updated", nil
}

// provisionRetries bounds how often a provisioning step that met a
// concurrent one (another component starting, an operator provisioning)
// is taken again from a fresh read of what the server has.
const provisionRetries = 5

// again runs step until it succeeds, the context ends, or provisionRetries
// tries failed: concurrent starts read a stream's settings, compare and
// update them in any interleaving, and an update made from a stale read
// fails (or is refused: a setting the other already turned on cannot be
// turned off); the next try reads again and finds nothing left to do.
func again(ctx context.Context, step func() (string, error)) (string, error) {
	var err error
	for try := range provisionRetries {
		var action string
		if action, err = step(); err == nil {
			return action, nil
		}
		if ctx.Err() != nil {
			break
		}
		Sleep(ctx, time.Duration(try+1)*50*time.Millisecond)
	}
	return "", err
}

// allowAtomicAndTTL lets a stream take atomic batches and messages with
// their own TTL; it reports whether it had to change the stream.
func allowAtomicAndTTL(ctx context.Context, js jetstream.JetStream, stream string) (bool, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	cfg := st.CachedInfo().Config
	if cfg.AllowAtomicPublish && cfg.AllowMsgTTL {
		return false, nil
	}
	cfg.AllowAtomicPublish, cfg.AllowMsgTTL = true, true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return false, err
	}
	return true, nil
}

func provisionStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	_, err := provisionStreamAction(ctx, js, want)
	return err
}

func provisionStreamAction(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (string, error) {
	return again(ctx, func() (string, error) { return provisionStreamActionOnce(ctx, js, want) })
}

// provisionStreamActionOnce is one try of provisionStreamAction.
func provisionStreamActionOnce(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (string, error) {
	st, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return "unchanged", nil // a concurrent start created it
		}
		return "created", err
	case err != nil:
		return "", err
	}
	info := st.CachedInfo()
	have := info.Config
	if slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.MaxAge == want.MaxAge && have.Duplicates == want.Duplicates &&
		have.AllowDirect == want.AllowDirect && have.MaxBytes == want.MaxBytes && have.Discard == want.Discard &&
		have.Replicas == want.Replicas && have.Storage == want.Storage && unlimited(have.MaxMsgsPerSubject) == unlimited(want.MaxMsgsPerSubject) &&
		have.AllowAtomicPublish == want.AllowAtomicPublish && unlimited32(have.MaxMsgSize) == unlimited32(want.MaxMsgSize) &&
		sameTransform(have.SubjectTransform, want.SubjectTransform) && have.AllowRollup == want.AllowRollup &&
		have.DiscardNewPerSubject == want.DiscardNewPerSubject {
		return "unchanged", nil
	}
	if have.Retention != want.Retention || have.Storage != want.Storage {
		// JetStream cannot change these in place. An empty stream (an
		// upgrade from a version that had no partitions, drained first) is
		// recreated; so is one whose every message was consumed (an
		// intake stream of a version that kept consumed messages: the
		// upgrade to a work queue loses nothing). One still holding work is
		// left for an operator.
		consumed, err := allConsumed(ctx, js, st)
		if err != nil {
			return "", err
		}
		if info.State.Msgs > 0 && !consumed {
			return "", fmt.Errorf("its retention or storage changed and it still holds %d messages: drain the deployment, then run `narratoria provision` again (docs/decisions/, upgrading)", info.State.Msgs)
		}
		if err := js.DeleteStream(ctx, want.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return "", err
		}
		if _, err := js.CreateStream(ctx, want); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return "", err
		}
		return "recreated", nil
	}
	_, err = js.UpdateStream(ctx, want)
	return "updated", err
}

// allConsumed reports whether every message of the stream that is work
// (fences excluded) has been acknowledged by a durable consumer whose
// filter matches it: each consumer has nothing pending, and each subject
// holding messages is some consumer's.
func allConsumed(ctx context.Context, js jetstream.JetStream, st jetstream.Stream) (bool, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return false, err
	}
	var filters []string
	consumers := st.ListConsumers(ctx)
	for c := range consumers.Info() {
		if c.NumPending > 0 || c.NumAckPending > 0 || c.NumRedelivered > 0 {
			return false, nil
		}
		filters = append(filters, c.Config.FilterSubject)
		filters = append(filters, c.Config.FilterSubjects...)
	}
	if err := consumers.Err(); err != nil {
		return false, err
	}
	for subj := range info.State.Subjects {
		if strings.Contains(subj, ".fence.") {
			continue
		}
		if !slices.ContainsFunc(filters, func(f string) bool { return f != "" && subjectMatches(f, subj) }) {
			return false, nil
		}
	}
	return true, nil
}

// subjectMatches reports whether the literal subject matches the filter
// (NATS wildcards: * one token, > the rest).
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// unlimited normalises a limit: the server reports "no limit" as -1 for
// what a config leaves at 0.
func unlimited(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

// unlimited32 is unlimited for a 32-bit limit.
func unlimited32(v int32) int32 {
	if v <= 0 {
		return -1
	}
	return v
}

func sameTransform(a, b *jetstream.SubjectTransformConfig) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Source == b.Source && a.Destination == b.Destination
}

// ProvisionedPartitions reads the partition count the streams were
// provisioned with (the partition() transform of NARRATORIA_PLANS).
func ProvisionedPartitions(ctx context.Context, js jetstream.JetStream) (int, error) {
	st, err := js.Stream(ctx, messages.StreamPlans)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", messages.StreamPlans, err)
	}
	tr := st.CachedInfo().Config.SubjectTransform
	if tr == nil {
		return 0, fmt.Errorf("%s is not partitioned: run `narratoria provision`", messages.StreamPlans)
	}
	var n int
	if i := strings.Index(tr.Destination, "{{partition("); i >= 0 {
		_, _ = fmt.Sscanf(tr.Destination[i+len("{{partition("):], "%d", &n)
	}
	if n < 1 {
		return 0, fmt.Errorf("%s: no partition count in its subject transform %q", messages.StreamPlans, tr.Destination)
	}
	return n, nil
}
