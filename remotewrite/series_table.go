package remotewrite

import (
	"math/bits"

	"github.com/prometheus/prometheus/tsdb/chunks"
)

// seriesTable maps WAL series refs to their cached entries. The WAL hands out
// refs as small integers in increasing order, and a target's series are
// created together, so a paged array beats a hash map on the per-sample
// lookup: an index instead of a hash probe, and neighbouring series share
// cache lines.
//
// Churn leaves pages with a few long-lived series among thousands of
// forgotten ones; a full page (160 KiB) per survivor would keep the memory of
// every series ever seen. So deleteIf turns a page that is at most 1/8 full
// into a sparse page: a bitmap of the refs present and their entries packed
// in ref order, found by counting bits (still no hashing). A sparse page
// that gets a new ref (only replay does that) becomes dense again. The page
// refs are being handed out in, the highest, always stays dense.
type seriesTable struct {
	// dense[p] or sparse[p] (never both) holds page p; both slices have the same length.
	dense  []*seriesPage
	sparse []*sparseSeriesPage
	// far holds refs beyond maxSeriesPages pages, which a healthy WAL does not
	// reach; it keeps a corrupt huge ref from growing pages without bound.
	far map[chunks.HeadSeriesRef]seriesEntry
	n   int
}

const (
	seriesPageBits = 12
	seriesPageSize = 1 << seriesPageBits
	maxSeriesPages = 1 << 20 // refs below 2^32: at most 16 MiB of page pointers
	// sparseMaxLive: a page with at most this many entries is kept sparse.
	sparseMaxLive = seriesPageSize / 8
)

type seriesPage struct {
	live    int
	entries [seriesPageSize]seriesSlot
}

type seriesSlot struct {
	seriesEntry
	ok bool
}

// sparseSeriesPage holds the entries of a page whose bits are set, in order.
type sparseSeriesPage struct {
	present pageBitmap
	entries []seriesEntry
}

// pageBitmap says which of a page's refs are present, and where each sits
// among the present ones.
type pageBitmap struct {
	words [seriesPageSize / 64]uint64
	rank  [seriesPageSize / 64]uint16 // present refs in the words before
}

// index returns the position of slot i among the present ones.
func (b *pageBitmap) index(i uint64) (int, bool) {
	w, bit := i/64, uint64(1)<<(i%64)
	word := b.words[w]
	if word&bit == 0 {
		return 0, false
	}
	return int(b.rank[w]) + bits.OnesCount64(word&(bit-1)), true
}

func (b *pageBitmap) set(i uint64) { b.words[i/64] |= 1 << (i % 64) }

// finish fills rank once every bit is set.
func (b *pageBitmap) finish() {
	n := 0
	for w, word := range b.words {
		b.rank[w] = uint16(n)
		n += bits.OnesCount64(word)
	}
}

func (t *seriesTable) get(ref chunks.HeadSeriesRef) (seriesEntry, bool) {
	p := uint64(ref) >> seriesPageBits
	if p < uint64(len(t.dense)) {
		if pg := t.dense[p]; pg != nil {
			e := &pg.entries[uint64(ref)&(seriesPageSize-1)]
			return e.seriesEntry, e.ok
		}
	}
	return t.getSlow(ref)
}

// getSlow looks in sparse pages and far refs, off the inlined fast path.
func (t *seriesTable) getSlow(ref chunks.HeadSeriesRef) (seriesEntry, bool) {
	p := uint64(ref) >> seriesPageBits
	if p >= maxSeriesPages {
		e, ok := t.far[ref]
		return e, ok
	}
	if p >= uint64(len(t.sparse)) || t.sparse[p] == nil {
		return seriesEntry{}, false
	}
	sp := t.sparse[p]
	if k, ok := sp.present.index(uint64(ref) & (seriesPageSize - 1)); ok {
		return sp.entries[k], true
	}
	return seriesEntry{}, false
}

