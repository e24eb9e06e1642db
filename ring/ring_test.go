package ring

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// nodeNames returns n names shaped like Kubernetes StatefulSet pods, the
// common case for shoal.
func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "shoal-" + strconv.Itoa(i)
	}
	return out
}

// testKeys returns n keys the way the scrape package derives them: xxhash of
// a job and a URL. The seed picks the address range, so every run sees the
// same keys.
func testKeys(n int, seed uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := make([]uint64, n)
	for i := range keys {
		u := fmt.Sprintf("node\xffhttp://10.%d.%d.%d:9100/metrics", rng.IntN(256), rng.IntN(256), rng.IntN(256))
		keys[i] = xxhash.Sum64String(u + strconv.Itoa(i))
	}
	return keys
}

func primaryCounts(r *Ring, keys []uint64) map[string]int {
	counts := map[string]int{}
	for _, n := range r.Nodes() {
		counts[n] = 0
	}
	for _, k := range keys {
		counts[r.Primary(k)]++
	}
	return counts
}

func TestBalance(t *testing.T) {
	for _, tc := range []struct {
		nodes, tokens, keys int
		seed                uint64
		maxOverMean         float64
	}{
		{nodes: 10, tokens: 512, keys: 10_000, seed: 1, maxOverMean: 1.15},
		{nodes: 10, tokens: 512, keys: 10_000, seed: 2, maxOverMean: 1.15},
		{nodes: 10, tokens: 512, keys: 10_000, seed: 3, maxOverMean: 1.15},
		{nodes: 3, tokens: 512, keys: 10_000, seed: 4, maxOverMean: 1.15},
		{nodes: 30, tokens: 512, keys: 100_000, seed: 5, maxOverMean: 1.15},
	} {
		t.Run(fmt.Sprintf("nodes=%d/keys=%d/seed=%d", tc.nodes, tc.keys, tc.seed), func(t *testing.T) {
			r := New(nodeNames(tc.nodes), tc.tokens)
			counts := primaryCounts(r, testKeys(tc.keys, tc.seed))
			mean := float64(tc.keys) / float64(tc.nodes)
			maxC, minC := 0, tc.keys
			for _, c := range counts {
				maxC = max(maxC, c)
				minC = min(minC, c)
			}
			maxShare := 0.0
			for _, n := range r.Nodes() {
				maxShare = max(maxShare, r.Share(n))
			}
			t.Logf("balance: max/mean=%.3f min/mean=%.3f (keys); max share × nodes=%.3f (key space)",
				float64(maxC)/mean, float64(minC)/mean, maxShare*float64(tc.nodes))
			if got := float64(maxC) / mean; got > tc.maxOverMean {
				t.Errorf("most loaded node has %.3f × the mean, want <= %.2f", got, tc.maxOverMean)
			}
		})
	}
}

func TestSharesSumToOne(t *testing.T) {
	for _, n := range []int{1, 2, 10, 100} {
		r := New(nodeNames(n), 0)
		sum := 0.0
		for _, name := range r.Nodes() {
			sum += r.Share(name)
		}
		if sum < 0.999999 || sum > 1.000001 {
			t.Errorf("%d nodes: shares add up to %v, want 1", n, sum)
		}
		if got := r.ReplicaShare(r.Nodes()[0], n); got != 1 {
			t.Errorf("%d nodes: replica share with n=len = %v, want 1", n, got)
		}
	}
	r := New(nodeNames(10), 0)
	sum := 0.0
	for _, name := range r.Nodes() {
		rs := r.ReplicaShare(name, 3)
		if rs <= r.Share(name) {
			t.Errorf("%s: replica share %v not above primary share %v", name, rs, r.Share(name))
		}
		sum += rs
	}
	if sum < 2.999999 || sum > 3.000001 {
		t.Errorf("replica shares with n=3 add up to %v, want 3", sum)
	}
	if r.Share("missing") != 0 || r.ReplicaShare("missing", 2) != 0 {
		t.Error("a node that is not on the ring must have no share")
	}
}

