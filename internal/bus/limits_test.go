package bus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestStreamsRefuseOversizedMessages: a 1 MB prompt is refused by the
// prompts stream with an error to its publisher, before it takes any
// space; a prompt of the largest size the narrator takes is stored. The
// same holds for decisions and events at their own limits.
func TestStreamsRefuseOversizedMessages(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	big := []byte(`{"text":"` + strings.Repeat("x", 1<<20) + `"}`)
	// (What the narrator stores a client's prompt under: no client
	// publishes to the stream.)
	stored := srv.Bus.Subjects().Stored("narratoria.prompts.s1", "s1", srv.Bus.WithDefaults().Partitions)
	_, err := srv.JS.Publish(ctx, stored, big)
	require.Error(t, err, "a 1 MB prompt is refused")
	require.Contains(t, err.Error(), "maximum")
	_, err = srv.JS.Publish(ctx, stored, []byte(`{"text":"`+strings.Repeat("é", 4000)+`"}`))
	require.NoError(t, err, "the largest prompt the narrator takes is stored")
	_, err = srv.JS.Publish(ctx, "narratoria.prompts.s1", []byte(`{"text":"hi"}`))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "no stream takes a client's prompt")
	_, err = srv.JS.Publish(ctx, "narratoria.decisions.00000000-0000-4000-8000-000000000001.t", make([]byte, 64<<10))
	require.Error(t, err, "a 64 KiB decision is refused")
	_, err = srv.JS.Publish(ctx, "narratoria.events.s1.00000000-0000-4000-8000-000000000001.t", make([]byte, 2<<20))
	require.Error(t, err, "a 2 MiB event is refused")

	// Every stream and bucket has a maximum message size, as the server
	// reports it.
	names := srv.JS.StreamNames(ctx)
	n := 0
	for name := range names.Name() {
		n++
		st, err := srv.JS.Stream(ctx, name)
		require.NoError(t, err)
		require.Positive(t, st.CachedInfo().Config.MaxMsgSize, "stream %s has no maximum message size", name)
	}
	require.NoError(t, names.Err())
	require.Greater(t, n, 10, "the product's streams and its buckets' streams")
	kv, err := srv.JS.KeyValue(ctx, messages.BucketHealth)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "s1.dice", make([]byte, 128<<10))
	require.Error(t, err, "a 128 KiB health record is refused")
}

// TestProvisionAppliesNewBudgets: an operator lowering the stream and
// bucket budgets (streamMaxBytes, bucketMaxBytes, assetsMaxBytes) and provisioning again
// gets them on every existing stream and bucket, and a third run changes
// nothing.
func TestProvisionAppliesNewBudgets(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	cfg := srv.Bus
	cfg.StreamMaxBytes, cfg.BucketMaxBytes, cfg.AssetsMaxBytes = 1<<20, 1<<20, 1<<20
	report, err := bus.ProvisionReport(ctx, srv.JS, cfg)
	require.NoError(t, err)
	updated := 0
	for _, p := range report {
		if p.Action == "updated" {
			updated++
		}
	}
	require.Equal(t, len(cfg.StreamConfigs())+len(cfg.BucketConfigs())+1, updated, "%v (the +1 is the asset object store)", report)
	for name := range srv.JS.StreamNames(ctx).Name() {
		st, err := srv.JS.Stream(ctx, name)
		require.NoError(t, err)
		require.EqualValues(t, 1<<20, st.CachedInfo().Config.MaxBytes, name)
	}
	report, err = bus.ProvisionReport(ctx, srv.JS, cfg)
	require.NoError(t, err)
	for _, p := range report {
		require.Equal(t, "unchanged", p.Action, p.Name)
	}
}

