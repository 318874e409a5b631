package narrator

import (
	"testing"
	"time"

	"github.com/narratoria/runtime/internal/planner"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "defaults", cfg: Config{}},
		{name: "unknown planner", cfg: Config{Planner: "magic"}, wantErr: "narrator.planner"},
		{name: "llm without URL", cfg: Config{Planner: "llm", LLM: planner.LLMConfig{Model: "m"}}, wantErr: "narrator.llm.baseURL"},
		{name: "llm without model", cfg: Config{Planner: "llm", LLM: planner.LLMConfig{BaseURL: "http://x"}}, wantErr: "narrator.llm.model"},
		{name: "too many attempts", cfg: Config{MaxAttempts: 21}, wantErr: "narrator.maxAttempts"},
		{name: "no sessions", cfg: Config{Sessions: -1}, wantErr: "narrator.sessions"},
		{name: "short ack wait", cfg: Config{AckWait: time.Millisecond}, wantErr: "narrator.ackWait"},
		{name: "hot model", cfg: Config{LLM: planner.LLMConfig{Temperature: 3}}, wantErr: "narrator.llm.temperature"},
		{name: "negative plan timeout", cfg: Config{PlanTimeoutMs: -1}, wantErr: "narrator.planTimeoutMs"},
		{name: "unknown prose", cfg: Config{Prose: "poetry"}, wantErr: "narrator.prose"},
		{name: "prose without a model", cfg: Config{Prose: "llm", LLM: planner.LLMConfig{BaseURL: "http://x"}}, wantErr: "narrator.llm.model"},
		{name: "model prose", cfg: Config{Prose: "llm", LLM: planner.LLMConfig{BaseURL: "http://x", Model: "m"}}},
		{name: "hot prose", cfg: Config{LLM: planner.LLMConfig{ProseTemperature: 2.5}}, wantErr: "narrator.llm.proseTemperature"},
		{name: "negative budget", cfg: Config{LLM: planner.LLMConfig{MaxTokensPerHour: -1}}, wantErr: "narrator.llm.maxTokensPerHour"},
		{name: "hasty prose", cfg: Config{LLM: planner.LLMConfig{FirstTokenTimeout: time.Millisecond}}, wantErr: "firstTokenTimeout"},
		{name: "no prose tokens", cfg: Config{LLM: planner.LLMConfig{ProseMaxTokens: -1}}, wantErr: "narrator.llm.proseMaxTokens"},
		{name: "negative grace", cfg: Config{ShutdownGrace: -time.Second}, wantErr: "narrator.shutdownGrace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.WithDefaults().Validate()
			if c.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.wantErr)
		})
	}
	require.Equal(t, ShutdownGraceDefault, Config{}.WithDefaults().ShutdownGrace)
}
