package natstest

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStartClusterRetriesABusyPort: a route port taken by another process
// between being picked and being bound leaves its node never ready;
// StartCluster starts the cluster again on other ports.
func TestStartClusterRetriesABusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	var picks atomic.Int32
	pickPort, readyWait = func(t testing.TB) int {
		if picks.Add(1) == 3 {
			return busy.Addr().(*net.TCPAddr).Port // the third node's, on the first try
		}
		return freePort(t)
	}, 2*time.Second
	t.Cleanup(func() { pickPort, readyWait = freePort, 10*time.Second })
	c := StartCluster(t, 3)
	require.Equal(t, 3, c.Size())
	require.Greater(t, picks.Load(), int32(3), "the cluster was started again on other ports")
	nc := c.Connect(t)
	require.NoError(t, nc.Flush())
}