// TestUpgradeToWorkQueues: a plans stream of a version that kept consumed
// messages (limits retention) is recreated as a work queue by provisioning
// once a consumer acknowledged every plan in it — nothing is lost — and
// left alone, with an error that says to drain, while a plan waits.
func TestUpgradeToWorkQueues(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	var old jetstream.StreamConfig
	for _, sc := range srv.Bus.StreamConfigs() {
		if sc.Name == messages.StreamPlans {
			old = sc
		}
	}
	require.Equal(t, jetstream.WorkQueuePolicy, old.Retention)
	old.Retention = jetstream.LimitsPolicy
	require.NoError(t, srv.JS.DeleteStream(ctx, messages.StreamPlans))
	_, err := srv.JS.CreateStream(ctx, old)
	require.NoError(t, err)
	publish := func(n int) {
		for range n {
			_, err := srv.JS.Publish(ctx, "narratoria.plans.s1", []byte(`{}`))
			require.NoError(t, err)
		}
	}
	publish(3)
	_, err = srv.JS.Publish(ctx, "narratoria.fence.narrator.0", []byte("n1")) // fences are not work
	require.NoError(t, err)
	cons, err := srv.JS.CreateConsumer(ctx, messages.StreamPlans, jetstream.ConsumerConfig{Durable: "old-intake",
		FilterSubject: "narratoria.plans.>", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	consume := func(n int) {
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			require.NoError(t, m.DoubleAck(ctx))
		}
	}
	consume(3)
	publish(1) // waiting
	_, err = bus.ProvisionReport(ctx, srv.JS, srv.Bus)
	require.ErrorContains(t, err, "drain the deployment")
	consume(1)
	report, err := bus.ProvisionReport(ctx, srv.JS, srv.Bus)
	require.NoError(t, err)
	require.Contains(t, report, bus.Provisioned{Name: messages.StreamPlans, Action: "recreated"})
	st, err := srv.JS.Stream(ctx, messages.StreamPlans)
	require.NoError(t, err)
	require.Equal(t, jetstream.WorkQueuePolicy, st.CachedInfo().Config.Retention)
}

// TestCacheBucketsNeverFill: the bucket that only remembers (the dedupe
// of narrated prompts) drops its oldest keys when full, so a burst above
// the budget never refuses a write; the buckets whose keys must not vanish
// (sessions; running attempts and reusable outcomes, whose loss would let
// a tool run twice) refuse instead, with the server's words, rather than
// lose a key.
func TestCacheBucketsNeverFill(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	cfg := srv.Bus
	cfg.BucketMaxBytes = 64 << 10
	_, err := bus.ProvisionReport(ctx, srv.JS, cfg)
	require.NoError(t, err)
	value := []byte(strings.Repeat("n", 1<<10))
	for _, bucket := range []string{messages.BucketPrompts} {
		kv, err := srv.JS.KeyValue(ctx, bucket)
		require.NoError(t, err)
		for i := range 256 { // 256 KiB into a 64 KiB bucket
			_, err := kv.Create(ctx, fmt.Sprintf("s1.p%03d", i), value)
			require.NoError(t, err, "%s: write %d refused", bucket, i)
		}
		_, err = kv.Get(ctx, "s1.p000")
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "%s: the oldest key made room", bucket)
		e, err := kv.Get(ctx, "s1.p255")
		require.NoError(t, err, "%s: the newest key is kept", bucket)
		require.Equal(t, value, e.Value())
	}
	for _, bucket := range []string{messages.BucketSessions, messages.BucketInflight, messages.BucketReuse} {
		kv, err := srv.JS.KeyValue(ctx, bucket)
		require.NoError(t, err)
		for i := range 256 {
			if _, err = kv.Put(ctx, fmt.Sprintf("s%03d", i), value); err != nil {
				break
			}
		}
		require.ErrorContains(t, err, "maximum bytes", "a full %s bucket refuses", bucket)
		_, err = kv.Get(ctx, "s000")
		require.NoError(t, err, "%s keeps every key", bucket)
	}

	// A fresh deployment creates them as caches too.
	srv2 := natstest.Start(t)
	for _, bucket := range []string{messages.BucketPrompts, messages.BucketSessions} {
		st, err := srv2.JS.Stream(ctx, "KV_"+bucket)
		require.NoError(t, err)
		want := jetstream.DiscardNew
		if bucket == messages.BucketPrompts {
			want = jetstream.DiscardOld
		}
		require.Equal(t, want, st.CachedInfo().Config.Discard, bucket)
	}
}

// TestPlansBucketOfAnEarlierVersion: a plans bucket provisioned by a
// version that kept one message per key and no per-message TTLs would
// keep only the last message of a plan's tool log. A component that only
// checks (nats.provision: check) refuses to start on it, naming the
// problem; provisioning fixes it; and a component that provisions and
// finds the bucket gone recreates it whole.
func TestPlansBucketOfAnEarlierVersion(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	require.NoError(t, srv.JS.DeleteKeyValue(ctx, messages.BucketPlans))
	_, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: messages.BucketPlans, History: 1})
	require.NoError(t, err)
	log, _ := testlog.New(t)
	check := srv.Bus
	check.Provision = bus.ProvisionCheck
	g := bus.NewGuard(srv.JS, check, nil, []string{messages.BucketPlans}, "scheduler", nil, log)
	err = g.Ensure(ctx)
	require.ErrorContains(t, err, "KV_narratoria_plans (keeps 1 message(s) per key")
	require.ErrorContains(t, err, "per-message TTL")

	require.NoError(t, bus.Provision(ctx, srv.JS, srv.Bus))
	require.NoError(t, g.Ensure(ctx), "provisioned")

	require.NoError(t, srv.JS.DeleteKeyValue(ctx, messages.BucketPlans))
	auto := srv.Bus
	auto.Provision = bus.ProvisionAuto
	require.NoError(t, bus.NewGuard(srv.JS, auto, nil, []string{messages.BucketPlans}, "scheduler", nil, log).Check(ctx), "recreated")
	require.NoError(t, g.Ensure(ctx), "recreated whole")
}

