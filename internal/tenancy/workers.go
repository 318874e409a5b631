package tenancy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"

	"github.com/narratoria/runtime/pkg/messages"
)

// Skill workers' credentials.
//
// A skill worker holds a user scoped to the skills it serves: it may take
// only those skills' jobs (its durable consumers, whose filter is named in
// the consumer-create subject so it cannot be widened, and the job
// subjects of its wake-ups), write only those skills' registry entries,
// and read its own replies. Every job carries its attempt's token, so
// such a worker cannot make another skill's outcome, event (read back by a
// scheduler) or progress accepted, and it publishes no progress at all:
// it sends progress to the scheduler that sent the job, which publishes it
// once the token checks. It may add content-named objects to the asset
// store, never purge it. WorkerPermissions is the one definition; the
// shipped deploy/nats/accounts.conf carries what WorkerConf prints for its
// pools, and `narratoria creds worker` mints JWT users with it.

// workerPoolName is a worker pool's name: it becomes the user
// (worker_<name>) and the inbox prefix (_INBOX_worker_<name>).
var workerPoolName = regexp.MustCompile(`^[a-z0-9][a-z0-9_]{0,31}$`)

// WorkerUser is the user name of a worker pool.
func WorkerUser(pool string) string { return "worker_" + pool }

// WorkerInbox is the inbox prefix a worker pool's workers must use
// (nats.inboxPrefix): its user may read no other.
func WorkerInbox(pool string) string { return "_INBOX_worker_" + pool }

// checkPool checks a pool name and its skills.
func checkPool(pool string, skills []string) error {
	if !workerPoolName.MatchString(pool) {
		return fmt.Errorf("tenancy: worker pool %q: want %s", pool, workerPoolName)
	}
	if len(skills) == 0 {
		return fmt.Errorf("tenancy: worker pool %q: name at least one skill", pool)
	}
	for _, s := range skills {
		if !messages.ValidSkillName(s) {
			return fmt.Errorf("tenancy: worker pool %q: %q is not a skill name", pool, s)
		}
	}
	return nil
}

// WorkerPermissions are the permissions of a worker pool serving skills,
// for the subject prefix prefix, in a multi-tenant deployment's service
// account when tenants (its subjects gain the tenant token as every
// role's do). Its inbox prefix is WorkerInbox(pool).
func WorkerPermissions(prefix, pool string, skills []string, tenants bool) (*jwt.Permissions, error) {
	if err := checkPool(pool, skills); err != nil {
		return nil, err
	}
	skills = slices.Sorted(slices.Values(skills))
	skills = slices.Compact(skills)
	p := &jwt.Permissions{Resp: &jwt.ResponsePermission{MaxMsgs: 1}}
	p.Pub.Allow.Add(
		prefix+".events.>",   // each event carries its attempt's token; a scheduler reads back none without it
		prefix+".outcomes.>", // stored, or sent to the scheduler as a request: each carries its attempt's token
		prefix+".control.status.*",
		"$JS.API.INFO", "$JS.API.STREAM.INFO.*",
		// assets, each named by its content: added, never purged; an
		// object already stored is read back chunk by chunk and checked
		"$O.narratoria_assets.>", "$JS.API.DIRECT.GET.OBJ_narratoria_assets", "$JS.API.DIRECT.GET.OBJ_narratoria_assets.>",
	)
	p.Sub.Allow.Add(prefix+".cancel.*", prefix+".skillworker.*.status",
		"$SRV.*", "$SRV.*.narratoria-skillworker", "$SRV.*.narratoria-skillworker.*", WorkerInbox(pool)+".>")
	for _, s := range skills {
		durable := "NARRATORIA_JOBS.skill-" + s
		p.Pub.Allow.Add(
			// the consumer's filter is part of the subject: it cannot be widened to another skill's jobs
			"$JS.API.CONSUMER.CREATE."+durable+"."+prefix+".jobs."+s+".>",
			"$JS.API.CONSUMER.INFO."+durable, "$JS.API.CONSUMER.MSG.NEXT."+durable, "$JS.ACK."+durable+".>",
			// a skill whose files are gone: its consumer removed after the grace
			"$JS.API.CONSUMER.DELETE."+durable,
			"$KV.narratoria_skills."+s, "$JS.API.DIRECT.GET.KV_narratoria_skills.$KV.narratoria_skills."+s,
		)
		p.Sub.Allow.Add(prefix + ".jobs." + s + ".>")
	}
	if tenants {
		rw := tenantRewrites(prefix)
		for _, list := range []*jwt.StringList{&p.Pub.Allow, &p.Sub.Allow} {
			var out jwt.StringList
			for _, s := range *list {
				if to, ok := rw[s]; ok {
					out.Add(to...)
				} else {
					out.Add(s)
				}
			}
			*list = out
		}
	}
	return p, nil
}

// WorkerConf is a worker pool's user block for the users of account
// NARRATORIA in deploy/nats/accounts.conf (a server configured by file),
// its password from the environment variable WORKER_<POOL>_PASSWORD.
func WorkerConf(prefix, pool string, skills []string) (string, error) {
	p, err := WorkerPermissions(prefix, pool, skills, false)
	if err != nil {
		return "", err
	}
	list := func(subjects []string) string {
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = fmt.Sprintf("%q", s)
		}
		return strings.Join(q, ",\n              ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "      # Skill worker pool %q: skills %s. Made by `narratoria creds worker --conf --pool %s --skills %s`;\n",
		pool, strings.Join(slices.Sorted(slices.Values(skills)), ", "), pool, strings.Join(skills, ","))
	fmt.Fprintf(&b, "      # its workers connect with nats.inboxPrefix %s.\n", WorkerInbox(pool))
	fmt.Fprintf(&b, "      {\n        user: %s, password: $%s\n", WorkerUser(pool), strings.ToUpper(WorkerUser(pool))+"_PASSWORD")
	fmt.Fprintf(&b, "        permissions: {\n          publish: {\n            allow: [\n              %s\n            ]\n          }\n", list(p.Pub.Allow))
	fmt.Fprintf(&b, "          subscribe: {\n            allow: [\n              %s\n            ]\n          }\n", list(p.Sub.Allow))
	b.WriteString("          allow_responses: true\n        }\n      }\n")
	return b.String(), nil
}

// WorkerCreds writes <dir>/workers/<pool>.creds: a user of SVC with the
// pool's permissions (WorkerPermissions; tenants for a multi-tenant
// deployment), and returns its path.
func (a *Authority) WorkerCreds(pool string, skills []string, tenants bool) (string, error) {
	perms, err := WorkerPermissions(a.prefix, pool, skills, tenants)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(a.dir, "workers"), 0o700); err != nil {
		return "", fmt.Errorf("tenancy: %w", err)
	}
	creds, err := newUserCreds(a.svc, WorkerUser(pool), perms)
	if err != nil {
		return "", err
	}
	path := filepath.Join(a.dir, "workers", pool+".creds")
	if err := writeFile(path, creds); err != nil {
		return "", err
	}
	return path, nil
}
