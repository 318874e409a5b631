// Package llm talks to an OpenAI-compatible chat-completions server
// (llama.cpp llama-server, Ollama's /v1, vLLM, OpenAI) for the narrator's
// planner and prose (docs/spec.md §8, §13): one answer at a time
// (Complete) or streamed as server-sent events (Stream), each call
// counted — prompt and completion tokens from the server's usage, its
// latency, its failures by kind — on an injected Prometheus registerer
// (Meter), and refused when its tenant's hourly token budget is spent
// (Budget). ExtractJSON repairs the form of the JSON small models write
// for a structured request. It knows nothing of NATS.
package llm
