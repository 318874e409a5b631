package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/narratoria/runtime/internal/console"
)

// upLoginName is the operator login `narratoria up` makes when the
// configuration lists no console users.
const upLoginName = "admin"

// upLoginFiles are where up keeps its operator login under the data dir:
// the stored login (name, role, bcrypt hash) and the plain password, both
// readable by their owner only.
func upLoginFiles(dataDir string) (login, password string) {
	dir := filepath.Join(dataDir, "console")
	return filepath.Join(dir, "login.json"), filepath.Join(dir, "admin-password")
}

// upLogin returns up's operator login, creating it with a random password
// at the first start (created is then true and password the plain one,
// to print once); later starts read the stored hash.
func upLogin(dataDir string) (u console.User, password string, created bool, err error) {
	loginFile, passwordFile := upLoginFiles(dataDir)
	b, err := os.ReadFile(loginFile)
	if err == nil {
		var stored struct {
			Name         string       `json:"name"`
			Role         console.Role `json:"role"`
			PasswordHash string       `json:"passwordHash"`
		}
		if err := json.Unmarshal(b, &stored); err != nil {
			return u, "", false, fmt.Errorf("console login %s: %v (remove it to make a new one)", loginFile, err)
		}
		u = console.User{Name: stored.Name, Role: stored.Role, PasswordHash: stored.PasswordHash}
		if err := console.CheckUser(u); err != nil {
			return u, "", false, fmt.Errorf("console login %s: %v (remove it to make a new one)", loginFile, err)
		}
		return u, "", false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return u, "", false, fmt.Errorf("console login: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(loginFile), 0o700); err != nil {
		return u, "", false, fmt.Errorf("console login: %w", err)
	}
	password = console.NewPassword()
	hash, err := console.HashPassword(password)
	if err != nil {
		return u, "", false, err
	}
	u = console.User{Name: upLoginName, Role: console.RoleOperator, PasswordHash: hash}
	if err := os.WriteFile(passwordFile, []byte(password+"\n"), 0o600); err != nil {
		return u, "", false, fmt.Errorf("console login: %w", err)
	}
	b, _ = json.MarshalIndent(map[string]any{"name": u.Name, "role": u.Role, "passwordHash": hash}, "", "  ")
	if err := os.WriteFile(loginFile, append(b, '\n'), 0o600); err != nil {
		return u, "", false, fmt.Errorf("console login: %w", err)
	}
	return u, password, true, nil
}
