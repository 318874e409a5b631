package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestProseOverDevelopmentSet runs the prompts of the labelled
// development set (every sixteenth one in make test, all in make test-long) through `narratoria up` with the real sample skills
// (sh scripts, and the Go bodies through the narratoria binary) and checks
// the narration a player gets: a valid plan that succeeds at the first
// attempt, sentences that end with punctuation, no line twice, no broken
// person ("you I", "you am", "you my"), no first-person clause of the
// prompt told back ("I ask" is "you ask", quoted or not), the dice total when the dice-roller
// ran, the recalled memory when memory recall ran, the standing when
// reputation ran, choices when player-choices ran — and openings that vary.
// factionSaid finds the faction's name in the reputation skill's lines.
// firstPerson finds a first-person clause's start in a prompt: "I" and
// the next word ("I ask", "I'm going", "am I").
var firstPerson = regexp.MustCompile(`\bI(?:'[a-z]+)? [A-Za-z']+|\b[A-Za-z']+ I\b`)

var factionSaid = regexp.MustCompile(`(?:The|among the|standing with the) ([^.;:"]+?)(?: regard you|; they now hold you| is now)`)

func TestProseOverDevelopmentSet(t *testing.T) {
	testlog.Long(t, "runs every development prompt through narratoria up")
	t.Parallel() // its own narratoria up: runs beside the kill tests, which mostly wait
	_, url, creds := upFresh(t)
	nc, err := nats.Connect(url, nats.UserCredentials(creds))
	require.NoError(t, err)
	defer nc.Close()
	c, err := client.New(nc)
	require.NoError(t, err)

	cat, _ := planner.CatalogueFromDir("../../skills")
	f, err := os.Open("../../testdata/planning/prompts.jsonl")
	require.NoError(t, err)
	defer f.Close()
	var prompts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Text string `json:"text"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		if strings.TrimSpace(l.Text) != "" {
			prompts = append(prompts, l.Text)
		}
	}
	require.GreaterOrEqual(t, len(prompts), 150)
	if os.Getenv("NARRATORIA_LONG") == "" {
		// make test: every sixteenth prompt (13; all of them were a third
		// of this package's CPU, every eighth still 26 CPU-seconds); make
		// test-long runs them all.
		some := prompts[:0:0]
		for i := 0; i < len(prompts); i += 16 {
			some = append(some, prompts[i])
		}
		prompts = some
	}

	broken := regexp.MustCompile(`(?i)\byou (i|am|my|me|myself|i'm|i've|was)\b|[?!]\.|\.\.(?:[^.]|$)`)
	var mu sync.Mutex
	openings := map[string]bool{}
	var problems []string
	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				text := prompts[i]
				plan, err := planner.RulePlanner{}.Plan(context.Background(), planner.Request{Text: text, Catalogue: cat})
				require.NoError(t, err)
				ran := map[string]bool{}
				for _, tl := range plan.Tools {
					ran[tl.ToolPath] = true
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				n, err := c.Narrate(ctx, messages.Prompt{SessionID: fmt.Sprintf("prose-%d", i), Text: text})
				cancel()
				var bad []string
				check := func(ok bool, what string) {
					if !ok {
						bad = append(bad, what)
					}
				}
				if err != nil {
					bad = append(bad, "no narration: "+err.Error())
				} else {
					body := strings.TrimSpace(n.Text)
					check(!n.Fallback && n.Attempts == 1, fmt.Sprintf("the plan did not succeed at once (attempts %d, fallback %v)", n.Attempts, n.Fallback))
					check(body != "", "empty narration")
					check(strings.ContainsAny(body[max(len(body)-3, 0):], ".!?\"…”"), "does not end with punctuation")
					paras := strings.Split(body, "\n\n")
					seen := map[string]bool{}
					for _, p := range paras {
						check(!seen[p], "a line twice: "+p)
						seen[p] = true
					}
					// No first-person clause of the prompt comes back: "I ask the
					// blacksmith" is told as "you ask the blacksmith", quoted or not.
					for _, clause := range firstPerson.FindAllString(text, -1) {
						check(!strings.Contains(body, clause), "echoes the player's first person: "+clause)
					}
					// The player's own words (quoted) are theirs: check the rest.
					unquoted := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(body, `""`)
					check(!broken.MatchString(unquoted), "broken grammar: "+broken.FindString(unquoted))
					if ran["dice-roller/roll-dice"] {
						check(strings.Contains(body, "comes up"), "no dice total although the dice-roller ran")
					}
					if ran["memory/recall-memory"] {
						check(strings.Contains(body, "A memory surfaces") || strings.Contains(body, "Nothing comes to mind"), "no recalled memory although memory recall ran")
					}
					if ran["reputation/update-reputation"] || ran["reputation/query-reputation"] {
						check(strings.Contains(body, "hold you") || strings.Contains(body, "regard you"), "no standing although reputation ran")
						// The faction is a name, not the player's sentence.
						for _, m := range factionSaid.FindAllStringSubmatch(body, -1) {
							check(len(strings.Fields(m[1])) <= 6 && !strings.ContainsAny(m[1], "?!\""), "a sentence for a faction: "+m[0])
						}
					}
					if ran["player-choices/offer-choices"] {
						check(len(n.Choices) > 0, "no choices although player-choices ran")
					}
					if len(paras) > 1 {
						words := strings.Fields(paras[1])
						mu.Lock()
						openings[strings.Join(words[:min(3, len(words))], " ")] = true
						mu.Unlock()
					}
				}
				if len(bad) > 0 {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%q: %s\n    narration: %q", text, strings.Join(bad, "; "), func() string {
						if n == nil {
							return ""
						}
						return n.Text
					}()))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range prompts {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, p := range problems {
		t.Log(p)
	}
	require.Empty(t, problems, "%d of %d narrations have a problem", len(problems), len(prompts))
	// The issue's own example: told as the player's act, never quoted back.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	smith, err := c.Narrate(ctx, messages.Prompt{SessionID: "prose-smith", Text: "I ask the blacksmith to forge me a sword"})
	require.NoError(t, err)
	require.NotContains(t, smith.Text, "I ask")
	require.Contains(t, smith.Text, "you ask the blacksmith to forge you a sword")
	require.GreaterOrEqual(t, len(openings), 6, "the storyteller varies its wording: %v", openings)
}