// TestShareMatchesKeys checks Share against counted keys, so a wrong arc
// computation (for example the wrap-around arc) shows up.
func TestShareMatchesKeys(t *testing.T) {
	r := New(nodeNames(5), 64)
	keys := testKeys(200_000, 7)
	counts := primaryCounts(r, keys)
	for _, n := range r.Nodes() {
		measured := float64(counts[n]) / float64(len(keys))
		if d := measured - r.Share(n); d > 0.01 || d < -0.01 {
			t.Errorf("%s: Share=%.4f but owns %.4f of the keys", n, r.Share(n), measured)
		}
	}
}

func TestMovement(t *testing.T) {
	keys := testKeys(100_000, 11)
	for _, n := range []int{3, 5, 10, 30} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			base := nodeNames(n)
			r := New(base, 0)

			// Add one node to N.
			added := "shoal-new"
			bigger := New(append(slices.Clone(base), added), 0)
			moved := 0
			for _, k := range keys {
				from, to := r.Primary(k), bigger.Primary(k)
				if from == to {
					continue
				}
				moved++
				if to != added {
					t.Fatalf("key %x moved from %s to %s, not to the added node", k, from, to)
				}
			}
			addFrac := float64(moved) / float64(len(keys))

			// Remove one node out of N.
			removed := base[n-1]
			smaller := New(base[:n-1], 0)
			moved = 0
			for _, k := range keys {
				from, to := r.Primary(k), smaller.Primary(k)
				if from == to {
					continue
				}
				moved++
				if from != removed {
					t.Fatalf("key %x moved from %s to %s, not from the removed node", k, from, to)
				}
			}
			removeFrac := float64(moved) / float64(len(keys))

			limit := 1.2 / float64(n)
			t.Logf("N=%d: add one moves %.4f (×N=%.3f), remove one moves %.4f (×N=%.3f), limit %.4f",
				n, addFrac, addFrac*float64(n), removeFrac, removeFrac*float64(n), limit)
			if addFrac > limit {
				t.Errorf("adding a node moved %.4f of the keys, want <= %.4f", addFrac, limit)
			}
			if removeFrac > limit {
				t.Errorf("removing a node moved %.4f of the keys, want <= %.4f", removeFrac, limit)
			}
			if addFrac == 0 || removeFrac == 0 {
				t.Error("no key moved at all: the new node owns nothing")
			}
		})
	}
}

// TestHashmodBaseline logs what Prometheus-style hashmod sharding (key % N)
// does on the same keys, as the comparison for TestMovement.
func TestHashmodBaseline(t *testing.T) {
	keys := testKeys(100_000, 11)
	for _, n := range []int{3, 5, 10, 30} {
		moved := 0
		for _, k := range keys {
			if k%uint64(n) != k%uint64(n+1) {
				moved++
			}
		}
		t.Logf("hashmod N=%d -> %d: moves %.4f of the keys", n, n+1, float64(moved)/float64(len(keys)))
	}
}

func TestOrderIndependentAndDuplicates(t *testing.T) {
	names := nodeNames(12)
	rng := rand.New(rand.NewPCG(3, 4))
	ref := New(names, 128)
	keys := testKeys(5_000, 21)
	for trial := range 5 {
		shuffled := slices.Clone(names)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		// Duplicates and empty names must not change anything.
		shuffled = append(shuffled, shuffled[0], shuffled[3], "")
		r := New(shuffled, 128)
		if !r.Equal(ref) || r.Len() != 12 || r.Tokens() != 12*128 {
			t.Fatalf("trial %d: ring differs: len=%d tokens=%d", trial, r.Len(), r.Tokens())
		}
		if !slices.Equal(r.tokens, ref.tokens) || !slices.Equal(r.owner, ref.owner) {
			t.Fatalf("trial %d: token table differs from the reference", trial)
		}
		var a, b []string
		for _, k := range keys {
			a = r.Owners(k, 3, a)
			b = ref.Owners(k, 3, b)
			if !slices.Equal(a, b) {
				t.Fatalf("trial %d: key %x owners %v, reference %v", trial, k, a, b)
			}
		}
	}
}

