package tenancy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkerPoolsAreGenerated: every worker user of the shipped
// deploy/nats/accounts.conf is exactly the block `narratoria creds worker
// --conf` prints for its pool and skills (named in the block's first
// comment line), so the shipped permissions cannot drift from the one
// definition the minted credentials use; and no shared worker user is
// left.
func TestWorkerPoolsAreGenerated(t *testing.T) {
	b, err := os.ReadFile("../../deploy/nats/accounts.conf")
	require.NoError(t, err)
	conf := string(b)
	made := regexp.MustCompile(`--pool ([a-z0-9_]+) --skills ([a-z0-9,-]+)`)
	pools := made.FindAllStringSubmatch(conf, -1)
	require.NotEmpty(t, pools, "the shipped file has worker pools")
	for _, m := range pools {
		block, err := WorkerConf("narratoria", m[1], strings.Split(m[2], ","))
		require.NoError(t, err)
		require.Truef(t, strings.Contains(conf, block), "pool %s is not as the generator prints it:\n%s", m[1], block)
	}
	users := regexp.MustCompile(`user: (\w+)`).FindAllStringSubmatch(conf, -1)
	for _, u := range users {
		require.NotEqual(t, "skillworker", u[1], "no worker user shared by every skill")
		if strings.HasPrefix(u[1], "worker_") {
			require.Contains(t, conf, "--pool "+strings.TrimPrefix(u[1], "worker_")+" ", "worker user %s is a generated pool", u[1])
		}
	}
}

// TestWorkerPermissionsScope: a pool's user takes only its skills' jobs
// (the consumer's filter in the create subject), reads only its own
// replies, publishes no progress and has no purge; tenants gain the
// tenant token where every role does.
func TestWorkerPermissionsScope(t *testing.T) {
	p, err := WorkerPermissions("narratoria", "dice", []string{"dice-roller"}, false)
	require.NoError(t, err)
	require.Contains(t, p.Pub.Allow, "$JS.API.CONSUMER.CREATE.NARRATORIA_JOBS.skill-dice-roller.narratoria.jobs.dice-roller.>")
	require.Contains(t, p.Sub.Allow, "narratoria.jobs.dice-roller.>")
	require.Contains(t, p.Sub.Allow, "_INBOX_worker_dice.>")
	for _, s := range append(p.Pub.Allow, p.Sub.Allow...) {
		require.NotContains(t, s, "PURGE")
		require.NotContains(t, s, ".progress.")
		require.NotEqual(t, "narratoria.jobs.>", s)
	}
	mt, err := WorkerPermissions("narratoria", "dice", []string{"dice-roller"}, true)
	require.NoError(t, err)
	require.Contains(t, mt.Pub.Allow, "narratoria.control.*.status.*")
	require.NotContains(t, mt.Pub.Allow, "narratoria.control.status.*")
	for _, bad := range []struct {
		pool   string
		skills []string
	}{{"Dice", []string{"a"}}, {"dice", nil}, {"dice", []string{"a.b"}}, {"dice", []string{">"}}} {
		_, err := WorkerPermissions("narratoria", bad.pool, bad.skills, false)
		require.Error(t, err, "%v", bad)
	}
}
