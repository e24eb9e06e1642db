// Package ring is shoal's consistent-hash ring.
//
// Every participant node is placed on a 64-bit hash ring with a fixed number
// of tokens (512 by default). A node's tokens are derived from its name
// alone: token i of node "n" is xxhash64("n" + "\x00" + decimal(i)). The ring
// therefore depends only on the set of node names and the token count, never
// on the order in which the names were learnt, the time, or any random seed:
// two shoal replicas that see the same participants build byte-for-byte the
// same ring and agree on the owner of every key without talking to each
// other.
//
// A key is owned by the node of the first token at or after it, walking
// clockwise and wrapping at 2^64. With a replication factor n the owners are
// the first n distinct nodes met on that walk. Adding or removing one node
// out of N moves about 1/N of the keys, and only to or from that node.
//
// A Ring is immutable once built and safe for concurrent use.
//
// Two load-aware variants build on the same tokens (docs/DESIGN.md,
// "Placement"): NewWeighted gives each node its own token count (with equal
// counts it is New), and NewBounded places weighted targets on a ring with
// bounded loads, each node within c times the mean; WeightPolicy turns what
// an owner measures of a target into the weight it publishes.
package ring

import (
	"iter"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultTokensPerNode is the number of tokens each node gets when New is
// called with tokensPerNode <= 0. 512 tokens keep the most loaded of 10 nodes
// within about 10% of the mean while a 1,000-node ring still builds in well
// under a second.
const DefaultTokensPerNode = 512

// Ring is an immutable consistent-hash ring. The zero value and a nil *Ring
// are empty rings that own nothing.
type Ring struct {
	nodes         []string  // sorted, unique, non-empty names
	tokens        []uint64  // sorted ascending
	owner         []int32   // owner[i] is the index in nodes of tokens[i]
	shares        []float64 // primary share of the key space, parallel to nodes
	counts        []int     // tokens of each node, parallel to nodes
	tokensPerNode int       // the common count; 0 for a weighted ring whose counts differ
}

// New builds a ring from a set of node names with tokensPerNode tokens each
// (DefaultTokensPerNode when tokensPerNode <= 0). Duplicate names collapse
// into one node and empty names are ignored; the order of nodes does not
// matter. Equal tokens (a 64-bit collision) are ordered by node name so the
// result stays deterministic.
func New(nodes []string, tokensPerNode int) *Ring {
	if tokensPerNode <= 0 {
		tokensPerNode = DefaultTokensPerNode
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	names = slices.Clip(names)

	counts := make([]int, len(names))
	for i := range counts {
		counts[i] = tokensPerNode
	}
	return build(names, counts, tokensPerNode)
}

// build places node names[i] on the ring with counts[i] tokens: token j of
// node n is xxhash64(n + "\x00" + decimal(j)). names must be sorted and
// unique. A node's tokens are a prefix of the same sequence whatever its
// count, so changing one node's count only adds or removes that node's
// arcs. tokensPerNode is what TokensPerNode reports.
func build(names []string, counts []int, tokensPerNode int) *Ring {
	r := &Ring{nodes: names, counts: counts, tokensPerNode: tokensPerNode}
	if len(names) == 0 {
		return r
	}

	type entry struct {
		token uint64
		node  int32
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	entries := make([]entry, 0, total)
	var buf []byte
	for ni, name := range names {
		buf = append(buf[:0], name...)
		buf = append(buf, 0)
		prefix := len(buf)
		for i := range counts[ni] {
			buf = strconv.AppendInt(buf[:prefix], int64(i), 10)
			entries = append(entries, entry{token: xxhash.Sum64(buf), node: int32(ni)})
		}
	}
	// Node indexes follow the sorted names, so ordering ties by index is
	// ordering them by name.
	slices.SortFunc(entries, func(a, b entry) int {
		switch {
		case a.token < b.token:
			return -1
		case a.token > b.token:
			return 1
		default:
			return int(a.node) - int(b.node)
		}
	})

	r.tokens = make([]uint64, total)
	r.owner = make([]int32, total)
	for i, e := range entries {
		r.tokens[i] = e.token
		r.owner[i] = e.node
	}

	// Token i owns the keys in (tokens[i-1], tokens[i]]; token 0 also owns
	// the wrap-around above the last token. Unsigned subtraction gives the
	// width of each arc modulo 2^64.
	r.shares = make([]float64, len(names))
	if len(names) == 1 {
		r.shares[0] = 1
		return r
	}
	prev := r.tokens[total-1]
	for i, t := range r.tokens {
		r.shares[r.owner[i]] += float64(t-prev) / twoTo64
		prev = t
	}
	return r
}

const twoTo64 = float64(math.MaxUint64) + 1

// clockwise yields the owner (a node index) of every token from key's,
// clockwise, once around the ring: the walk that Owners and the bounded
// placements make.
func (r *Ring) clockwise(key uint64) iter.Seq[int32] {
	return func(yield func(int32) bool) {
		start := r.search(key)
		for steps := range len(r.tokens) {
			j := start + steps
			if j >= len(r.tokens) {
				j -= len(r.tokens)
			}
			if !yield(r.owner[j]) {
				return
			}
		}
	}
}

// search returns the index of the first token >= key, wrapping to 0.
func (r *Ring) search(key uint64) int {
	lo, hi := 0, len(r.tokens)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.tokens[m] < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.tokens) {
		return 0
	}
	return lo
}

// Owners appends to buf[:0] the first n distinct nodes found walking
// clockwise from key, primary owner first, and returns it. Fewer than n are
// returned when the ring has fewer nodes; none when n <= 0 or the ring is
// empty. It does not allocate when buf has capacity for the result.
func (r *Ring) Owners(key uint64, n int, buf []string) []string {
	buf = buf[:0]
	if r == nil || len(r.tokens) == 0 || n <= 0 {
		return buf
	}
	if n > len(r.nodes) {
		n = len(r.nodes)
	}
	i := r.search(key)
	if n == 1 {
		return append(buf, r.nodes[r.owner[i]])
	}
	for steps := 0; steps < len(r.tokens) && len(buf) < n; steps++ {
		name := r.nodes[r.owner[i]]
		if !slices.Contains(buf, name) {
			buf = append(buf, name)
		}
		if i++; i == len(r.tokens) {
			i = 0
		}
	}
	return buf
}

// Token is one token on the ring and the node it belongs to.
type Token struct {
	Value uint64
	Node  string
}

// Walk returns the walk Owners(key, n, nil) makes: the tokens met clockwise
// from key, in order, until n distinct nodes are found, and the last token
// before key, so that key lies in the arc (prev, walk[0]]. It returns
// nothing for an empty ring or n <= 0. It allocates: it is meant for
// explaining an owner list (the status page), not for the lookup path.
func (r *Ring) Walk(key uint64, n int) (prev Token, walk []Token) {
	if r == nil || len(r.tokens) == 0 || n <= 0 {
		return Token{}, nil
	}
	n = min(n, len(r.nodes))
	i := r.search(key)
	prev = r.token((i - 1 + len(r.tokens)) % len(r.tokens))
	seen := make([]int32, 0, n)
	for steps := 0; steps < len(r.tokens) && len(seen) < n; steps++ {
		if !slices.Contains(seen, r.owner[i]) {
			seen = append(seen, r.owner[i])
		}
		walk = append(walk, r.token(i))
		if i++; i == len(r.tokens) {
			i = 0
		}
	}
	return prev, walk
}

func (r *Ring) token(i int) Token { return Token{Value: r.tokens[i], Node: r.nodes[r.owner[i]]} }

// Primary returns the primary owner of key, or "" for an empty ring.
func (r *Ring) Primary(key uint64) string {
	if r == nil || len(r.tokens) == 0 {
		return ""
	}
	return r.nodes[r.owner[r.search(key)]]
}

// Share returns the fraction of the key space (0 to 1) that node owns as
// primary owner; 0 when the node is not on the ring. The shares of all nodes
// add up to 1.
func (r *Ring) Share(node string) float64 {
	if r == nil {
		return 0
	}
	i, ok := slices.BinarySearch(r.nodes, node)
	if !ok {
		return 0
	}
	return r.shares[i]
}

// ReplicaShare returns the fraction of the key space for which node is one
// of the first n owners; it equals Share for n == 1 and is about n/Len()
// otherwise. It walks the whole ring, so it is meant for metrics and status
// pages, not for the lookup path.
func (r *Ring) ReplicaShare(node string, n int) float64 {
	if r == nil || n <= 0 {
		return 0
	}
	ni, ok := slices.BinarySearch(r.nodes, node)
	if !ok {
		return 0
	}
	if n >= len(r.nodes) {
		return 1
	}
	if n == 1 {
		return r.shares[ni]
	}
	// Every key in the arc ending at token i sees the same walk as the
	// token itself, so the owners of the arc are Owners(tokens[i]).
	var share float64
	buf := make([]string, 0, n)
	prev := r.tokens[len(r.tokens)-1]
	for _, t := range r.tokens {
		if slices.Contains(r.Owners(t, n, buf), node) {
			share += float64(t-prev) / twoTo64
		}
		prev = t
	}
	return share
}

// Nodes returns the ring's node names, sorted. The caller must not modify
// the returned slice.
func (r *Ring) Nodes() []string {
	if r == nil {
		return nil
	}
	return r.nodes
}

// Has reports whether node is on the ring.
func (r *Ring) Has(node string) bool {
	if r == nil {
		return false
	}
	_, ok := slices.BinarySearch(r.nodes, node)
	return ok
}

// Len returns the number of nodes on the ring.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.nodes)
}

// Tokens returns the total number of tokens on the ring (nodes × tokens per
// node).
func (r *Ring) Tokens() int {
	if r == nil {
		return 0
	}
	return len(r.tokens)
}

// TokensPerNode returns the number of tokens each node has; 0 for a ring
// from NewWeighted whose nodes have different counts (see NodeTokens).
func (r *Ring) TokensPerNode() int {
	if r == nil {
		return 0
	}
	return r.tokensPerNode
}

// Equal reports whether r and o place every key on the same owners: the same
// node set with the same number of tokens for each node. Two empty rings are
// equal.
func (r *Ring) Equal(o *Ring) bool {
	if r.Len() == 0 || o.Len() == 0 {
		return r.Len() == o.Len()
	}
	return slices.Equal(r.nodes, o.nodes) && slices.Equal(r.counts, o.counts)
}

// SizeBytes returns the approximate memory held by the token table.
func (r *Ring) SizeBytes() int {
	if r == nil {
		return 0
	}
	n := cap(r.tokens)*8 + cap(r.owner)*4 + cap(r.shares)*8 + cap(r.counts)*8 + cap(r.nodes)*16
	for _, name := range r.nodes {
		n += len(name)
	}
	return n
}
