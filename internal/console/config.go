package console

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Config is the console: section of the configuration file: who may sign
// in to the web console, and with which role (config/narratoria.yaml).
type Config struct {
	// Users are the static logins.
	Users []UserConfig `yaml:"users"`
	// TrustedProxy signs in the users a single sign-on proxy names.
	TrustedProxy ProxyConfig `yaml:"trustedProxy"`
	// SessionTTL is how long a login lasts. Default 12h.
	SessionTTL time.Duration `yaml:"sessionTTL"`
	// TLSCert and TLSKey are PEM files of the console's certificate (with
	// its chain) and private key: given both, the console serves HTTPS
	// only, and its session cookie is Secure. Default none: plain HTTP,
	// which the console warns about on any address but loopback.
	TLSCert string `yaml:"tlsCert"`
	TLSKey  string `yaml:"tlsKey"`
}

// UserConfig is one static login: a name, a role, and a password hash
// (bcrypt), a token hash (sha256:<hex>) or both, as `narratoria console
// hash-password` prints them.
type UserConfig struct {
	Name         string `yaml:"name"`
	Role         string `yaml:"role"`
	PasswordHash string `yaml:"passwordHash"`
	TokenHash    string `yaml:"tokenHash"`
}

// ProxyConfig configures the trusted proxy (TrustedProxy).
type ProxyConfig struct {
	// Sources are the proxy's addresses or CIDRs; its headers are ignored
	// on requests from anywhere else. From them, X-Forwarded-For names the
	// client (for the login throttle and the audit trail) and
	// X-Forwarded-Proto: https makes the session cookie Secure. None
	// disables the proxy.
	Sources []string `yaml:"sources"`
	// UserHeader names the header with the signed-in user, e.g.
	// X-Forwarded-User; empty for a proxy that only terminates TLS (its
	// users sign in to the console themselves). Default empty.
	UserHeader string `yaml:"userHeader"`
	// RoleHeader, if set, names the header with the role.
	RoleHeader string `yaml:"roleHeader"`
	// Roles maps user names to roles when no role header says.
	Roles map[string]string `yaml:"roles"`
	// DefaultRole is the role of a proxied user no header or map gives one
	// ("" refuses them).
	DefaultRole string `yaml:"defaultRole"`
}

// Configured says whether the section names any login: a user, or a
// proxy that signs users in.
func (c Config) Configured() bool {
	return len(c.Users) > 0 || (len(c.TrustedProxy.Sources) > 0 && c.TrustedProxy.UserHeader != "")
}

// Validate checks the section, naming the key at fault.
func (c Config) Validate() error {
	if _, _, err := c.Options(); err != nil {
		return err
	}
	_, err := c.TLSConfig()
	return err
}

// TLSConfig loads the console's certificate and key (TLSCert, TLSKey):
// nil when neither is set. TLS 1.2 at least.
func (c Config) TLSConfig() (*tls.Config, error) {
	if c.TLSCert == "" && c.TLSKey == "" {
		return nil, nil
	}
	if c.TLSCert == "" || c.TLSKey == "" {
		return nil, errors.New("console.tlsCert and console.tlsKey: give both (the certificate and its key) or neither")
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("console.tlsCert, console.tlsKey: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Options turns the section into the console's Users and TrustedProxy.
func (c Config) Options() ([]User, *TrustedProxy, error) {
	if c.SessionTTL < 0 {
		return nil, nil, fmt.Errorf("console.sessionTTL: %s must not be negative", c.SessionTTL)
	}
	var users []User
	seen := map[string]bool{}
	for i, uc := range c.Users {
		key := fmt.Sprintf("console.users[%d]", i)
		role, err := ParseRole(uc.Role)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.role: %v", key, err)
		}
		u := User{Name: strings.TrimSpace(uc.Name), Role: role, PasswordHash: uc.PasswordHash, TokenHash: strings.ToLower(uc.TokenHash)}
		if err := CheckUser(u); err != nil {
			return nil, nil, fmt.Errorf("%s (%s): %v", key, u.Name, err)
		}
		if seen[u.Name] {
			return nil, nil, fmt.Errorf("%s.name: %s is listed twice", key, u.Name)
		}
		seen[u.Name] = true
		users = append(users, u)
	}
	pc := c.TrustedProxy
	if len(pc.Sources) == 0 {
		if pc.UserHeader != "" || pc.RoleHeader != "" || len(pc.Roles) > 0 {
			return nil, nil, fmt.Errorf("console.trustedProxy.sources: the proxy's addresses are needed (its headers are believed from them only)")
		}
		return users, nil, nil
	}
	p := &TrustedProxy{UserHeader: pc.UserHeader, RoleHeader: pc.RoleHeader, Roles: map[string]Role{}}
	if p.UserHeader == "" && (pc.RoleHeader != "" || len(pc.Roles) > 0 || pc.DefaultRole != "") {
		return nil, nil, fmt.Errorf("console.trustedProxy.userHeader: names the header with the signed-in user, e.g. X-Forwarded-User (roles need a user)")
	}
	for i, s := range pc.Sources {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, nil, fmt.Errorf("console.trustedProxy.sources[%d]: %q is neither an address nor a CIDR", i, s)
			}
			pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		p.Sources = append(p.Sources, pfx.Masked())
	}
	for name, r := range pc.Roles {
		role, err := ParseRole(r)
		if err != nil {
			return nil, nil, fmt.Errorf("console.trustedProxy.roles.%s: %v", name, err)
		}
		p.Roles[name] = role
	}
	if pc.DefaultRole != "" {
		role, err := ParseRole(pc.DefaultRole)
		if err != nil {
			return nil, nil, fmt.Errorf("console.trustedProxy.defaultRole: %v", err)
		}
		p.DefaultRole = role
	}
	return users, p, nil
}
