package skillworker

import (
	"fmt"
	"os/user"
	"strconv"
	"syscall"
)

// scriptCredential resolves worker.scriptUser to the credential scripts
// run with: the user's ID and primary group, no supplementary groups. ""
// keeps the worker's own user.
func scriptCredential(name string) (*syscall.Credential, error) {
	if name == "" {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("worker.scriptUser: no user %q", name)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("worker.scriptUser: user %q has no numeric IDs (%s:%s)", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}
