package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// manifestJSON returns a valid manifest, changed by edit, as JSON.
func manifestJSON(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"name":        "dice-roller",
		"version":     "1.0.0",
		"description": "Rolls dice.",
		"scripts": []any{
			map[string]any{"name": "roll", "path": "scripts/roll.sh"},
		},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func script0(m map[string]any) map[string]any { return m["scripts"].([]any)[0].(map[string]any) }

func TestDecodeManifest(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 65)
	cases := []struct {
		name string
		doc  []byte // used when set; else manifestJSON(edit)
		edit func(m map[string]any)
		// wantErr lists substrings of the error, each a "field: message".
		wantErr []string
		// goOnly marks rules the JSON Schema cannot express.
		goOnly bool
		check  func(t *testing.T, m *Manifest)
	}{
		{name: "minimal, with defaults", check: func(t *testing.T, m *Manifest) {
			require.Equal(t, "dice-roller", m.Name)
			require.Equal(t, PriorityDefault, m.Priority)
			require.Nil(t, m.RetryPolicy)
			require.Equal(t, []ScriptSpec{{Name: "roll", Path: "scripts/roll.sh", TimeoutMs: ScriptTimeoutDefaultMs}}, m.Scripts)
		}},
		{name: "every field", edit: func(m map[string]any) {
			m["displayName"] = "Dice Roller"
			m["capabilities"] = []any{"dice"}
			m["keywords"] = []any{"roll", "dice"}
			m["priority"] = 0
			m["retryPolicy"] = map[string]any{"maxRetries": 0, "backoffMs": 0}
			m["env"] = []any{"OPENAI_API_KEY", "_X", "OPENAI_API_KEY"}
			m["scripts"] = []any{
				map[string]any{"name": "roll", "path": "./scripts/roll.sh", "description": "d", "timeout": 300000,
					"inputSchema": map[string]any{"type": "object", "description": "<b>"}},
				map[string]any{"name": "stats", "path": "scripts/sub/.stats", "timeout": 1000},
			}
		}, check: func(t *testing.T, m *Manifest) {
			require.Equal(t, "Dice Roller", m.DisplayName)
			require.Equal(t, []string{"dice"}, m.Capabilities)
			require.Equal(t, []string{"roll", "dice"}, m.Keywords)
			require.Equal(t, 0, m.Priority, "an explicit 0 is kept")
			require.Equal(t, &RetryPolicy{MaxRetries: 0, BackoffMs: 0}, m.RetryPolicy, "explicit zeros are kept")
			require.Equal(t, []string{"OPENAI_API_KEY", "_X"}, m.Env, "duplicates dropped")
			require.Equal(t, int64(300000), m.Scripts[0].TimeoutMs)
			require.JSONEq(t, `{"type":"object","description":"<b>"}`, string(m.Scripts[0].InputSchema))
			require.Contains(t, string(m.Scripts[0].InputSchema), "<b>", "no HTML escaping")
			require.Equal(t, int64(1000), m.Scripts[1].TimeoutMs)
		}},
		{name: "partial retryPolicy takes the plan defaults", edit: func(m map[string]any) {
			m["retryPolicy"] = map[string]any{"maxRetries": 1}
		}, check: func(t *testing.T, m *Manifest) {
			require.Equal(t, &RetryPolicy{MaxRetries: 1, BackoffMs: BackoffMsDefault}, m.RetryPolicy)
		}},
		{name: "integers spelled as 70.0 and 2e3", doc: []byte(`{"name":"a","version":"1.0.0","description":"d","priority":70.0,
			"scripts":[{"name":"r","path":"scripts/r","timeout":2e3}]}`), check: func(t *testing.T, m *Manifest) {
			require.Equal(t, 70, m.Priority)
			require.Equal(t, int64(2000), m.Scripts[0].TimeoutMs)
		}},
		{name: "unknown fields are ignored", edit: func(m map[string]any) {
			m["homepage"] = "https://example.com"
			script0(m)["shell"] = "bash"
		}, check: func(t *testing.T, m *Manifest) { require.Equal(t, "dice-roller", m.Name) }},
		{name: "keys are case-sensitive: NAME does not override name", doc: []byte(`{"name":"a","NAME":"Evil Name","version":"1.0.0","description":"d",
			"scripts":[{"name":"r","path":"scripts/r","Path":"/bin/sh"}]}`), check: func(t *testing.T, m *Manifest) {
			require.Equal(t, "a", m.Name)
			require.Equal(t, "scripts/r", m.Scripts[0].Path)
		}},
		{name: "prerelease and build versions", edit: func(m map[string]any) { m["version"] = "2.0.0-beta.1+build.5" },
			check: func(t *testing.T, m *Manifest) { require.Equal(t, "2.0.0-beta.1+build.5", m.Version) }},
		{name: "64-character name", edit: func(m map[string]any) { m["name"] = long[:64] }},

		// the document
		{name: "not JSON", doc: []byte(`{"name":`), wantErr: []string{"not valid JSON"}, goOnly: true},
		{name: "trailing data", doc: append(manifestJSON(t, nil), []byte(` {}`)...), wantErr: []string{"not valid JSON: unexpected data after the JSON value"}, goOnly: true},
		{name: "not an object", doc: []byte(`["a"]`), wantErr: []string{"must be object"}},
		{name: "too large", doc: []byte(`{"description":"` + strings.Repeat("x", MaxManifestBytes) + `"}`), wantErr: []string{"the limit is 1048576"}, goOnly: true},
		{name: "required fields", doc: []byte(`{}`), wantErr: []string{"missing required field(s) name, version, description, scripts"}},

		// name
		{name: "name uppercase", edit: func(m map[string]any) { m["name"] = "Dice" }, wantErr: []string{`name: "Dice" must match ^[a-z0-9-]{1,64}$`}},
		{name: "name with a slash", edit: func(m map[string]any) { m["name"] = "a/b" }, wantErr: []string{"name: "}},
		{name: "name too long", edit: func(m map[string]any) { m["name"] = long }, wantErr: []string{"name: "}},
		{name: "name empty", edit: func(m map[string]any) { m["name"] = "" }, wantErr: []string{"name: "}},
		{name: "name not a string", edit: func(m map[string]any) { m["name"] = 7 }, wantErr: []string{"name: must be string"}},

		// version, description, displayName
		{name: "version not semver", edit: func(m map[string]any) { m["version"] = "1.0" }, wantErr: []string{`version: "1.0" must be a semantic version`}},
		{name: "version with a leading zero", edit: func(m map[string]any) { m["version"] = "01.0.0" }, wantErr: []string{"version: "}},
		{name: "version with v", edit: func(m map[string]any) { m["version"] = "v1.0.0" }, wantErr: []string{"version: "}},
		{name: "version with an empty prerelease part", edit: func(m map[string]any) { m["version"] = "1.0.0-a..b" }, wantErr: []string{"version: "}},
		{name: "description empty", edit: func(m map[string]any) { m["description"] = "" }, wantErr: []string{"description: must be at least 1 characters"}},
		{name: "description too long", edit: func(m map[string]any) { m["description"] = strings.Repeat("x", 2001) }, wantErr: []string{"description: must be at most 2000 characters"}},
		{name: "displayName not a string", edit: func(m map[string]any) { m["displayName"] = true }, wantErr: []string{"displayName: must be string"}},

		// capabilities, keywords
		{name: "capabilities not an array", edit: func(m map[string]any) { m["capabilities"] = "dice" }, wantErr: []string{"capabilities: must be array"}},
		{name: "capability not a string", edit: func(m map[string]any) { m["capabilities"] = []any{"a", 1} }, wantErr: []string{"capabilities[1]: must be string"}},
		{name: "keyword not a string", edit: func(m map[string]any) { m["keywords"] = []any{nil} }, wantErr: []string{"keywords[0]: must be string"}},

		// priority
		{name: "priority below 0", edit: func(m map[string]any) { m["priority"] = -1 }, wantErr: []string{"priority: must be >= 0 (got -1)"}},
		{name: "priority above 100", edit: func(m map[string]any) { m["priority"] = 101 }, wantErr: []string{"priority: must be <= 100 (got 101)"}},
		{name: "priority not an integer", edit: func(m map[string]any) { m["priority"] = 1.5 }, wantErr: []string{"priority: must be integer"}},
		{name: "priority null", edit: func(m map[string]any) { m["priority"] = nil }, wantErr: []string{"priority: must be integer"}},

		// retryPolicy
		{name: "retryPolicy not an object", edit: func(m map[string]any) { m["retryPolicy"] = 3 }, wantErr: []string{"retryPolicy: must be object"}},
		{name: "maxRetries above 10", edit: func(m map[string]any) { m["retryPolicy"] = map[string]any{"maxRetries": 11} }, wantErr: []string{"retryPolicy.maxRetries: must be <= 10"}},
		{name: "maxRetries below 0", edit: func(m map[string]any) { m["retryPolicy"] = map[string]any{"maxRetries": -1} }, wantErr: []string{"retryPolicy.maxRetries: must be >= 0"}},
		{name: "backoffMs below 0", edit: func(m map[string]any) { m["retryPolicy"] = map[string]any{"backoffMs": -5} }, wantErr: []string{"retryPolicy.backoffMs: must be >= 0"}},
		{name: "backoffMs above an hour", edit: func(m map[string]any) { m["retryPolicy"] = map[string]any{"backoffMs": 3600001} }, wantErr: []string{"retryPolicy.backoffMs: must be <= 3600000"}},

		// env
		{name: "env not an array", edit: func(m map[string]any) { m["env"] = "KEY" }, wantErr: []string{"env: must be array"}},
		{name: "env name with a dash", edit: func(m map[string]any) { m["env"] = []any{"OK", "NOT-OK"} }, wantErr: []string{`env[1]: "NOT-OK" must be an environment variable name`}},
		{name: "env name starting with a digit", edit: func(m map[string]any) { m["env"] = []any{"1KEY"} }, wantErr: []string{"env[0]: "}},
		{name: "env name reserved", edit: func(m map[string]any) { m["env"] = []any{"NARRATORIA_NATS_PASSWORD"} }, wantErr: []string{`env[0]: "NARRATORIA_NATS_PASSWORD" is reserved`}},
		{name: "env name not a string", edit: func(m map[string]any) { m["env"] = []any{5} }, wantErr: []string{"env[0]: must be string"}},

		// scripts
		{name: "scripts missing", edit: func(m map[string]any) { delete(m, "scripts") }, wantErr: []string{"missing required field(s) scripts"}},
		{name: "scripts empty", edit: func(m map[string]any) { m["scripts"] = []any{} }, wantErr: []string{"scripts: must list at least one script"}},
		{name: "scripts not an array", edit: func(m map[string]any) { m["scripts"] = map[string]any{} }, wantErr: []string{"scripts: must be array"}},
		{name: "script not an object", edit: func(m map[string]any) { m["scripts"] = []any{"scripts/roll.sh"} }, wantErr: []string{"scripts[0]: must be object"}},
		{name: "script without name and path", edit: func(m map[string]any) { m["scripts"] = []any{map[string]any{}} }, wantErr: []string{"scripts[0]: missing required field(s) name, path"}},
		{name: "script name invalid", edit: func(m map[string]any) { script0(m)["name"] = "Roll It" }, wantErr: []string{`scripts[0].name: "Roll It" must match`}},
		{name: "script names duplicated", edit: func(m map[string]any) {
			m["scripts"] = append(m["scripts"].([]any), map[string]any{"name": "other", "path": "scripts/o"}, map[string]any{"name": "roll", "path": "scripts/roll2.sh"})
		}, wantErr: []string{`scripts[2].name: duplicate script name "roll" (also scripts[0])`}, goOnly: true},

		// script path
		{name: "path absolute", edit: func(m map[string]any) { script0(m)["path"] = "/bin/sh" }, wantErr: []string{`scripts[0].path: "/bin/sh" must be relative to the skill folder`}},
		{name: "path with ..", edit: func(m map[string]any) { script0(m)["path"] = "../x" }, wantErr: []string{`scripts[0].path: "../x" must not contain ".."`}},
		{name: "path escaping through scripts/..", edit: func(m map[string]any) { script0(m)["path"] = "scripts/../../x" }, wantErr: []string{`scripts[0].path: "scripts/../../x" must not contain ".."`}},
		{name: "path with a . segment", edit: func(m map[string]any) { script0(m)["path"] = "scripts/./x" }, wantErr: []string{"scripts[0].path: "}},
		{name: "path with an empty segment", edit: func(m map[string]any) { script0(m)["path"] = "scripts//x" }, wantErr: []string{"scripts[0].path: "}},
		{name: "path is the folder", edit: func(m map[string]any) { script0(m)["path"] = "scripts/" }, wantErr: []string{"scripts[0].path: "}},
		{name: "path outside scripts/", edit: func(m map[string]any) { script0(m)["path"] = "roll.sh" }, wantErr: []string{`scripts[0].path: "roll.sh" must be a file under scripts/`}},
		{name: "path with a backslash", edit: func(m map[string]any) { script0(m)["path"] = `scripts\..\x` }, wantErr: []string{"must not contain backslashes"}},
		{name: "path with a control character", edit: func(m map[string]any) { script0(m)["path"] = "scripts/a\x00b" }, wantErr: []string{"must not contain backslashes or control characters"}},
		{name: "path empty", edit: func(m map[string]any) { script0(m)["path"] = "" }, wantErr: []string{"scripts[0].path: "}},
		{name: "path too long", edit: func(m map[string]any) { script0(m)["path"] = "scripts/" + strings.Repeat("x", 505) }, wantErr: []string{"scripts[0].path: ", "must be at most 512 characters"}},

		// inputSchema, timeout
		{name: "inputSchema not an object", edit: func(m map[string]any) { script0(m)["inputSchema"] = "object" }, wantErr: []string{"scripts[0].inputSchema: must be object"}},
		{name: "timeout below 1000", edit: func(m map[string]any) { script0(m)["timeout"] = 5 }, wantErr: []string{"scripts[0].timeout: must be >= 1000 (got 5)"}},
		{name: "timeout above 300000", edit: func(m map[string]any) { script0(m)["timeout"] = 300001 }, wantErr: []string{"scripts[0].timeout: must be <= 300000"}},
		{name: "timeout as a string", edit: func(m map[string]any) { script0(m)["timeout"] = "30s" }, wantErr: []string{"scripts[0].timeout: must be integer"}},

		// everything is reported at once
		{name: "every problem listed", edit: func(m map[string]any) {
			m["name"] = "Bad"
			m["priority"] = 101
			m["scripts"] = []any{
				map[string]any{"name": "a", "path": "/bin/sh", "timeout": 5},
				map[string]any{"name": "a", "path": "scripts/a"},
			}
		}, wantErr: []string{"name: ", "priority: must be <= 100", "scripts[0].path: ", "scripts[0].timeout: must be >= 1000", "scripts[1].name: duplicate"}, goOnly: true},
	}
	schema, err := CompiledSchema(SchemaManifest)
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			doc := c.doc
			if doc == nil {
				doc = manifestJSON(t, c.edit)
			}
			m, err := DecodeManifest(doc)
			if len(c.wantErr) == 0 {
				require.NoError(t, err)
				if c.check != nil {
					c.check(t, m)
				}
			} else {
				require.Error(t, err)
				require.Nil(t, m)
				require.ErrorIs(t, err, ErrInvalidManifest)
				var me *ManifestError
				require.ErrorAs(t, err, &me)
				require.NotEmpty(t, me.Problems)
				for _, want := range c.wantErr {
					require.Contains(t, err.Error(), want)
				}
			}
			// The shipped schema alone gives the same verdict, for users of
			// other languages, except where only Go can tell.
			if c.goOnly {
				return
			}
			v, err := decodeForSchema(doc)
			require.NoError(t, err)
			require.Equal(t, len(c.wantErr) > 0, len(ValidateSchema(schema, v)) > 0, "schema verdict")
		})
	}
}

