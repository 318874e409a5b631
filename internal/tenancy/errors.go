package tenancy

import "errors"

// ErrUnknownTenant: the authority has no tenant of that name.
var ErrUnknownTenant = errors.New("unknown tenant")

// ErrTenantRevoked: the tenant was removed (Revoke): every credential of
// it is refused until Readd brings it back.
var ErrTenantRevoked = errors.New("tenant removed")