func TestOwners(t *testing.T) {
	r := New(nodeNames(5), 0)
	keys := testKeys(2_000, 31)
	for _, tc := range []struct {
		name string
		n    int
		want int
	}{
		{"rf=1", 1, 1},
		{"rf=2", 2, 2},
		{"rf=3", 3, 3},
		{"n equals nodes", 5, 5},
		{"n above nodes", 9, 5},
		{"n zero", 0, 0},
		{"n negative", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]string, 0, 8)
			for _, k := range keys {
				got := r.Owners(k, tc.n, buf)
				if len(got) != tc.want {
					t.Fatalf("key %x: %d owners %v, want %d", k, len(got), got, tc.want)
				}
				if len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got) {
					t.Fatalf("key %x: owners not distinct: %v", k, got)
				}
				if tc.want > 0 && got[0] != r.Primary(k) {
					t.Fatalf("key %x: first owner %s, primary %s", k, got[0], r.Primary(k))
				}
				// The replicas extend the shorter list: owners for n are a
				// prefix of owners for n+1.
				if tc.n > 0 {
					more := r.Owners(k, tc.n+1, nil)
					if !slices.Equal(more[:len(got)], got) {
						t.Fatalf("key %x: owners(%d)=%v not a prefix of owners(%d)=%v", k, tc.n, got, tc.n+1, more)
					}
				}
			}
		})
	}

	// Replica counts spread evenly too: every node holds about n/N.
	counts := map[string]int{}
	var buf []string
	for _, k := range keys {
		for _, o := range r.Owners(k, 2, buf) {
			counts[o]++
		}
	}
	for n, c := range counts {
		if f := float64(c) / float64(len(keys)); f < 0.3 || f > 0.5 {
			t.Errorf("%s holds %.3f of the keys with rf=2, want about 0.4", n, f)
		}
	}
}

func TestOwnersEdgeCases(t *testing.T) {
	var nilRing *Ring
	if got := nilRing.Owners(1, 3, nil); len(got) != 0 {
		t.Errorf("nil ring owners = %v", got)
	}
	if nilRing.Len() != 0 || nilRing.Tokens() != 0 || nilRing.Share("a") != 0 || nilRing.Nodes() != nil {
		t.Error("nil ring must be empty")
	}
	empty := New(nil, 0)
	if got := empty.Owners(1, 3, nil); len(got) != 0 {
		t.Errorf("empty ring owners = %v", got)
	}
	if !empty.Equal(nilRing) || empty.TokensPerNode() != DefaultTokensPerNode {
		t.Error("empty ring should equal nil ring and default its token count")
	}
	one := New([]string{"solo"}, 4)
	for _, k := range []uint64{0, 1, 1 << 63, ^uint64(0)} {
		if got := one.Owners(k, 3, nil); !slices.Equal(got, []string{"solo"}) {
			t.Errorf("single node: owners(%x) = %v", k, got)
		}
	}
	if one.Share("solo") != 1 {
		t.Errorf("single node share = %v", one.Share("solo"))
	}
	// Keys above the last token wrap to the first.
	r := New(nodeNames(3), 8)
	last := r.tokens[len(r.tokens)-1]
	if last != ^uint64(0) {
		if got, want := r.Primary(last+1), r.nodes[r.owner[0]]; got != want {
			t.Errorf("wrap-around: owner %s, want %s", got, want)
		}
	}
	if got, want := r.Primary(r.tokens[5]), r.nodes[r.owner[5]]; got != want {
		t.Errorf("a key equal to a token belongs to that token: got %s want %s", got, want)
	}
	if !r.Has("shoal-1") || r.Has("shoal-9") {
		t.Error("Has is wrong")
	}
}

