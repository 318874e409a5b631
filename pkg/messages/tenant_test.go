package messages_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// TestTenant: a tenant's name is checked once, where it enters
// (ParseTenant), and a service's session name splits into the tenant and
// the session its game server knows, and joins again, in one place.
func TestTenant(t *testing.T) {
	for _, name := range []string{"acme", "a", "globex-2", "0day", "abcdefghijklmnopqrstuvwxyz012345"} {
		tn, err := messages.ParseTenant(name)
		require.NoError(t, err, name)
		require.Equal(t, name, tn.String())
	}
	for _, name := range []string{"", "-acme", "Acme", "ac.me", "ac_me", "*", ">", "abcdefghijklmnopqrstuvwxyz0123456", string(messages.AllTenants)} {
		_, err := messages.ParseTenant(name)
		require.Error(t, err, "%q", name)
		require.Contains(t, err.Error(), "invalid tenant name")
	}

	acme := messages.Tenant("acme")
	require.Equal(t, "acme.s1", acme.Qualify("s1"))
	require.Equal(t, acme, messages.TenantOf("acme.s1"))
	require.Equal(t, "s1", messages.LocalSession("acme.s1"))
	require.Equal(t, "s1", messages.Tenant("").Qualify("s1"), "no tenant: the session as it is")
	require.Equal(t, messages.Tenant(""), messages.TenantOf("s1"))
	require.Equal(t, "s1", messages.LocalSession("s1"))
	require.Equal(t, "NARRATORIA_STATE_GLOBEX_2", messages.Tenant("globex-2").StateStream())

	s := messages.Subjects{Tenants: true}.ForSession("acme.s1")
	require.Equal(t, acme, s.Tenant)
	subj, err := s.Narrations("acme.s1")
	require.NoError(t, err)
	require.Equal(t, "narratoria.narrations.acme.s1", subj)
}
