package cli

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

// readmeCommands returns the command lines of README.md's Quickstart that
// run `go run ./cmd/narratoria` with words that start with want, split
// into their arguments (the comment after # dropped, "…" kept as one
// argument).
func readmeCommands(t *testing.T, readme string, want ...string) [][]string {
	t.Helper()
	f, err := os.Open(readme)
	require.NoError(t, err)
	defer f.Close()
	const prefix = "go run ./cmd/narratoria "
	var cmds [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		args := shellWords(strings.TrimPrefix(line, prefix))
		if len(args) >= len(want) && slices.Equal(args[:len(want)], want) {
			cmds = append(cmds, args)
		}
	}
	require.NoError(t, sc.Err())
	return cmds
}

// shellWords splits a README command line as sh would for the simple
// forms the README uses: words, "double-quoted words", and a # comment.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '"':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '"':
			quoted, inWord = true, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// copySkills copies the sample skills to dst without what a build or a
// run left there (skills/.bin, a skill's data/), as a fresh clone has them.
func copySkills(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() && (rel == ".bin" || d.Name() == "data") {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	}))
}

// TestReadmePlanCommands runs the README's plan commands that name a plan
// file exactly as written (from the repository's root, where a fresh
// clone runs them) against a real pipeline on the sample skills: validate
// and run must succeed, and running the same file again must fail at once
// naming the plan ID, while --new-id runs it again.
func TestReadmePlanCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up")
	}
	validate := readmeCommands(t, "../../README.md", "plan", "validate")
	runs := readmeCommands(t, "../../README.md", "plan", "run")
	require.Len(t, validate, 1, "the README validates one plan file")
	require.NotEmpty(t, runs, "the README runs a plan file")

	dir := testlog.OpenTempDir(t) // scripts run as a user of their own reach the skills
	skills := filepath.Join(dir, "skills")
	copySkills(t, "../../skills", skills)
	// What `make run` builds: the Go body of the sample skills (`up` run
	// from a test binary cannot serve as it).
	natstest.Install(t, "../../cmd/narratoria-skills", filepath.Join(skills, ".bin", "narratoria-skills"))
	url := upInProcess(t, dir, skills)
	t.Setenv("NARRATORIA_NATS_URL", url)
	t.Chdir("../..")

	code, out1, errOut := run(t, "", validate[0]...)
	require.Equal(t, 0, code, "%v: %s%s", validate[0], out1, errOut)
	require.Contains(t, out1, "valid plan")

	var first []string
	for _, args := range runs {
		code, out, errOut := run(t, "", args...)
		require.Equal(t, 0, code, "%v: %s%s", args, out, errOut)
		require.Contains(t, out, "succeeded", args)
		require.Contains(t, out, "narrate", args)
		if first == nil && !strings.Contains(strings.Join(args, " "), "--new-id") {
			first = args
		}
	}
	require.NotNil(t, first, "the README runs the plan file as it is")
	// Once more as written: the plan ID ran already. The bound only keeps
	// a regression from hanging the test for the default 90 s.
	code, out2, errOut := run(t, "", append(first, "--timeout", "30s")...)
	require.Equal(t, 1, code, out2)
	require.Contains(t, errOut, "duplicate plan ID")
	b, err := os.ReadFile(first[2])
	require.NoError(t, err)
	var plan struct {
		RequestID string `json:"requestId"`
	}
	require.NoError(t, json.Unmarshal(b, &plan))
	require.Contains(t, errOut, "plan "+plan.RequestID+" was already published", "the error names the plan ID")
	require.Contains(t, errOut, "--new-id", "the error says how to run it again")
	require.NotContains(t, errOut, "scheduler")
}