func TestOwnersDoesNotAllocate(t *testing.T) {
	r := New(nodeNames(10), 0)
	keys := testKeys(100, 41)
	buf := make([]string, 0, 3)
	allocs := testing.AllocsPerRun(100, func() {
		for _, k := range keys {
			buf = r.Owners(k, 3, buf)
		}
	})
	if allocs != 0 {
		t.Errorf("Owners allocated %v times per run with a big enough buffer", allocs)
	}
}

// oracleTokens derives a ring's tokens as the package documents them (token
// i of node n is xxhash64(n, 0, decimal(i))), sorted, ties by node name.
func oracleTokens(counts map[string]int) []Token {
	var out []Token
	for n, c := range counts {
		for i := range c {
			out = append(out, Token{Value: xxhash.Sum64String(n + "\x00" + strconv.Itoa(i)), Node: n})
		}
	}
	slices.SortFunc(out, func(a, b Token) int {
		if a.Value != b.Value {
			return cmp.Compare(a.Value, b.Value)
		}
		return cmp.Compare(a.Node, b.Node)
	})
	return out
}

// Walk lists the tokens Owners walks: from the first token at or after the
// key, one by one clockwise (wrapping), until the n-th distinct node, with
// the token before the key; its distinct nodes are Owners, in order.
func TestWalkIsTheOwnersWalk(t *testing.T) {
	counts := map[string]int{"a": 3, "b": 8, "c": 1, "d": 8}
	var members []Member
	for n, c := range counts {
		members = append(members, Member{Name: n, Tokens: c})
	}
	even := map[string]int{"a": 8, "b": 8, "c": 8, "d": 8}
	for name, tc := range map[string]struct {
		r      *Ring
		counts map[string]int
	}{
		"equal counts":    {New([]string{"d", "c", "b", "a"}, 8), even},
		"weighted counts": {NewWeighted(members), counts},
	} {
		t.Run(name, func(t *testing.T) {
			toks := oracleTokens(tc.counts)
			keys := append(testKeys(500, 7), 0, toks[0].Value, toks[len(toks)-1].Value, toks[len(toks)-1].Value+1, ^uint64(0))
			for _, k := range keys {
				start, _ := slices.BinarySearchFunc(toks, k, func(e Token, k uint64) int { return cmp.Compare(e.Value, k) })
				for n := 1; n <= 5; n++ {
					prev, walk := tc.r.Walk(k, n)
					if want := toks[(start-1+len(toks))%len(toks)]; prev != want {
						t.Fatalf("key %x: previous token %+v, want %+v", k, prev, want)
					}
					var nodes []string
					for i, tok := range walk {
						if want := toks[(start+i)%len(toks)]; tok != want {
							t.Fatalf("key %x n=%d: step %d is %+v, want %+v", k, n, i, tok, want)
						}
						if !slices.Contains(nodes, tok.Node) {
							nodes = append(nodes, tok.Node)
						} else if i == len(walk)-1 {
							t.Fatalf("key %x n=%d: walk goes on past its last new node: %+v", k, n, walk)
						}
					}
					if owners := tc.r.Owners(k, n, nil); !slices.Equal(nodes, owners) {
						t.Fatalf("key %x n=%d: walk meets %v, owners %v", k, n, nodes, owners)
					}
				}
			}
		})
	}
	var nilRing *Ring
	if prev, walk := nilRing.Walk(1, 3); prev != (Token{}) || walk != nil {
		t.Errorf("nil ring walk: %+v %+v", prev, walk)
	}
	if _, walk := New([]string{"a"}, 4).Walk(1, 0); walk != nil {
		t.Errorf("walk for n=0: %+v", walk)
	}
}
