package sampleskills

import (
	"context"
	"fmt"
	"strings"

	"github.com/narratoria/runtime/pkg/skillkit"
)

// Reputation is kept in state.reputation.<faction> on a bounded scale.
const (
	ReputationMin = -100
	ReputationMax = 100
)

func clampRep(v int) int { return min(max(v, ReputationMin), ReputationMax) }

func standingWord(v int) string {
	switch {
	case v >= 60:
		return "revered"
	case v >= 20:
		return "friendly"
	case v > -20:
		return "neutral"
	case v > -60:
		return "distrusted"
	}
	return "hated"
}

func currentRep(in *skillkit.Invocation, faction string) int {
	var state struct {
		Reputation map[string]float64 `json:"reputation"`
	}
	_ = in.DecodeState(&state)
	return int(state.Reputation[faction])
}

// UpdateReputation changes a faction standing: input {"faction", "delta"};
// it patches state.reputation.<faction> (clamped to -100..100) and outputs
// {"faction", "standing", "label", "narration"}.
func UpdateReputation(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Faction string `json:"faction"`
		Delta   int    `json:"delta"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	faction := strings.ToLower(strings.TrimSpace(input.Faction))
	if faction == "" {
		faction = "townsfolk"
	}
	next := clampRep(currentRep(in, faction) + input.Delta)
	if err := out.Patch(map[string]any{"reputation": map[string]any{faction: next}}); err != nil {
		return err
	}
	return out.Done(true, fmt.Sprintf("%s: %d", faction, next), map[string]any{
		"faction": faction, "standing": next, "label": standingWord(next),
		"narration": fmt.Sprintf("Word spreads among the %s; they now hold you %s.", faction, standingWord(next)),
	})
}

// QueryReputation reports a faction standing: input {"faction"}.
func QueryReputation(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Faction string `json:"faction"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	faction := strings.ToLower(strings.TrimSpace(input.Faction))
	if faction == "" {
		faction = "townsfolk"
	}
	v := currentRep(in, faction)
	return out.Done(true, fmt.Sprintf("%s: %d", faction, v), map[string]any{
		"faction": faction, "standing": v, "label": standingWord(v),
		"narration": fmt.Sprintf("The %s regard you as %s.", faction, standingWord(v)),
	})
}