func (t *seriesTable) set(ref chunks.HeadSeriesRef, se seriesEntry) {
	p := uint64(ref) >> seriesPageBits
	if p >= maxSeriesPages {
		if t.far == nil {
			t.far = map[chunks.HeadSeriesRef]seriesEntry{}
		}
		if _, ok := t.far[ref]; !ok {
			t.n++
		}
		t.far[ref] = se
		return
	}
	i := uint64(ref) & (seriesPageSize - 1)
	for uint64(len(t.dense)) <= p {
		t.dense = append(t.dense, nil)
		t.sparse = append(t.sparse, nil)
	}
	if sp := t.sparse[p]; sp != nil {
		if k, ok := sp.present.index(i); ok {
			sp.entries[k] = se
			return
		}
		t.dense[p], t.sparse[p] = sp.densify(), nil
	}
	if t.dense[p] == nil {
		t.dense[p] = &seriesPage{}
	}
	pg := t.dense[p]
	e := &pg.entries[i]
	if !e.ok {
		pg.live++
		t.n++
	}
	e.seriesEntry, e.ok = se, true
}

// densify returns the page as a dense one.
func (sp *sparseSeriesPage) densify() *seriesPage {
	pg := &seriesPage{live: len(sp.entries)}
	k := 0
	for w, word := range sp.present.words {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &= word - 1
			pg.entries[w*64+b] = seriesSlot{seriesEntry: sp.entries[k], ok: true}
			k++
		}
	}
	return pg
}

// deleteIf forgets every entry for which drop returns true and returns how
// many. Pages it leaves at most 1/8 full become sparse.
func (t *seriesTable) deleteIf(drop func(seriesEntry) bool) int {
	n := 0
	for ref, e := range t.far {
		if drop(e) {
			delete(t.far, ref)
			n++
		}
	}
	top := len(t.dense) - 1
	for p := range t.dense {
		if pg := t.dense[p]; pg != nil {
			for j := range pg.entries {
				e := &pg.entries[j]
				if e.ok && drop(e.seriesEntry) {
					e.seriesEntry, e.ok = seriesEntry{}, false
					pg.live--
					n++
				}
			}
			switch {
			case pg.live == 0:
				t.dense[p] = nil
			case pg.live <= sparseMaxLive && p != top:
				t.dense[p], t.sparse[p] = nil, pg.sparsify()
			}
			continue
		}
		if sp := t.sparse[p]; sp != nil {
			kept, removed := sp.filter(drop)
			n += removed
			t.sparse[p] = kept
		}
	}
	t.n -= n
	for len(t.dense) > 0 && t.dense[len(t.dense)-1] == nil && t.sparse[len(t.sparse)-1] == nil {
		t.dense, t.sparse = t.dense[:len(t.dense)-1], t.sparse[:len(t.sparse)-1]
	}
	return n
}

// sparsify returns the page's entries as a sparse page.
func (pg *seriesPage) sparsify() *sparseSeriesPage {
	sp := &sparseSeriesPage{entries: make([]seriesEntry, 0, pg.live)}
	for i := range pg.entries {
		if e := &pg.entries[i]; e.ok {
			sp.present.set(uint64(i))
			sp.entries = append(sp.entries, e.seriesEntry)
		}
	}
	sp.present.finish()
	return sp
}

// filter returns the page without the entries drop selects (nil when none
// is left, the page itself when none is dropped) and how many it dropped.
func (sp *sparseSeriesPage) filter(drop func(seriesEntry) bool) (*sparseSeriesPage, int) {
	var keep pageBitmap
	kept, k := 0, 0
	for w, word := range sp.present.words {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &= word - 1
			if !drop(sp.entries[k]) {
				keep.set(uint64(w*64 + b))
				kept++
			}
			k++
		}
	}
	switch {
	case kept == len(sp.entries):
		return sp, 0
	case kept == 0:
		return nil, len(sp.entries)
	}
	out := &sparseSeriesPage{present: keep, entries: make([]seriesEntry, 0, kept)}
	k = 0
	for w, word := range sp.present.words {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &= word - 1
			if keep.words[w]&(1<<b) != 0 {
				out.entries = append(out.entries, sp.entries[k])
			}
			k++
		}
	}
	out.present.finish()
	return out, len(sp.entries) - kept
}

func (t *seriesTable) len() int { return t.n }
