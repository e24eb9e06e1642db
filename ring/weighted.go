package ring

import (
	"slices"
	"strings"
)

// MaxTokensPerNode bounds the token count a weighted ring accepts for one
// node, so that a peer gossiping a huge count cannot make every node build
// an enormous table.
const MaxTokensPerNode = 8192

// Member is one node of a load-weighted ring: its name and the token count
// it gossips.
type Member struct {
	Name string
	// Tokens is the node's token count; zero (or below) means
	// DefaultTokensPerNode, above MaxTokensPerNode means MaxTokensPerNode.
	Tokens int
}

// NewWeighted builds a ring on which each member has its own token count.
// Token j of node n is the same as on a ring from New (xxhash64 of n, "\x00"
// and j), so NewWeighted with every count equal to t places every key
// exactly as New(names, t), and changing one node's count from t to t' moves
// only the arcs of that node's tokens between t and t'.
//
// Like New, the result depends only on the set of members: order does not
// matter, empty names are ignored, and a name given twice keeps the larger
// count, so every node that sees the same gossiped state builds the same
// ring.
func NewWeighted(members []Member) *Ring {
	ms := make([]Member, 0, len(members))
	for _, m := range members {
		if m.Name == "" {
			continue
		}
		ms = append(ms, Member{Name: m.Name, Tokens: clampTokens(m.Tokens)})
	}
	// By name, then the larger count first, so Compact keeps the larger.
	slices.SortFunc(ms, func(a, b Member) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return b.Tokens - a.Tokens
	})
	ms = slices.CompactFunc(ms, func(a, b Member) bool { return a.Name == b.Name })

	names := make([]string, len(ms))
	counts := make([]int, len(ms))
	common := DefaultTokensPerNode
	for i, m := range ms {
		names[i], counts[i] = m.Name, m.Tokens
		if i == 0 {
			common = m.Tokens
		} else if m.Tokens != common {
			common = 0
		}
	}
	return build(names, counts, common)
}

func clampTokens(t int) int {
	switch {
	case t <= 0:
		return DefaultTokensPerNode
	case t > MaxTokensPerNode:
		return MaxTokensPerNode
	}
	return t
}

// NodeTokens returns the number of tokens node has on the ring, 0 when it
// is not on the ring.
func (r *Ring) NodeTokens(node string) int {
	if r == nil {
		return 0
	}
	i, ok := slices.BinarySearch(r.nodes, node)
	if !ok {
		return 0
	}
	return r.counts[i]
}

// Members returns the ring's nodes with their token counts, sorted by name:
// NewWeighted(r.Members()) rebuilds r.
func (r *Ring) Members() []Member {
	if r == nil {
		return nil
	}
	out := make([]Member, len(r.nodes))
	for i, n := range r.nodes {
		out[i] = Member{Name: n, Tokens: r.counts[i]}
	}
	return out
}
