package messages

import (
	"fmt"
	"strings"
)

// Tenant is the name of a tenant of a multi-tenant deployment, the first
// token of its sessions' service names (<tenant>.<session>, see Subjects).
// A name is 1 to 32 of a-z, 0-9 and '-', not starting with '-'
// (ParseTenant). The zero Tenant is no tenant: the sessions of a
// single-tenant deployment.
type Tenant string

// AllTenants is the tenant token of the service's own plan control
// requests in a multi-tenant deployment (<prefix>.control._all.list…):
// the operator's view across tenants. No tenant can send it — a tenant's
// requests get its own name after the kind from the server's account
// import, and tenant names start with a letter or digit — so only a
// client of the service's account (an operator's console) uses it.
const AllTenants Tenant = "_all"

// ParseTenant returns the tenant named name, or an error naming what is
// wrong with the name.
func ParseTenant(name string) (Tenant, error) {
	if !validTenant(name) {
		return "", fmt.Errorf("invalid tenant name %q: want 1 to 32 of a-z, 0-9 and '-', not starting with '-'", truncate(name, 80))
	}
	return Tenant(name), nil
}

func validTenant(name string) bool { return lowerDashed(name, 32) && name[0] != '-' }

// TenantOf returns the tenant of a service's session name
// <tenant>.<session> (none for a session of a single-tenant deployment).
func TenantOf(session string) Tenant {
	t, _, ok := strings.Cut(session, ".")
	if !ok {
		return ""
	}
	return Tenant(t)
}

// LocalSession returns the session ID a tenant's game server knows:
// the session without its tenant.
func LocalSession(session string) string {
	_, l, ok := strings.Cut(session, ".")
	if !ok {
		return session
	}
	return l
}

// Qualify returns the service's name of the tenant's session
// <tenant>.<session> (session unchanged for no tenant).
func (t Tenant) Qualify(session string) string {
	if t == "" {
		return session
	}
	return string(t) + "." + session
}

// StateStream is the stream of the tenant's session states in a
// multi-tenant deployment, NARRATORIA_STATE_<TENANT>: a stream of its own,
// sized by the tenant's quota, on <prefix>.state.<tenant>.> (State).
func (t Tenant) StateStream() string {
	return "NARRATORIA_STATE_" + strings.ToUpper(strings.ReplaceAll(string(t), "-", "_"))
}

// String returns the tenant's name ("" for none).
func (t Tenant) String() string { return string(t) }
