// Package planner turns a player's prompt into a Plan JSON (docs/spec.md
// §8.1, §9.1), without NATS. The narrator is the component around it: it
// builds the Catalogue from the registry and health buckets, calls a
// Planner, checks and publishes the plan.
//
// Two planners are shipped. RulePlanner needs no model: it scores every
// skill of the catalogue against the prompt (score.go: the prompt is read
// as players type it — chat words written out and slips of the keyboard
// corrected in typed.go, negated and hypothetical actions cut and the rest
// split into sentences and clauses in scope.go — guarded against
// injections and other languages (language.go), compared with the skills'
// examples and keywords (intent.go) and with a logistic model learned from
// them (learn.go), and the skills at or above the threshold are chosen),
// turns the player's words into each chosen script's inputs (inputs.go),
// and ends the plan with a narration skill reading their outputs. It reads
// English only: UnreadLanguage names the language of a prompt it plans
// storyteller-only. Explain shows those steps for `narratoria plan
// explain`. LLMPlanner asks an OpenAI-compatible chat-completions endpoint
// for the plan.
//
// Both also answer a running plan's request for more context
// (ContextPlanner).
package planner
