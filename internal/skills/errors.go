package skills

import "errors"

// ErrInvalidInput is the sentinel every *InputError matches: a tool input
// that does not match its script's inputSchema.
var ErrInvalidInput = errors.New("invalid tool input")

// ErrUnknownScript is returned when a script name or toolPath does not name a
// script of the skill.
var ErrUnknownScript = errors.New("unknown script")

// ErrOutsideSkill is returned when a skill's file resolves, through symlinks,
// to a place outside the skill folder.
var ErrOutsideSkill = errors.New("resolves outside the skill folder")

// ErrMissingVariable is returned when config.json names a "${VAR}" that is not
// set in the loader's environment.
var ErrMissingVariable = errors.New("environment variable not set")
