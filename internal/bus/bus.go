// Package bus connects a component to NATS and provisions the JetStream
// streams and KV buckets of the product (docs/spec.md §1) idempotently, so whichever
// component starts first creates them and the others find them.
package bus

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/pkg/messages"
)

// Defaults of Config.
const (
	// URLDefault is the NATS server a component connects to by default.
	URLDefault = "nats://127.0.0.1:4222"
	// ReplicasDefault is the replica count of every stream and bucket.
	ReplicasDefault = 1
	// ConnectTimeoutDefault bounds the first connection attempt.
	ConnectTimeoutDefault = 5 * time.Second
	// EventsMaxAgeDefault is how long protocol events are kept.
	EventsMaxAgeDefault = 24 * time.Hour
	// PromptDedupeTTLDefault is how long a narrated promptId is remembered.
	PromptDedupeTTLDefault = 24 * time.Hour
	// ReuseTTLDefault is how long an outcome stays reusable by a replan of
	// its prompt (the replan loop takes seconds; this is generous).
	ReuseTTLDefault = time.Hour
	// DuplicateWindowDefault is how long streams remember message IDs.
	DuplicateWindowDefault = 10 * time.Minute
	// HistoryMaxAgeDefault is how long prompts, plans, results and narrations are kept.
	HistoryMaxAgeDefault = 7 * 24 * time.Hour
	// StreamMaxBytesDefault bounds each stream.
	StreamMaxBytesDefault = 1 << 30
	// BucketMaxBytesDefault bounds each KV bucket.
	BucketMaxBytesDefault = 256 << 20
	// AssetsMaxBytesDefault bounds the asset object store.
	AssetsMaxBytesDefault = 1 << 30
	// PromptsPerSessionDefault is how many prompts one session may have
	// waiting in NARRATORIA_PROMPTS.
	PromptsPerSessionDefault = 64
	// PromptsPerTenantDefault is how many prompts one tenant (without
	// tenants: the game servers together) may have waiting in
	// NARRATORIA_PROMPTS.
	PromptsPerTenantDefault = 1024
	// PartitionsDefault is how many partitions sessions are spread over.
	PartitionsDefault = 32
	// PartitionsMax bounds Partitions (one durable consumer per partition
	// and partitioned stream).
	PartitionsMax = 1024
	// ApprovalsMaxAge is how long an approval decision is kept when no plan
	// takes it (a plan's decisions are purged with the plan).
	ApprovalsMaxAge = 24 * time.Hour
	// ProvisionAuto: components create and update what they need.
	ProvisionAuto = "auto"
	// ProvisionCheck: components only check; an operator provisions.
	ProvisionCheck = "check"
)

