package sampleskills

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFactionOfThePlayersWords: a "faction" input that is the player's
// words (as the rule-based planner passes them) is read for the faction's
// name and, for an update, whether the action helps or harms.
func TestFactionOfThePlayersWords(t *testing.T) {
	for _, c := range []struct {
		in, faction string
		said        bool
		delta       int
	}{
		{"thieves-guild", "thieves-guild", false, 0},
		{"Moth Court", "Moth Court", false, 0},
		{"", "townsfolk", false, 0},
		{"the thieves guild", "thieves guild", false, 0},
		{"I thank the envoy. The Moth Court owes me.", "Moth Court", true, 10},
		{"Does the Ashmoor Cartel still have it in for me?", "Ashmoor Cartel", true, 5},
		{"Note that Dunstan Kray owes the Lampblack Printers a favor, tell me how the Printers see me", "Lampblack Printers", true, 5},
		{"I hand the Tansy Wardens' secret patrol routes over to their rivals.", "Tansy Wardens", true, 5},
		{"I donate gold to the Order of the Copper Wren.", "Order of the Copper Wren", true, 10},
		{"I spit on the thieves' guild banner in the square", "thieves guild", true, -10},
		{"how do the monks see me now?", "monks", true, 5},
		{"what do people around here think of me?", "townsfolk", true, 5},
		{"I help monks rebuild their wall", "monks", true, 10},
		{"I insult the merchant guild's master", "merchant guild", true, -10},
		{"Remind me who Wenna Clutterbuck was, she owes us", "Wenna Clutterbuck", true, 5},
	} {
		f, said := factionOf(c.in)
		require.Equal(t, c.faction, f, c.in)
		require.Equal(t, c.said, said, c.in)
		if said {
			require.Equal(t, c.delta, deltaOf(c.in), c.in)
		}
	}
}
