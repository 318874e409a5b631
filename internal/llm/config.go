package llm

import (
	"cmp"
	"time"
)

// Defaults of Config.
const (
	// APIKeyEnvDefault names the environment variable of the API key.
	APIKeyEnvDefault = "NARRATORIA_LLM_API_KEY"
	// TemperatureDefault is the planner's sampling temperature.
	TemperatureDefault = 0.2
	// StructuredOutputDefault is how the Plan schema is sent.
	StructuredOutputDefault = "response_format"
	// ProseTimeoutDefault bounds a whole prose stream.
	ProseTimeoutDefault = 20 * time.Second
	// FirstTokenTimeoutDefault bounds the wait for a stream's first words.
	FirstTokenTimeoutDefault = 5 * time.Second
	// ProseMaxTokensDefault bounds the length of the prose.
	ProseMaxTokensDefault = 300
	// ProseTemperatureDefault is the prose's sampling temperature.
	ProseTemperatureDefault = 0.8
)

// Config is the model server the narrator's planner and prose use (the
// narrator.llm section of the configuration).
type Config struct {
	// BaseURL of the API, e.g. http://127.0.0.1:8080/v1 (llama-server) or
	// http://127.0.0.1:11434/v1 (Ollama). Required with planner: llm or
	// prose: llm. Default none.
	BaseURL string `yaml:"baseURL"`
	// Model name, e.g. phi-3.5-mini-instruct. Required with planner: llm
	// or prose: llm. Default none.
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the API key. Default
	// NARRATORIA_LLM_API_KEY (may be unset for local servers).
	APIKeyEnv string `yaml:"apiKeyEnv"`
	// Temperature of the planner's sampling. Default 0.2.
	Temperature float64 `yaml:"temperature"`
	// StructuredOutput says how the Plan schema is sent for constrained
	// decoding: response_format (llama.cpp llama-server, vLLM, OpenAI),
	// format (Ollama), both, or none. Default response_format.
	StructuredOutput string `yaml:"structuredOutput"`
	// MaxTokensPerHour is the model tokens (prompt and completion) this
	// narrator may spend in any hour: of the whole deployment without
	// tenants, of each tenant without a budget of its own (`narratoria
	// tenant add --max-tokens-per-hour`) with them. A call over it is
	// refused (logged, counted) and the rule planner or the template prose
	// answers. Default 0: no limit.
	MaxTokensPerHour int64 `yaml:"maxTokensPerHour"`
	// ProseTimeout bounds a whole prose stream; past it the template prose
	// is the narration's. Default 20s.
	ProseTimeout time.Duration `yaml:"proseTimeout"`
	// FirstTokenTimeout bounds the wait for the prose's first words.
	// Default 5s.
	FirstTokenTimeout time.Duration `yaml:"firstTokenTimeout"`
	// ProseMaxTokens bounds the prose's length (max_tokens). Default 300.
	ProseMaxTokens int `yaml:"proseMaxTokens"`
	// ProseTemperature is the prose's sampling temperature, 0..2.
	// Default 0.8.
	ProseTemperature float64 `yaml:"proseTemperature"`
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.APIKeyEnv = cmp.Or(c.APIKeyEnv, APIKeyEnvDefault)
	c.StructuredOutput = cmp.Or(c.StructuredOutput, StructuredOutputDefault)
	c.Temperature = cmp.Or(c.Temperature, TemperatureDefault)
	c.ProseTimeout = cmp.Or(c.ProseTimeout, ProseTimeoutDefault)
	c.FirstTokenTimeout = cmp.Or(c.FirstTokenTimeout, FirstTokenTimeoutDefault)
	c.ProseMaxTokens = cmp.Or(c.ProseMaxTokens, ProseMaxTokensDefault)
	c.ProseTemperature = cmp.Or(c.ProseTemperature, ProseTemperatureDefault)
	return c
}