// Config says how to reach NATS and how to size what is provisioned there.
type Config struct {
	// URL is one or more server URLs, comma-separated. Default URLDefault.
	URL string `yaml:"url"`
	// Name is the client connection name shown by the server. Default the component name.
	Name string `yaml:"name"`
	// CredsFile is a NATS credentials (JWT + nkey) file. Default none.
	CredsFile string `yaml:"credsFile"`
	// NKeyFile is an nkey seed file. Default none.
	NKeyFile string `yaml:"nkeyFile"`
	// User and Password authenticate with a user name. Default none.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Token authenticates with a token. Default none.
	Token string `yaml:"token"`
	// TLSCA, TLSCert and TLSKey configure TLS (CA to trust, client cert and key). Default none.
	TLSCA   string `yaml:"tlsCA"`
	TLSCert string `yaml:"tlsCert"`
	TLSKey  string `yaml:"tlsKey"`
	// Prefix is the first token of every subject. Default "narratoria".
	Prefix string `yaml:"prefix"`
	// Tenants runs the service side of a multi-tenant deployment: every
	// session is <tenant>.<session>, the tenant put into the subject by the
	// server's account imports (docs/decisions/, "Tenants"). A tenant's
	// own clients leave it off. Default false.
	Tenants bool `yaml:"tenants"`
	// InboxPrefix replaces "_INBOX" in reply subjects, so a least-privilege
	// user receives only its own replies (deploy/nats/accounts.conf gives
	// each role one, e.g. "_INBOX_scheduler"). Default "_INBOX".
	InboxPrefix string `yaml:"inboxPrefix"`
	// Replicas of every stream and bucket (1 standalone, 3 in a cluster). Default 1.
	Replicas int `yaml:"replicas"`
	// EventsMaxAge is how long NARRATORIA_EVENTS keeps events. Default 24h.
	EventsMaxAge time.Duration `yaml:"eventsMaxAge"`
	// HistoryMaxAge is how long prompts, plans, results and narrations are kept. Default 168h.
	HistoryMaxAge time.Duration `yaml:"historyMaxAge"`
	// DuplicateWindow is how long every stream remembers message IDs, so a
	// message sent again within it is dropped (jobs, outcomes, results,
	// plans resent after a crash). Default 10m.
	DuplicateWindow time.Duration `yaml:"duplicateWindow"`
	// PromptDedupeTTL is how long a narrated promptId is remembered. Default 24h.
	PromptDedupeTTL time.Duration `yaml:"promptDedupeTTL"`
	// Provision says what a component does with the streams and buckets
	// it needs: "auto" creates what is missing and updates what differs
	// (at start and whenever one disappears); "check" only checks, and a
	// missing one makes the component unready until an operator runs
	// `narratoria provision` (the shipped least-privilege accounts allow
	// nothing else). Default auto.
	Provision string `yaml:"provision"`
	// StreamMaxBytes bounds each stream's size. History streams
	// (narrations, results, events) then drop their oldest messages; the
	// others refuse new ones, so nothing in progress is lost silently.
	// Default 1 GiB.
	StreamMaxBytes int64 `yaml:"streamMaxBytes"`
	// BucketMaxBytes bounds each KV bucket's size (a write past it fails).
	// Default 256 MiB.
	BucketMaxBytes int64 `yaml:"bucketMaxBytes"`
	// AssetsMaxBytes bounds the asset object store (narratoria_assets);
	// its objects are kept for HistoryMaxAge. Full, it refuses new
	// assets, which then keep only their worker path. Default 1 GiB.
	AssetsMaxBytes int64 `yaml:"assetsMaxBytes"`
	// AssetMaxSize is the largest asset object: a worker stores no larger
	// file (it keeps only its path, and logs why), and the console and
	// `narratoria asset get` refuse a larger object before reading it.
	// Default 16777216 (16 MiB, messages.AssetMaxSizeDefault).
	AssetMaxSize int64 `yaml:"assetMaxSize"`
	// Partitions is how many partitions sessions are spread over (docs/spec.md
	// §10): the prompt, plan and outcome streams store each message with
	// its session's partition in the subject, and each partition has one
	// owning scheduler and one owning narrator at a time. Every component
	// and the provisioning step must agree on it; changing it needs a
	// drained deployment (docs/decisions/). Default 32.
	Partitions int `yaml:"partitions"`
	// PromptsPerSession is how many prompts one session may have waiting
	// in NARRATORIA_PROMPTS (its max_msgs_per_subject, with
	// discard_new_per_subject): the next is refused, with "maximum
	// messages per subject exceeded", until the narrator takes one. A
	// game flooding one session leaves the others alone. Default 64.
	PromptsPerSession int `yaml:"promptsPerSession"`
	// PromptsPerTenant is how many prompts one tenant — without tenants,
	// the game servers together — may have waiting in NARRATORIA_PROMPTS:
	// the narrator taking a prompt at intake refuses the next (429, the
	// tenant and the figure named), so one tenant flooding its sessions
	// leaves the stream to the others (size the stream for every
	// tenant's share: docs/architecture.md). Default 1024.
	PromptsPerTenant int `yaml:"promptsPerTenant"`
	// MemoryStorage keeps every stream in memory (tests, benchmarks). Default false.
	MemoryStorage bool `yaml:"memoryStorage"`
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.URL = cmp.Or(c.URL, URLDefault)
	c.Prefix = cmp.Or(c.Prefix, messages.SubjectPrefixDefault)
	c.Replicas = cmp.Or(c.Replicas, ReplicasDefault)
	c.EventsMaxAge = cmp.Or(c.EventsMaxAge, EventsMaxAgeDefault)
	c.HistoryMaxAge = cmp.Or(c.HistoryMaxAge, HistoryMaxAgeDefault)
	c.PromptDedupeTTL = cmp.Or(c.PromptDedupeTTL, PromptDedupeTTLDefault)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, DuplicateWindowDefault)
	c.Provision = cmp.Or(c.Provision, ProvisionAuto)
	c.StreamMaxBytes = cmp.Or(c.StreamMaxBytes, StreamMaxBytesDefault)
	c.BucketMaxBytes = cmp.Or(c.BucketMaxBytes, BucketMaxBytesDefault)
	c.AssetsMaxBytes = cmp.Or(c.AssetsMaxBytes, AssetsMaxBytesDefault)
	c.AssetMaxSize = cmp.Or(c.AssetMaxSize, messages.AssetMaxSizeDefault)
	c.Partitions = cmp.Or(c.Partitions, PartitionsDefault)
	c.PromptsPerSession = cmp.Or(c.PromptsPerSession, PromptsPerSessionDefault)
	c.PromptsPerTenant = cmp.Or(c.PromptsPerTenant, PromptsPerTenantDefault)
	return c
}

