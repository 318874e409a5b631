package messages

import (
	"encoding/json"
	"sort"
	"time"
)

// RegistryEntry is the value of key <skill> in KV narratoria_skills (§6.2):
// what the skill offers and which workers serve it right now.
type RegistryEntry struct {
	// Name is the skill name.
	Name string `json:"name"`
	// Version is the manifest's semver version.
	Version string `json:"version"`
	// Description, DisplayName, Capabilities, Keywords and Priority come from the manifest.
	Description  string   `json:"description"`
	DisplayName  string   `json:"displayName,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	Keywords     []string `json:"keywords,omitempty"`
	Priority     int      `json:"priority"`
	// Examples and NegativeExamples come from the manifest (for the
	// rule-based planner).
	Examples         []string `json:"examples,omitempty"`
	NegativeExamples []string `json:"negativeExamples,omitempty"`
	// Prompt is the skill's prompt.md, injected into the planner's context.
	Prompt string `json:"prompt"`
	// Scripts are the skill's scripts with their input schemas.
	Scripts []RegistryScript `json:"scripts"`
	// Hash identifies the skill's content; workers serving different
	// versions of a skill show different hashes.
	Hash string `json:"hash"`
	// Workers are the workers serving the skill, by worker ID.
	Workers map[string]WorkerInfo `json:"workers"`
	// UpdatedAt is the last change.
	UpdatedAt time.Time `json:"updatedAt"`
}

// RegistryScript describes one script of a registered skill.
type RegistryScript struct {
	// Name, Path, Description, InputSchema and TimeoutMs come from the manifest.
	Name        string          `json:"name"`
	Path        string          `json:"path"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	TimeoutMs   int64           `json:"timeoutMs"`
	// NoReuse is the manifest's "reuse": false.
	NoReuse bool `json:"noReuse,omitempty"`
	// Examples are the manifest script's examples.
	Examples []string `json:"examples,omitempty"`
}

// WorkerInfo is one worker serving a skill, refreshed by its heartbeat.
type WorkerInfo struct {
	// ID, Host, PID and Concurrency describe the worker; LastSeen is its last heartbeat.
	ID          string    `json:"id"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Concurrency int       `json:"concurrency"`
	LastSeen    time.Time `json:"lastSeen"`
	// Running is how many scripts the worker was running at its last
	// heartbeat (all skills): its load, with Concurrency.
	Running int `json:"running"`
}

// LiveWorkers returns the workers seen within ttl of now, sorted by ID.
func (e *RegistryEntry) LiveWorkers(now time.Time, ttl time.Duration) []WorkerInfo {
	var out []WorkerInfo
	for _, w := range e.Workers {
		if now.Sub(w.LastSeen) <= ttl {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Script returns the script of the given name.
func (e *RegistryEntry) Script(name string) (*RegistryScript, bool) {
	for i := range e.Scripts {
		if e.Scripts[i].Name == name {
			return &e.Scripts[i], true
		}
	}
	return nil, false
}

// Resolve finds the script a parsed toolPath names: by script name, or by
// file path under scripts/.
func (e *RegistryEntry) Resolve(ref ToolRef) (*RegistryScript, bool) {
	if ref.Skill != e.Name {
		return nil, false
	}
	if ref.Script != "" {
		return e.Script(ref.Script)
	}
	for i := range e.Scripts {
		p := e.Scripts[i].Path
		if p == "scripts/"+ref.File || p == "./scripts/"+ref.File {
			return &e.Scripts[i], true
		}
	}
	return nil, false
}
