package sampleskills

import (
	"context"
	"fmt"

	"github.com/narratoria/runtime/pkg/dice"
	"github.com/narratoria/runtime/pkg/skillkit"
)

// RollDice rolls a dice formula: input {"formula": "1d20+2", "seed"?: n}.
// It emits a dice_roll ui_event, patches state.lastRoll and outputs
// {"total", "rolls", "formula", "narration"}. A bad formula is a failed done
// with an error event naming the problem.
func RollDice(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Formula string  `json:"formula"`
		Seed    *uint64 `json:"seed"`
		Reason  string  `json:"reason"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	if input.Formula == "" {
		input.Formula = "1d20"
	}
	f, err := dice.Parse(input.Formula)
	if err != nil {
		return fmt.Errorf("%w: %v", skillkit.ErrUsage, err)
	}
	src := dice.CryptoSource
	if input.Seed != nil {
		src = dice.Seeded(*input.Seed)
	}
	r := f.Roll(src)
	_ = out.Log("info", fmt.Sprintf("rolled %s: %d %v", r.Formula, r.Total, r.Rolls))
	if err := out.UI("dice_roll", r); err != nil {
		return err
	}
	if err := out.Patch(map[string]any{"lastRoll": map[string]any{"formula": r.Formula, "total": r.Total, "rolls": r.Rolls}}); err != nil {
		return err
	}
	lo, hi := f.Bounds()
	verdict := "an ordinary result"
	switch {
	case hi > lo && r.Total == hi:
		verdict = "the best possible roll"
	case hi > lo && r.Total == lo:
		verdict = "the worst possible roll"
	case r.Total >= lo+(hi-lo)*3/4:
		verdict = "a strong roll"
	case r.Total <= lo+(hi-lo)/4:
		verdict = "a weak roll"
	}
	return out.Done(true, fmt.Sprintf("%s = %d", r.Formula, r.Total), map[string]any{
		"total": r.Total, "rolls": r.Rolls, "formula": r.Formula,
		"narration": fmt.Sprintf("The dice tumble: %s comes up %d, %s.", r.Formula, r.Total, verdict),
	})
}
