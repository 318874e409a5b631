package sampleskills

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// samples copies the repo's skills to a temporary folder, builds the Go
// skills binary into it, and loads them.
func samples(t *testing.T) map[string]*skills.Skill {
	t.Helper()
	dir := filepath.Join(testlog.OpenTempDir(t), "skills") // scripts run as a user of their own reach them
	require.NoError(t, filepath.WalkDir("../../skills", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../../skills", p)
		if strings.HasPrefix(rel, ".bin") || strings.Contains(rel, "/data") {
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		info, _ := d.Info()
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, info.Mode().Perm())
	}))
	natstest.Install(t, "../../cmd/narratoria-skills", filepath.Join(dir, ".bin", "narratoria-skills"))
	sk, warns := (&skills.Loader{Dir: dir}).Load()
	require.Empty(t, warns)
	return sk
}

func runScript(t *testing.T, sk *skills.Skill, script, input, state string) runner.Result {
	t.Helper()
	sc := sk.Scripts[script]
	require.NotNil(t, sc, script)
	require.NoError(t, sk.ValidateInput(script, json.RawMessage(input)))
	res := sampleRunner(t).Run(context.Background(), runner.Invocation{Skill: sk.Name, Script: script, Dir: sk.Dir, Path: sc.Path, Timeout: sc.Timeout,
		Input: messages.ScriptInput{RequestID: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", SessionID: "test", ToolID: "t1", Tool: sk.Name + "/" + script,
			Operation: script, Attempt: 1, Input: json.RawMessage(input), State: json.RawMessage(state), Config: sk.Config}}, nil)
	return res
}

// sampleRunner runs the sample skills as a worker does by default: under
// Landlock and the attempt limits, and, as root, each attempt as a user of
// its own in a PID namespace of its own.
func sampleRunner(t *testing.T) *runner.ProcessRunner {
	t.Helper()
	r := &runner.ProcessRunner{Landlock: true}
	if runner.LandlockABI() == 0 {
		t.Log("this kernel offers no Landlock: the samples run unconfined")
	}
	if os.Geteuid() == 0 {
		r.Users = runner.NewUserPool(0, 0)
		t.Cleanup(r.Users.Close)
	}
	return r
}

func events(res runner.Result, typ messages.EventType) []messages.Event {
	var out []messages.Event
	for _, raw := range res.Events {
		if ev, err := messages.DecodeEvent(raw); err == nil && ev.Type() == typ {
			out = append(out, ev)
		}
	}
	return out
}

func TestSampleSkillsThroughTheProcessRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the skills binary")
	}
	sk := samples(t)

	res := runScript(t, sk["dice-roller"], "roll-dice", `{"formula":"4d6kh3+2","seed":7}`, `{}`)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
	var roll struct {
		Total   int    `json:"total"`
		Rolls   []int  `json:"rolls"`
		Formula string `json:"formula"`
	}
	require.NoError(t, json.Unmarshal(res.Done.Output, &roll))
	require.Equal(t, "4d6kh3+2", roll.Formula)
	require.Len(t, roll.Rolls, 4)
	require.True(t, roll.Total >= 5 && roll.Total <= 20)
	require.Len(t, events(res, messages.EventUI), 1)
	require.Len(t, events(res, messages.EventStatePatch), 1)

	res = runScript(t, sk["dice-roller"], "roll-dice", `{"formula":"2d6kh9"}`, `{}`)
	require.Equal(t, messages.ToolFailed, res.State)
	require.Equal(t, "done_not_ok", res.Error.Code)
	require.Contains(t, res.Error.Message, "keep must be 1..2")
	require.Len(t, events(res, messages.EventError), 1)

	res = runScript(t, sk["storyteller"], "narrate", `{"prompt":"I open the door","context":{"dice-roller":{"total":18}}}`, `{}`)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
	require.Contains(t, string(res.Done.Output), "open the door")
	require.Contains(t, string(res.Done.Output), "18")

	res = runScript(t, sk["memory"], "store-memory", `{"text":"The innkeeper owes me a favour","tags":["inn"]}`, `{}`)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
	runScript(t, sk["memory"], "store-memory", `{"text":"A dragon sleeps in the hills"}`, `{}`)
	res = runScript(t, sk["memory"], "recall-memory", `{"query":"what about the innkeeper"}`, `{}`)
	require.Equal(t, messages.ToolSuccess, res.State)
	require.Contains(t, string(res.Done.Output), "innkeeper owes me")
	require.NotContains(t, string(res.Done.Output), "dragon")

	res = runScript(t, sk["reputation"], "update-reputation", `{"faction":"Thieves","delta":100}`, `{"reputation":{"thieves":10}}`)
	require.Equal(t, messages.ToolSuccess, res.State)
	require.Contains(t, string(res.Done.Output), `"standing":100`, "the scale is bounded")

	res = runScript(t, sk["player-choices"], "offer-choices", `{"prompt":"look"}`, `{"lastRoll":{"total":3}}`)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
	ui := events(res, messages.EventUI)
	require.Len(t, ui, 1)
	require.Equal(t, messages.UIEventNarrativeChoice, ui[0].(*messages.UIEvent).Event)
	require.Contains(t, string(ui[0].(*messages.UIEvent).Payload), "Press your luck")

	res = runScript(t, sk["scene-art"], "sketch-scene", `{"prompt":"a misty harbour at dawn"}`, `{}`)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
	assets := events(res, messages.EventAsset)
	require.Len(t, assets, 1)
	svg, err := os.ReadFile(filepath.Join(sk["scene-art"].Dir, assets[0].(*messages.AssetEvent).Path))
	require.NoError(t, err)
	require.Contains(t, string(svg), "a misty harbour at dawn")
}

// TestOpeningReadsWell: the storyteller's first sentence turns the
// player's words into good prose whatever their form.
func TestOpeningReadsWell(t *testing.T) {
	pick := func(o []string) string { return o[0] }
	for in, want := range map[string]string{
		"What can I do now?":                       `You pause and wonder: "What can you do now?"`,
		"Am I still welcome here?":                 `You pause and wonder: "Are you still welcome here?"`,
		"Was I ever in this hall?":                 `You pause and wonder: "Were you ever in this hall?"`,
		"Have I met this knight before?":           `You pause and wonder: "Have you met this knight before?"`,
		"Tell me what I know about him":            "You ask to be told what you know about him.",
		"Describe what I see around me":            `You call out: "Describe what you see around you"`,
		"I attack; what are my options?":           "Heart pounding, you attack; what are your options?",
		"I look around. Was I here?":               "Heart pounding, you look around. Were you here?",
		"I was there when I fell":                  "Heart pounding, you were there when you fell.",
		"I ask the blacksmith to forge me a sword": "Heart pounding, you ask the blacksmith to forge you a sword.",
		"<b>I attack the guard</b>":                `You call out: "<b>you attack the guard</b>"`,
		"I swing my axe at the troll.":             "Heart pounding, you swing your axe at the troll.",
		"I am lost":                                "Heart pounding, you are lost.",
		"I'm hiding behind my shield":              "Heart pounding, you are hiding behind your shield.",
		"Draw me the market square":                `You call out: "Draw me the market square"`,
		"  ":                                       "You hesitate, and the moment passes.",
		"I roll to pick the lock":                  "Heart pounding, you roll to pick the lock.",
		"I give myself a moment, then I":           "Heart pounding, you give yourself a moment, then you.",
	} {
		require.Equal(t, want, opening(in, "", pick), in)
	}
	require.Equal(t, "You swing your axe.", opening("I swing my axe", "terse", pick))
}
