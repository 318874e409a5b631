package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestHistoryOfAHundredThousandPlans (make test-long): 100,000 results on
// the results stream, each with its summary headers, are all in the
// console's history: the total, a session's plans, a state's, and a page
// walk to the oldest plan. The load time is logged, not asserted.
func TestHistoryOfAHundredThousandPlans(t *testing.T) {
	if os.Getenv("NARRATORIA_LONG") == "" {
		t.Skip("publishes 100,000 results (make test-long)")
	}
	const n = 100_000
	srv := natstest.Start(t)
	body := []byte(`{"success":true}`)
	for i := range n {
		m := nats.NewMsg(fmt.Sprintf("narratoria.results.s%d.%s", i%100, uuid.NewString()))
		m.Data = body
		state := messages.PlanSucceeded
		if i%10 == 0 {
			state = messages.PlanFailed
		}
		m.Header.Set(messages.HeaderResultState, state)
		m.Header.Set(messages.HeaderResultSkills, "dice-roller,storyteller")
		m.Header.Set(messages.HeaderResultDuration, "3")
		_, err := srv.JS.PublishMsgAsync(m)
		require.NoError(t, err)
		if i%5000 == 4999 {
			<-srv.JS.PublishAsyncComplete()
		}
	}
	<-srv.JS.PublishAsyncComplete()
	cs, err := New(srv.Connect(t), Options{Users: testUsers()})
	require.NoError(t, err)
	t.Cleanup(cs.Close)
	web := httptest.NewServer(cs.Handler())
	t.Cleanup(web.Close)
	get := func(q string) messages.HistoryPage {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, web.URL+"/api/history?"+q, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(authed(req))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var page messages.HistoryPage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		return page
	}
	start := time.Now()
	var all messages.HistoryPage
	require.Eventually(t, func() bool { all = get(""); return !all.Loading }, testlog.Budget(60*time.Second), 100*time.Millisecond)
	t.Logf("100,000 plans indexed in %s", time.Since(start))
	require.Equal(t, n, all.Total)
	require.Len(t, all.Plans, messages.HistoryPageMax)
	require.Equal(t, n/100, get("session=s7").Total)
	require.Equal(t, n/10, get("state=failed").Total)
	require.Equal(t, n, get("skill=storyteller").Total)
	// Walk a session's pages to its oldest plan: 1,000 plans, 10 pages.
	seen, before, pages := 0, uint64(0), 0
	for {
		page := get("session=s7&before=" + strconv.FormatUint(before, 10))
		seen += len(page.Plans)
		pages++
		if page.Next == 0 {
			break
		}
		before = page.Next
	}
	require.Equal(t, n/100, seen)
	require.Equal(t, 10, pages)
}
