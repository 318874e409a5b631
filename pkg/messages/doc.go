// Package messages holds the wire contract of Narratoria Runtime: the JSON
// payloads that travel between the game server, the narrator, the scheduler
// and the skill workers (docs/spec.md §1, §3, §4.9, §4.10, §5, §7), the JSON Schemas
// that describe them, the subject builders, and the small pure functions every
// component needs to agree on (tool-path parsing, retry backoff, the deep
// merge of session state, "$ref" resolution).
//
// It is the leaf of the project: it imports no other project package, logs
// nothing and returns errors that name the field at fault.
package messages