// TestManifestProblemsNameFields checks the exact problem list of a broken
// manifest: one problem per field, in field order.
func TestManifestProblemsNameFields(t *testing.T) {
	t.Parallel()
	_, err := DecodeManifest([]byte(`{"name":"x","version":"1.0.0","description":"d","scripts":[{"name":"run","path":"scripts/run","timeout":5}]}`))
	var me *ManifestError
	require.ErrorAs(t, err, &me)
	require.Equal(t, []Problem{{Field: "scripts[0].timeout", Message: "must be >= 1000 (got 5)"}}, me.Problems)
	require.Equal(t, "scripts[0].timeout: must be >= 1000 (got 5)", err.Error())
}

// TestManifestPatternsMatchSchema keeps the Go rules and the schema's
// patterns the same.
func TestManifestPatternsMatchSchema(t *testing.T) {
	t.Parallel()
	b, err := Schemas.ReadFile("schemas/" + SchemaManifest)
	require.NoError(t, err)
	var doc struct {
		Properties struct {
			Name    struct{ Pattern string } `json:"name"`
			Version struct{ Pattern string } `json:"version"`
			Env     struct {
				Items struct{ Pattern string } `json:"items"`
			} `json:"env"`
			Scripts struct {
				Items struct {
					Properties struct {
						Name struct{ Pattern string } `json:"name"`
						Path struct {
							Pattern   string `json:"pattern"`
							MaxLength int    `json:"maxLength"`
						} `json:"path"`
					} `json:"properties"`
				} `json:"items"`
			} `json:"scripts"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	p := doc.Properties
	require.Equal(t, skillNamePattern, p.Name.Pattern)
	require.Equal(t, skillNamePattern, p.Scripts.Items.Properties.Name.Pattern)
	require.Equal(t, semverPattern, p.Version.Pattern)
	require.Equal(t, envNamePattern, p.Env.Items.Pattern)
	require.Equal(t, MaxScriptPathLength, p.Scripts.Items.Properties.Path.MaxLength)

	// The path rule is code in Go and a regular expression in the schema:
	// they must agree.
	re := regexp.MustCompile(p.Scripts.Items.Properties.Path.Pattern)
	for _, path := range []string{
		"scripts/a", "./scripts/a", "scripts/sub/a.sh", "scripts/.hidden", "scripts/...", "scripts/..a", "scripts/a..",
		"scripts/é", "scripts/a b", "", "scripts", "scripts/", "./scripts", "/scripts/a", "../scripts/a", "scripts/../a",
		"scripts/./a", "scripts//a", "scripts/a/", "././scripts/a", "scripts/.", "scripts/..", "scripts/a\\b",
		"scripts/a\x01", "scripts/a\x7f", "script/a", "Scripts/a", "a/scripts/b", "./", ".scripts/a", "scripts/a/../b",
	} {
		require.Equal(t, re.MatchString(path), scriptPathProblem(path) == "", "path %q", path)
	}
}

// TestManifestSchemaDescribesEveryProperty: each property of the manifest
// schema carries a description, since the schema doubles as documentation.
func TestManifestSchemaDescribesEveryProperty(t *testing.T) {
	t.Parallel()
	b, err := Schemas.ReadFile("schemas/" + SchemaManifest)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	var walk func(path string, node map[string]any)
	walk = func(path string, node map[string]any) {
		if props, ok := node["properties"].(map[string]any); ok {
			for name, p := range props {
				prop := p.(map[string]any)
				require.NotEmpty(t, prop["description"], "%s.%s has no description", path, name)
				walk(path+"."+name, prop)
			}
		}
		if items, ok := node["items"].(map[string]any); ok {
			require.NotEmpty(t, items["description"], "%s[] has no description", path)
			walk(path+"[]", items)
		}
	}
	require.NotEmpty(t, doc["description"])
	walk("", doc)
}

// TestEmbeddedSchemasCompile compiles every JSON file in schemas/ (a file
// that is not embedded fails, as CompiledSchema does not know it) and checks
// its $id and draft.
func TestEmbeddedSchemasCompile(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("schemas")
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		n++
		_, err := CompiledSchema(e.Name())
		require.NoError(t, err, e.Name())
		b, err := os.ReadFile("schemas/" + e.Name())
		require.NoError(t, err)
		var head struct {
			ID     string `json:"$id"`
			Schema string `json:"$schema"`
		}
		require.NoError(t, json.Unmarshal(b, &head), e.Name())
		require.Equal(t, schemaURL+e.Name(), head.ID, e.Name())
		require.Equal(t, "https://json-schema.org/draft/2020-12/schema", head.Schema, e.Name())
	}
	require.GreaterOrEqual(t, n, 4)
	for _, name := range []string{SchemaPlan, SchemaResult, SchemaEvent, SchemaManifest} {
		_, err := CompiledSchema(name)
		require.NoError(t, err, name)
	}
}

func TestManifestScriptLookup(t *testing.T) {
	t.Parallel()
	m, err := DecodeManifest([]byte(`{"name":"a","version":"1.0.0","description":"d","scripts":[
		{"name":"roll","path":"./scripts/roll.sh"},
		{"name":"deep","path":"scripts/sub/deep"},
		{"name":"nested","path":"scripts/scripts/x"},
		{"name":"plain","path":"scripts/x"}]}`))
	require.NoError(t, err)

	s, ok := m.Script("deep")
	require.True(t, ok)
	require.Equal(t, "scripts/sub/deep", s.Path)
	_, ok = m.Script("nope")
	require.False(t, ok)

	for p, want := range map[string]string{
		"scripts/roll.sh": "roll", "roll.sh": "roll", "./scripts/roll.sh": "roll",
		"sub/deep": "deep", "scripts/sub/deep": "deep",
		"scripts/x": "plain", "x": "plain", "scripts/scripts/x": "nested",
	} {
		s, ok := m.ScriptByPath(p)
		require.True(t, ok, p)
		require.Equal(t, want, s.Name, p)
	}
	for _, p := range []string{"", "deep", "scripts/", "sub", "/scripts/x", "../x"} {
		_, ok := m.ScriptByPath(p)
		require.False(t, ok, p)
	}
}

// FuzzDecodeManifestInvariants: DecodeManifest never panics, fails only
// with a *ManifestError, and whatever it accepts obeys every rule.
func FuzzDecodeManifestInvariants(f *testing.F) {
	f.Add(manifestJSON(f, nil))
	f.Add(manifestJSON(f, func(m map[string]any) {
		m["priority"] = 7
		m["retryPolicy"] = map[string]any{"backoffMs": 5}
		m["env"] = []any{"A"}
		script0(m)["inputSchema"] = map[string]any{"type": "object"}
		script0(m)["timeout"] = 1000
	}))
	f.Add([]byte(`{"name":"a","version":"1.0.0","description":"d","priority":1e2,"scripts":[{"name":"r","path":"scripts/r"},{"name":"r","path":"scripts/../r"}]}`))
	f.Add([]byte(`{"name":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			var me *ManifestError
			if !errors.As(err, &me) || len(me.Problems) == 0 || !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("unexpected error: %#v", err)
			}
			return
		}
		if !ValidSkillName(m.Name) || !semverRe.MatchString(m.Version) || m.Description == "" {
			t.Fatalf("accepted a bad name, version or description: %+v", m)
		}
		if m.Priority < 0 || m.Priority > 100 || len(m.Scripts) == 0 {
			t.Fatalf("accepted priority %d with %d scripts", m.Priority, len(m.Scripts))
		}
		if rp := m.RetryPolicy; rp != nil && (rp.MaxRetries < 0 || rp.MaxRetries > MaxRetriesLimit || rp.BackoffMs < 0) {
			t.Fatalf("accepted retry policy %+v", *rp)
		}
		for _, e := range m.Env {
			if !envNameRe.MatchString(e) || strings.HasPrefix(e, ReservedEnvPrefix) {
				t.Fatalf("accepted env %q", e)
			}
		}
		names := map[string]bool{}
		for _, s := range m.Scripts {
			if names[s.Name] || !ValidSkillName(s.Name) {
				t.Fatalf("accepted script name %q", s.Name)
			}
			names[s.Name] = true
			if scriptPathProblem(s.Path) != "" {
				t.Fatalf("accepted path %q", s.Path)
			}
			if s.TimeoutMs < ScriptTimeoutMinMs || s.TimeoutMs > ScriptTimeoutMaxMs {
				t.Fatalf("accepted timeout %d", s.TimeoutMs)
			}
			if s.InputSchema != nil && !json.Valid(s.InputSchema) {
				t.Fatalf("inputSchema is not JSON: %s", s.InputSchema)
			}
			if got, ok := m.Script(s.Name); !ok || got.Path != s.Path {
				t.Fatalf("Script(%q) does not find it", s.Name)
			}
			if _, ok := m.ScriptByPath(s.Path); !ok {
				t.Fatalf("ScriptByPath(%q) does not find it", s.Path)
			}
		}
	})
}

func ExampleDecodeManifest() {
	_, err := DecodeManifest([]byte(`{"name":"dice-roller","version":"1.0.0","description":"Rolls dice.",
		"scripts":[{"name":"roll","path":"../roll.sh","timeout":5}]}`))
	for _, p := range err.(*ManifestError).Problems {
		fmt.Println(p)
	}
	m, _ := DecodeManifest([]byte(`{"name":"dice-roller","version":"1.0.0","description":"Rolls dice.",
		"scripts":[{"name":"roll","path":"scripts/roll.sh"}]}`))
	fmt.Println(m.Priority, m.Scripts[0].TimeoutMs)
	// Output:
	// scripts[0].path: "../roll.sh" must not contain "..", "." or empty segments
	// scripts[0].timeout: must be >= 1000 (got 5)
	// 50 30000
}
