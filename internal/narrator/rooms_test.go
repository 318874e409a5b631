package narrator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestRoomAnswersEveryPromptOnce: a partition's room narrates each
// session's prompts one at a time in stream order, sessions side by side;
// a prompt sent again while queued or running joins it; every prompt is
// answered once, with its own narration — one session running dry never
// touches another's queue. Once the narrator stops, a prompt sent gets
// ErrStopping and those queued are answered so; once the ownership ends,
// the room ends after the prompt being narrated is answered.
func TestRoomAnswersEveryPromptOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	owned, lose := context.WithCancel(context.Background())
	defer lose()
	var mu sync.Mutex
	gates := map[string]chan struct{}{}
	started := make(chan string, 100)
	gate := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if gates[id] == nil {
			gates[id] = make(chan struct{})
		}
		return gates[id]
	}
	r := &room{owned: owned, log: slog.New(slog.DiscardHandler), in: make(chan func()), idle: make(chan struct{}), ended: make(chan struct{}),
		queues: map[string]*sessionQueue{}, jobs: map[string]*job{}}
	r.narrate = func(j *job) (*messages.Narration, error) {
		started <- j.prompt.PromptID
		<-gate(j.prompt.PromptID)
		return &messages.Narration{SessionID: j.prompt.SessionID, PromptID: j.prompt.PromptID}, nil
	}
	go r.run()

	type answer struct {
		id  string
		nar *messages.Narration
		err error
	}
	answers := make(chan answer, 100)
	send := func(session string, n int, seq uint64) string {
		id := fmt.Sprintf("%s-%d", session, n)
		r.enqueue(context.Background(), &messages.Prompt{SessionID: session, PromptID: id}, "", seq, func(nar *messages.Narration, err error) {
			answers <- answer{id, nar, err}
		})
		return id
	}
	// Three sessions, three prompts each, sent out of order within a
	// session; the first of each starts at once.
	for _, s := range []string{"a", "b", "c"} {
		send(s, 1, 1)
		send(s, 3, 3)
		send(s, 2, 2)
	}
	send("a", 3, 3) // a second delivery of a queued prompt: joins it
	budget := testlog.Budget(5 * time.Second)
	waitStart := func() string {
		select {
		case id := <-started:
			return id
		case <-time.After(budget):
			t.Fatal("no prompt started")
			return ""
		}
	}
	got := map[string]int{}
	order := map[string][]string{}
	take := func(n int) {
		for range n {
			select {
			case a := <-answers:
				require.NoError(t, a.err, a.id)
				require.NotNil(t, a.nar, a.id)
				require.Equal(t, a.id, a.nar.PromptID, "its own narration")
				got[a.id]++
			case <-time.After(budget):
				t.Fatal("a prompt was not answered")
			}
		}
	}
	running := map[string]bool{}
	for range 3 {
		running[waitStart()] = true
	}
	require.Equal(t, map[string]bool{"a-1": true, "b-1": true, "c-1": true}, running, "each session's first prompt, side by side")
	// Session b runs dry first; a and c keep their queues.
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		close(gate(id))
		take(1)
		order["b"] = append(order["b"], id)
		if id != "b-3" {
			require.Equal(t, fmt.Sprintf("b-%d", len(order["b"])+1), waitStart(), "the next of b, in stream order")
		}
	}
	for _, s := range []string{"a", "c"} {
		for n := 1; n <= 3; n++ {
			id := fmt.Sprintf("%s-%d", s, n)
			close(gate(id))
			want := 1
			if id == "a-3" {
				want = 2 // the joined delivery too
			}
			take(want)
			if n < 3 {
				require.Equal(t, fmt.Sprintf("%s-%d", s, n+1), waitStart())
			}
		}
	}
	for _, s := range []string{"a", "b", "c"} {
		for n := 1; n <= 3; n++ {
			want := 1
			if s == "a" && n == 3 {
				want = 2
			}
			require.Equal(t, want, got[fmt.Sprintf("%s-%d", s, n)], "%s-%d answered once (and its joined copy)", s, n)
		}
	}

	// The narrator stops: what is queued, and what is sent, gets
	// ErrStopping; the prompt being narrated is answered.
	send("d", 1, 1)
	require.Equal(t, "d-1", waitStart())
	send("d", 2, 2)
	r.do(func() { r.stop(ErrStopping) })
	a := <-answers
	require.Equal(t, "d-2", a.id)
	require.ErrorIs(t, a.err, ErrStopping)
	send("e", 1, 1)
	a = <-answers
	require.ErrorIs(t, a.err, ErrStopping, "nothing starts once stopping")
	// The ownership ends: the room ends once d-1 is answered.
	lose()
	select {
	case <-r.ended:
		t.Fatal("the room ended with a prompt unanswered")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate("d-1"))
	take(1)
	select {
	case <-r.ended:
	case <-time.After(budget):
		t.Fatal("the room did not end")
	}
	select {
	case <-r.idle:
	default:
		t.Fatal("an ended room is idle")
	}
	require.False(t, r.has("d-1"), "an ended room holds nothing")
}
