package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// MetaMaxTokensPerHour is the key, in the metadata of a tenant's state
// stream, of its model token budget per hour.
const MetaMaxTokensPerHour = "narratoria.maxTokensPerHour"

// TenantLimits are the limits of a tenant kept with its state stream
// (messages.StateStream), where `narratoria tenant add` sets them and the
// narrator reads them: the stream's size, and its metadata.
type TenantLimits struct {
	// StateMaxBytes bounds the tenant's session states. Default
	// TenantStateMaxDefault.
	StateMaxBytes int64
	// MaxTokensPerHour is the tenant's model token budget per hour, per
	// narrator. Default 0: the narrator's narrator.llm.maxTokensPerHour.
	MaxTokensPerHour int64
	// Weight is the tenant's share of a saturated skill (§12; fair
	// dispatch). Default (≤ 0): 1.
	Weight int
}

// TenantLimitsOf reads the limits of tenant from its state stream; found
// is false when the stream does not exist.
func TenantLimitsOf(ctx context.Context, js jetstream.JetStream, tenant messages.Tenant) (l TenantLimits, found bool, err error) {
	st, err := js.Stream(ctx, tenant.StateStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("read the limits of tenant %s: %w", tenant, err)
	}
	cfg := st.CachedInfo().Config
	l.StateMaxBytes = cfg.MaxBytes
	l.Weight = TenantWeight(cfg.Metadata)
	if v := cfg.Metadata[MetaMaxTokensPerHour]; v != "" {
		if l.MaxTokensPerHour, err = strconv.ParseInt(v, 10, 64); err != nil {
			return l, true, fmt.Errorf("tenant %s: metadata %s: %q is not a number", tenant, MetaMaxTokensPerHour, v)
		}
	}
	return l, true, nil
}
