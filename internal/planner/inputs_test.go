package planner

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestPureInputs: the input-extraction step on a table of scripts and
// player's words. A dice formula is taken out of the words; any other
// string field gets the words whole (first person included: the skill
// reads what it needs from the sentence, as the reputation skill finds a
// faction's name in it); fields with a default or of another type are left
// to the script.
func TestPureInputs(t *testing.T) {
	testlog.WithoutRace(t)
	const (
		forge = `{"type":"object","properties":{"item":{"type":"string"}}}`
		dice  = `{"type":"object","properties":{"formula":{"type":"string"},"seed":{"type":"integer"}}}`
		query = `{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","default":3}}}`
		typed = `{"type":"object","properties":{"note":{"type":["string","null"]},"mood":{"type":"string","default":"calm"}}}`
	)
	for _, c := range []struct {
		name, schema, text, want string
	}{
		{"a string field gets the words whole", forge, "I ask the blacksmith to forge me a sword",
			`{"item":"I ask the blacksmith to forge me a sword"}`},
		{"a formula is taken out, without spaces", dice, "I swing at the troll, roll 2d6 + 3", `{"formula":"2d6+3"}`},
		{"the first formula of several", dice, "roll d8 then 1d4", `{"formula":"d8"}`},
		{"no formula: 1d20", dice, "I try to climb the wall", `{"formula":"1d20"}`},
		{"a field with a default is the script's", query, "remind me who the mayor was", `{"query":"remind me who the mayor was"}`},
		{"a field of another type (or of several) is the script's", typed, "I hum a tune", `{}`},
		{"no schema: prompt", "", "I look around", `{"prompt":"I look around"}`},
		{"a schema that does not decode: prompt", `{"properties":`, "I look around", `{"prompt":"I look around"}`},
		{"a leading $ is not a reference", forge, "$5 for the ferryman", `{"item":"$$5 for the ferryman"}`},
		{"a $ inside is left alone", forge, "I pay the ferryman $5", `{"item":"I pay the ferryman $5"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &messages.RegistryScript{Name: "x", InputSchema: json.RawMessage(c.schema)}
			require.JSONEq(t, c.want, string(Inputs(s, c.text)))
		})
	}
}

// TestPureInputsInPlans: every tool of the rule-based planner's plans over
// the development set (the narration aside) has the input the extraction
// step gives its script for the prompt; with the sample skills, the
// reputation skill gets the player's sentence to find the faction in.
func TestPureInputsInPlans(t *testing.T) {
	testlog.WithoutRace(t)
	cat := cat(t)
	for _, l := range readLabelled(t) {
		p, err := RulePlanner{}.Plan(context.Background(), Request{SessionID: "q", Text: l.Text, Catalogue: cat})
		require.NoError(t, err)
		for _, tool := range p.Tools {
			if tool.ToolID == "narrate" {
				continue
			}
			ref, err := messages.ParseToolPath(tool.ToolPath)
			require.NoError(t, err)
			cs, ok := cat.Skill(ref.Skill)
			require.True(t, ok)
			i := slices.IndexFunc(cs.Entry.Scripts, func(s messages.RegistryScript) bool { return s.Name == ref.Script })
			require.GreaterOrEqual(t, i, 0)
			require.JSONEq(t, string(Inputs(&cs.Entry.Scripts[i], l.Text)), string(tool.Input), l.Text)
		}
	}
	p, err := RulePlanner{}.Plan(context.Background(), Request{Text: "I donate gold to the temple", Catalogue: cat})
	require.NoError(t, err)
	require.Equal(t, "reputation/update-reputation", p.Tools[0].ToolPath)
	require.JSONEq(t, `{"faction":"I donate gold to the temple"}`, string(p.Tools[0].Input))
}