// TestStoresRefuseRollups: after provisioning, every stream and bucket but
// the plans bucket (whose only writer, the scheduler, rolls a plan's
// record up and purges its keys with markers) refuses a Nats-Rollup
// header, so no writer of one key or subject wipes a store with
// Nats-Rollup: all — also the buckets and the asset store of a version
// that allowed roll-ups (nats.go creates every bucket so), brought in
// place by `narratoria provision`, which then changes nothing.
func TestStoresRefuseRollups(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	// As an earlier version left them: roll-ups allowed.
	for name := range srv.JS.StreamNames(ctx).Name() {
		st, err := srv.JS.Stream(ctx, name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		if strings.HasPrefix(name, "KV_") || strings.HasPrefix(name, "OBJ_") {
			cfg.AllowRollup = true
			_, err = srv.JS.UpdateStream(ctx, cfg)
			require.NoError(t, err)
		}
	}
	report, err := bus.ProvisionReport(ctx, srv.JS, srv.Bus)
	require.NoError(t, err)
	again, err := bus.ProvisionReport(ctx, srv.JS, srv.Bus)
	require.NoError(t, err)
	for _, p := range again {
		require.Equal(t, "unchanged", p.Action, "%s (first run: %v)", p.Name, report)
	}
	n := 0
	for name := range srv.JS.StreamNames(ctx).Name() {
		st, err := srv.JS.Stream(ctx, name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		require.Equal(t, name == "KV_"+messages.BucketPlans, cfg.AllowRollup, "%s allows roll-ups", name)
		if cfg.AllowRollup {
			continue
		}
		m := nats.NewMsg(strings.TrimSuffix(strings.TrimSuffix(cfg.Subjects[0], ">"), "*") + "x")
		if strings.Contains(m.Subject, "*") {
			m.Subject = strings.ReplaceAll(m.Subject, "*", "x")
		}
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		_, err = srv.JS.PublishMsg(ctx, m)
		require.ErrorContains(t, err, "rollup not permitted", "%s: %s", name, m.Subject)
		n++
	}
	require.Greater(t, n, 15, "every store was tried")
}

// TestIntakeStreamsUpdatedInPlace: the prompts and approvals streams of an
// earlier version — taking clients' publishes (narratoria.prompts.*
// stored with its partition by a transform; narratoria.approvals.*.*) —
// are updated in place by `narratoria provision`: a prompt waiting in
// them keeps its stored subject (the one the narrators' consumers read),
// and clients' subjects are no stream's any more.
func TestIntakeStreamsUpdatedInPlace(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	cfg := srv.Bus.WithDefaults()
	for _, name := range []string{messages.StreamPrompts, messages.StreamApprovals} {
		require.NoError(t, srv.JS.DeleteStream(ctx, name))
	}
	_, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: messages.StreamPrompts, Subjects: []string{"narratoria.prompts.*"},
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew, MaxBytes: cfg.StreamMaxBytes,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "narratoria.prompts.*", Destination: "narratoria.prompts.{{partition(32,1)}}.{{wildcard(1)}}"}})
	require.NoError(t, err)
	_, err = srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: messages.StreamApprovals, Subjects: []string{"narratoria.approvals.*.*"},
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, MaxBytes: cfg.StreamMaxBytes})
	require.NoError(t, err)
	_, err = srv.JS.Publish(ctx, "narratoria.prompts.s1", []byte(`{"text":"waiting"}`))
	require.NoError(t, err)

	report, err := bus.ProvisionReport(ctx, srv.JS, srv.Bus)
	require.NoError(t, err)
	for _, p := range report {
		if p.Name == messages.StreamPrompts || p.Name == messages.StreamApprovals {
			require.Equal(t, "updated", p.Action, p.Name)
		}
	}
	st, err := srv.JS.Stream(ctx, messages.StreamPrompts)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(ctx, cfg.Subjects().Stored("narratoria.prompts.s1", "s1", cfg.Partitions))
	require.NoError(t, err, "the waiting prompt keeps its stored subject")
	require.JSONEq(t, `{"text":"waiting"}`, string(m.Data))
	require.True(t, st.CachedInfo().Config.DiscardNewPerSubject)
	_, err = srv.JS.Publish(ctx, "narratoria.prompts.s1", []byte(`{"text":"hi"}`))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "a client's prompt goes to a narrator now")
	_, err = srv.JS.Publish(ctx, "narratoria.approvals.00000000-0000-4000-8000-000000000001.t", []byte(`{"approved":true}`))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse, "and a client's decision to a scheduler")
}
