package ring

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func members(names []string, tokens int) []Member {
	out := make([]Member, len(names))
	for i, n := range names {
		out[i] = Member{Name: n, Tokens: tokens}
	}
	return out
}

// Equal counts must give today's ring exactly, so a cluster that weighs
// every node the same places every key where ring.New does.
func TestNewWeightedEqualCountsIsNew(t *testing.T) {
	names := nodeNames(10)
	for _, tokens := range []int{0, 64, DefaultTokensPerNode} {
		w := NewWeighted(members(names, tokens))
		r := New(names, tokens)
		if !w.Equal(r) || !r.Equal(w) {
			t.Fatalf("tokens=%d: weighted ring with equal counts is not Equal to New", tokens)
		}
		if !slices.Equal(w.tokens, r.tokens) || !slices.Equal(w.owner, r.owner) {
			t.Fatalf("tokens=%d: token tables differ", tokens)
		}
		if w.TokensPerNode() != r.TokensPerNode() {
			t.Fatalf("tokens=%d: TokensPerNode %d, New has %d", tokens, w.TokensPerNode(), r.TokensPerNode())
		}
	}
}

func TestNewWeightedOrderDuplicatesAndBounds(t *testing.T) {
	ms := []Member{{"a", 100}, {"b", 0}, {"c", MaxTokensPerNode + 5}, {"d", -3}, {"e", 40}}
	ref := NewWeighted(ms)
	want := map[string]int{"a": 100, "b": DefaultTokensPerNode, "c": MaxTokensPerNode, "d": DefaultTokensPerNode, "e": 40}
	for n, c := range want {
		if got := ref.NodeTokens(n); got != c {
			t.Errorf("NodeTokens(%s) = %d, want %d", n, got, c)
		}
	}
	if ref.TokensPerNode() != 0 {
		t.Errorf("a ring with different counts reports %d tokens per node, want 0", ref.TokensPerNode())
	}
	if ref.NodeTokens("zz") != 0 || (*Ring)(nil).NodeTokens("a") != 0 {
		t.Error("a node not on the ring must have 0 tokens")
	}
	if !NewWeighted(ref.Members()).Equal(ref) {
		t.Error("NewWeighted(Members()) does not rebuild the ring")
	}
	keys := testKeys(5000, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 5 {
		shuffled := slices.Clone(ms)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		// A stale duplicate with a smaller count and an empty name change
		// nothing: the larger count of a name wins whatever the order.
		shuffled = append(shuffled, Member{"a", 7}, Member{"", 9})
		r := NewWeighted(shuffled)
		if !r.Equal(ref) || !slices.Equal(r.tokens, ref.tokens) || !slices.Equal(r.owner, ref.owner) {
			t.Fatalf("trial %d: ring depends on input order or duplicates", trial)
		}
		var a, b []string
		for _, k := range keys {
			if a, b = r.Owners(k, 2, a), ref.Owners(k, 2, b); !slices.Equal(a, b) {
				t.Fatalf("trial %d: owners of %x differ: %v vs %v", trial, k, a, b)
			}
		}
	}
	// Two rings that differ only in one node's count are not Equal.
	other := slices.Clone(ms)
	other[0].Tokens = 101
	if NewWeighted(other).Equal(ref) {
		t.Error("rings with different counts compare Equal")
	}
}

// Changing one node's count moves only keys to or from that node, and
// about as many as its share changes.
func TestNewWeightedCountChangeMovesOnlyThatNode(t *testing.T) {
	names := nodeNames(10)
	keys := testKeys(50_000, 5)
	before := NewWeighted(members(names, DefaultTokensPerNode))
	for _, tc := range []struct {
		name   string
		tokens int
	}{{"grow", 700}, {"shrink", 300}} {
		ms := members(names, DefaultTokensPerNode)
		ms[4].Tokens = tc.tokens
		after := NewWeighted(ms)
		moved := 0
		for _, k := range keys {
			from, to := before.Primary(k), after.Primary(k)
			if from == to {
				continue
			}
			moved++
			if from != names[4] && to != names[4] {
				t.Fatalf("%s: key %x moved from %s to %s, neither is the node that changed", tc.name, k, from, to)
			}
		}
		frac := float64(moved) / float64(len(keys))
		shareDiff := after.Share(names[4]) - before.Share(names[4])
		if shareDiff < 0 {
			shareDiff = -shareDiff
		}
		t.Logf("%s: %.4f of keys moved, share changed by %.4f", tc.name, frac, shareDiff)
		if d := frac - shareDiff; d > 0.01 || d < -0.01 {
			t.Errorf("%s: %.4f of keys moved but the share changed by %.4f", tc.name, frac, shareDiff)
		}
	}
}

func TestNewWeightedShareFollowsTokens(t *testing.T) {
	ms := members(nodeNames(4), 256)
	ms[0].Tokens = 1024
	r := NewWeighted(ms)
	// 1024 of 1792 tokens: about 0.57 of the key space.
	if s := r.Share(ms[0].Name); s < 0.5 || s > 0.64 {
		t.Errorf("node with 4x the tokens has share %.3f, want about 0.57", s)
	}
	buf := make([]string, 0, 3)
	for _, k := range testKeys(2000, 9) {
		got := r.Owners(k, 3, buf)
		if len(got) != 3 || len(slices.Compact(slices.Sorted(slices.Values(got)))) != 3 {
			t.Fatalf("key %x: owners %v, want 3 distinct", k, got)
		}
	}
}
