// Package sampleskills holds the Go bodies of the sample skills shipped in
// skills/ (storyteller, dice-roller, memory, reputation). The scripts in
// each skill's scripts/ folder are small sh wrappers that run the
// narratoria-skills binary built from cmd/narratoria-skills by `make run`;
// player-choices and scene-art are plain POSIX sh to show any language
// works.
package sampleskills

import (
	"github.com/narratoria/runtime/pkg/skillkit"
)

// Scripts maps "<skill>/<script>" to its body.
var Scripts = map[string]skillkit.Func{
	"storyteller/narrate":          Narrate,
	"dice-roller/roll-dice":        RollDice,
	"memory/store-memory":          StoreMemory,
	"memory/recall-memory":         RecallMemory,
	"reputation/update-reputation": UpdateReputation,
	"reputation/query-reputation":  QueryReputation,
}
