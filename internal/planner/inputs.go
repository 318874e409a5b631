package planner

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/narratoria/runtime/pkg/messages"
)

// Input extraction is the rule-based planner's last step for each chosen
// script: the player's words become the script's input. The planner does
// not parse the words into the script's fields: a string field gets the
// player's words whole, and the skill reads what it needs from them (the
// reputation skill finds the faction's name in "I bribe the Ashmoor Cartel",
// the memory skill stores the sentence, the narration skill tells it in the
// second person). Only a dice formula is taken out of the words.

// diceFormula finds a dice formula ("1d20+5", "2d6 - 1", "d8").
var diceFormula = regexp.MustCompile(`(?i)\b\d{0,3}d\d{1,4}(?:\s*[+-]\s*\d{1,4})*\b`)

// defaultFormula is the formula of a script that takes one when the words
// hold none.
const defaultFormula = "1d20"

// Inputs fills a script's input from the player's words (text) using its
// input schema: a "formula" property gets the dice formula found in the
// text without spaces (else 1d20); another string property gets the text
// whole, with a leading "$" doubled so that it is not read as a reference
// (§9.2); a property with a default, or of another type, is left to the
// script. A script without an input schema (or with one that does not
// decode) gets {"prompt": text}.
func Inputs(s *messages.RegistryScript, text string) json.RawMessage {
	literal := escapeRef(text)
	in := map[string]any{}
	var schema struct {
		Properties map[string]struct {
			Type    any `json:"type"`
			Default any `json:"default"`
		} `json:"properties"`
	}
	if len(s.InputSchema) > 0 && json.Unmarshal(s.InputSchema, &schema) == nil {
		for name, prop := range schema.Properties {
			if prop.Default != nil {
				continue
			}
			switch {
			case name == "formula":
				in[name] = formulaIn(text)
			case prop.Type == "string":
				in[name] = literal
			}
		}
	} else {
		in["prompt"] = literal
	}
	b, _ := json.Marshal(in)
	return b
}

// formulaIn is the first dice formula of text without spaces, else 1d20.
func formulaIn(text string) string {
	if f := strings.ReplaceAll(diceFormula.FindString(text), " ", ""); f != "" {
		return f
	}
	return defaultFormula
}

// escapeRef keeps player text starting with "$" from being read as a
// reference (§9.2): "$$" is a literal "$".
func escapeRef(s string) string {
	if strings.HasPrefix(s, "$") {
		return "$" + s
	}
	return s
}