// Validate names the first bad key.
func (c Config) Validate() error {
	switch {
	case c.DuplicateWindow < time.Second:
		return fmt.Errorf("nats.duplicateWindow: must be at least 1s, got %s", c.DuplicateWindow)
	case c.Provision != ProvisionAuto && c.Provision != ProvisionCheck:
		return fmt.Errorf("nats.provision: must be %s or %s, got %q", ProvisionAuto, ProvisionCheck, c.Provision)
	case c.StreamMaxBytes < 1<<20 || c.BucketMaxBytes < 1<<20:
		return fmt.Errorf("nats.streamMaxBytes and nats.bucketMaxBytes: must be at least 1 MiB, got %d and %d", c.StreamMaxBytes, c.BucketMaxBytes)
	case c.AssetsMaxBytes < 1<<20:
		return fmt.Errorf("nats.assetsMaxBytes: must be at least 1 MiB, got %d", c.AssetsMaxBytes)
	case c.AssetMaxSize < 1<<10 || c.AssetMaxSize > c.AssetsMaxBytes:
		return fmt.Errorf("nats.assetMaxSize: must be at least 1 KiB and at most nats.assetsMaxBytes (%d), got %d", c.AssetsMaxBytes, c.AssetMaxSize)
	case c.PromptsPerSession < 1 || c.PromptsPerTenant < c.PromptsPerSession:
		return fmt.Errorf("nats.promptsPerSession and nats.promptsPerTenant: must be at least 1 and promptsPerSession at most promptsPerTenant, got %d and %d",
			c.PromptsPerSession, c.PromptsPerTenant)
	case c.Partitions < 1 || c.Partitions > PartitionsMax:
		return fmt.Errorf("nats.partitions: must be 1..%d, got %d", PartitionsMax, c.Partitions)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("nats.replicas: must be 1..5, got %d", c.Replicas)
	case strings.ContainsAny(c.Prefix, ".*> \t"):
		return fmt.Errorf("nats.prefix: %q must be a single subject token", c.Prefix)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("nats.tlsCert and nats.tlsKey must be given together")
	case c.InboxPrefix != "" && strings.ContainsAny(c.InboxPrefix, "*> \t"):
		return fmt.Errorf("nats.inboxPrefix: %q must be a subject without wildcards", c.InboxPrefix)
	case c.CredsFile != "" && c.NKeyFile != "":
		return errors.New("nats.credsFile and nats.nkeyFile are exclusive")
	}
	return nil
}

// Subjects returns the subject builder for the configured prefix.
func (c Config) Subjects() messages.Subjects {
	return messages.Subjects{Prefix: c.Prefix, Tenants: c.Tenants}
}

// Connect dials NATS with the configured credentials. It reconnects forever
// with backoff and logs every disconnect and reconnect.
func Connect(ctx context.Context, c Config, log *slog.Logger) (*nats.Conn, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name(cmp.Or(c.Name, "narratoria")),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.Timeout(ConnectTimeoutDefault),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil { // our own Close or Drain
				log.Debug(c.Name + ": disconnected from NATS")
				return
			}
			log.Warn(c.Name+": disconnected from NATS", slog.Any("error", err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info(c.Name+": reconnected to NATS", slog.String("url", nc.ConnectedUrlRedacted()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error(c.Name+": NATS async error", slog.String("subject", subj), slog.Any("error", err))
		}),
	}
	switch {
	case c.CredsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	case c.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats.nkeyFile: %w", err)
		}
		opts = append(opts, o)
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.TLSCA != "" || c.TLSCert != "" {
		tc, err := tlsConfig(c)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(c.URL, opts...)
	if err != nil {
		return nil, &ConnectError{URL: c.URL, Err: err}
	}
	return nc, nil
}

// ConnectError says which server could not be reached.
type ConnectError struct {
	// URL is the configured server list.
	URL string
	// Err is the client's error.
	Err error
}

// Error implements error.
func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot reach NATS at %s: %v", e.URL, e.Err)
}

// Unwrap returns the client's error.
func (e *ConnectError) Unwrap() error { return e.Err }

func tlsConfig(c Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("nats.tlsCA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nats.tlsCA: %s holds no PEM certificate", c.TLSCA)
		}
		tc.RootCAs = pool
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("nats.tlsCert/tlsKey: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
