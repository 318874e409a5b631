package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/narratoria/runtime/internal/config"
	"github.com/narratoria/runtime/internal/console"
)

// TestHashPassword: the printed entry, pasted under console.users, loads
// and its hash is the password's; --token prints a token once and the
// entry holds its hash only; a short password and a bad role are refused.
func TestHashPassword(t *testing.T) {
	code, out, errOut := run(t, "a long enough secret\n", "console", "hash-password", "--name", "gm", "--role", "game master")
	require.Equal(t, 0, code, errOut)
	code, tokOut, errOut := run(t, "", "console", "hash-password", "--token", "--name", "bot", "--role", "viewer")
	require.Equal(t, 0, code, errOut)
	token := regexp.MustCompile(`token \(shown once[^)]*\): (\S+)`).FindStringSubmatch(tokOut)
	require.Len(t, token, 2, tokOut)
	indent := func(s string) string { return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") + "\n" }
	path := filepath.Join(t.TempDir(), "narratoria.yaml")
	require.NoError(t, os.WriteFile(path, []byte("console:\n  users:\n"+indent(out)+indent(tokOut)), 0o644))
	cfg, err := config.Load(path, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	users, proxy, err := cfg.Console.Options()
	require.NoError(t, err)
	require.Nil(t, proxy)
	require.Len(t, users, 2)
	require.Equal(t, console.User{Name: "gm", Role: console.RoleGameMaster, PasswordHash: users[0].PasswordHash}, users[0])
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(users[0].PasswordHash), []byte("a long enough secret")))
	require.Equal(t, console.TokenHashOf(token[1]), users[1].TokenHash)
	require.NotContains(t, indent(tokOut)[strings.Index(indent(tokOut), "- name"):], token[1], "the entry holds the hash, not the token")

	code, _, errOut = run(t, "short\n", "console", "hash-password")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "at least 8 characters")
	code, _, errOut = run(t, "", "console", "hash-password", "--token", "--role", "king")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--role")
}

// TestConsoleSectionErrorsNameTheKey: a mistake in the console: section
// stops the load with the key at fault.
func TestConsoleSectionErrorsNameTheKey(t *testing.T) {
	for body, want := range map[string]string{
		"console:\n  users:\n    - {name: a, role: king, passwordHash: x}\n":                     "console.users[0].role",
		"console:\n  users:\n    - {name: a, role: viewer, passwordHash: plain}\n":               "console.users[0] (a): passwordHash is not a bcrypt hash",
		"console:\n  users:\n    - {name: a, role: viewer}\n":                                    "needs passwordHash or tokenHash",
		"console:\n  trustedProxy: {userHeader: X-Forwarded-User}\n":                             "console.trustedProxy.sources",
		"console:\n  trustedProxy: {sources: [not-an-ip], userHeader: X-Forwarded-User}\n":       "console.trustedProxy.sources[0]",
		"console:\n  trustedProxy: {sources: [10.0.0.0/8], roles: {bob: king}, userHeader: X}\n": "console.trustedProxy.roles.bob",
	} {
		path := filepath.Join(t.TempDir(), "narratoria.yaml")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		_, err := config.Load(path, func(string) (string, bool) { return "", false })
		require.ErrorContains(t, err, want, body)
	}
}

// TestUpLogin: with no console users configured, up's first start makes
// an operator login with a random password, stored hashed, the password
// in a file only its owner reads; the next start reads the same login
// and shows no password.
func TestUpLogin(t *testing.T) {
	dir := t.TempDir()
	u, password, created, err := upLogin(dir)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, console.RoleOperator, u.Role)
	require.GreaterOrEqual(t, len(password), 16)
	loginFile, passwordFile := upLoginFiles(dir)
	for _, f := range []string{loginFile, passwordFile} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
	b, err := os.ReadFile(passwordFile)
	require.NoError(t, err)
	require.Equal(t, password, strings.TrimSpace(string(b)))
	stored, err := os.ReadFile(loginFile)
	require.NoError(t, err)
	require.NotContains(t, string(stored), password, "stored hashed")
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)))
	again, p2, created, err := upLogin(dir)
	require.NoError(t, err)
	require.False(t, created)
	require.Empty(t, p2)
	require.Equal(t, u, again)
}
