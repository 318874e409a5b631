package tenancy

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRolePermissions reads the shipped accounts file: every role but the
// game's, each with its subjects rewritten for the tenant token.
func TestRolePermissions(t *testing.T) {
	b, err := os.ReadFile("../../deploy/nats/accounts.conf")
	require.NoError(t, err)
	roles, err := RolePermissions(b, "narratoria")
	require.NoError(t, err)
	require.NotContains(t, roles, "game", "tenants take the game role's place")
	require.Contains(t, roles, "operator")
	require.Nil(t, roles["operator"], "the operator has no limits")
	sch := roles["scheduler"]
	require.Contains(t, sch.Sub.Allow, "narratoria.sessions.*.*.reset")
	require.NotContains(t, sch.Sub.Allow, "narratoria.sessions.*.reset")
	require.Contains(t, sch.Sub.Allow, "narratoria.approvals.*.*.*")
	require.Contains(t, sch.Pub.Allow, "narratoria.state.>", "the scheduler writes the tenants' states")
	require.Contains(t, sch.Pub.Allow, "$JS.API.DIRECT.GET.*.narratoria.state.>")
	require.NotNil(t, sch.Resp, "allow_responses carries over")
	require.Contains(t, roles["narrator"].Sub.Allow, "narratoria.narrate.*")
	require.Contains(t, roles["narrator"].Sub.Allow, "narratoria.prompts.*.*", "the narrator takes a tenant's prompts at intake")
	require.NotContains(t, roles["narrator"].Sub.Allow, "narratoria.prompts.*")
	require.Contains(t, sch.Pub.Allow, "narratoria.decisions.*.*", "the scheduler stores the decisions it checked")
	require.Contains(t, roles["worker_story"].Pub.Allow, "narratoria.control.*.status.*")
	require.NotContains(t, roles["worker_story"].Pub.Allow, "narratoria.state.>")
	require.NotContains(t, roles["narrator"].Pub.Allow, "narratoria.state.>")

	a, err := Open(t.TempDir(), "narratoria")
	require.NoError(t, err)
	paths, err := a.RoleCreds(roles)
	require.NoError(t, err)
	require.FileExists(t, paths["scheduler"])
	st, err := os.Stat(paths["scheduler"])
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// TestGameRoleIsDefinedOnce: the game user of the shipped accounts file
// has exactly GamePermissions, the permissions `narratoria up` gives its
// game.creds; the credentials say which inbox to use.
func TestGameRoleIsDefinedOnce(t *testing.T) {
	b, err := os.ReadFile("../../deploy/nats/accounts.conf")
	require.NoError(t, err)
	users, err := confUsers(b)
	require.NoError(t, err)
	want := GamePermissions("narratoria")
	found := false
	for _, u := range users {
		if u.Username != "game" {
			continue
		}
		found = true
		require.NotNil(t, u.Permissions)
		require.ElementsMatch(t, want.Pub.Allow, u.Permissions.Publish.Allow, "publish")
		require.ElementsMatch(t, want.Sub.Allow, u.Permissions.Subscribe.Allow, "subscribe")
		require.Nil(t, u.Permissions.Response, "the game serves no requests")
	}
	require.True(t, found, "accounts.conf has a game user")

	a, err := Open(t.TempDir(), "narratoria")
	require.NoError(t, err)
	path, err := a.GameCreds()
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	again, err := a.GameCreds()
	require.NoError(t, err)
	require.Equal(t, path, again)
	require.Equal(t, GameInbox, CredsInboxPrefix(path))
	require.Empty(t, CredsInboxPrefix(a.ClientCreds()), "the operator's clients may use any inbox")
}
