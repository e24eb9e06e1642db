package wal

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/tsdb/chunks"
)

// refIndex finds a series by ref. Every scraped sample does this lookup, so
// it takes no lock: refs are handed out in increasing order, which lets a
// paged array replace a hash map. A lookup is two atomic loads, and the
// series of one target, created together, share a page. Writers (new
// series, replay, GC) serialise on mu; a page whose series are all gone is
// dropped. Refs of 2^32 and more, which only a damaged WAL could hold, go to
// a locked map instead of growing the directory.
//
// Churn leaves pages with a few long-lived series among thousands of
// forgotten ones, and a full page (32 KiB) per survivor would keep the
// memory of every series ever seen. So after a GC pass compact turns pages
// at most 1/8 full (but the highest, where new refs go) into sparse pages:
// a bitmap of the refs present and their slots packed in ref order, found by
// counting bits. A new ref in a sparse page (only replay does that) makes
// it dense again.
//
// Readers may hold an older directory: it still shows the page as it was,
// so a reader can get a series that was removed meanwhile. Only GC removes
// series while readers run, and it marks them dead first; callers check.
type refIndex struct {
	mu  sync.Mutex
	dir atomic.Pointer[refDir] // replaced, never modified, by writers
	far map[chunks.HeadSeriesRef]*memSeries
	// farMu guards far for readers; writers hold mu as well.
	farMu sync.RWMutex
}

// refDir holds page p in dense[p] or sparse[p], never both; the slices
// have the same length.
type refDir struct {
	dense  []*refPage
	sparse []*sparseRefPage
}

const (
	refPageBits = 12
	refPageSize = 1 << refPageBits
	maxRefPages = 1 << 20 // refs below 2^32
	// refSparseMaxLive: compact turns a page with at most this many series sparse.
	refSparseMaxLive = refPageSize / 8
)

type refPage struct {
	live    int // guarded by refIndex.mu
	entries [refPageSize]atomic.Pointer[memSeries]
}

// sparseRefPage: the slots of the refs whose bits are set, in order. The
// bitmap never changes; a removed series leaves a nil slot until the next
// compact.
type sparseRefPage struct {
	live    int // guarded by refIndex.mu
	words   [refPageSize / 64]uint64
	rank    [refPageSize / 64]uint16 // set bits in the words before
	entries []atomic.Pointer[memSeries]
}

func (sp *sparseRefPage) slot(i uint64) *atomic.Pointer[memSeries] {
	w, bit := i/64, uint64(1)<<(i%64)
	word := sp.words[w]
	if word&bit == 0 {
		return nil
	}
	return &sp.entries[int(sp.rank[w])+bits.OnesCount64(word&(bit-1))]
}

func newRefIndex() *refIndex {
	ri := &refIndex{far: map[chunks.HeadSeriesRef]*memSeries{}}
	ri.dir.Store(&refDir{})
	return ri
}

func (ri *refIndex) get(ref chunks.HeadSeriesRef) *memSeries {
	p := uint64(ref) >> refPageBits
	d := ri.dir.Load()
	if p < uint64(len(d.dense)) {
		if pg := d.dense[p]; pg != nil {
			return pg.entries[uint64(ref)&(refPageSize-1)].Load()
		}
	}
	return ri.getSlow(d, ref)
}

// getSlow looks in sparse pages and far refs, off the inlined fast path.
func (ri *refIndex) getSlow(d *refDir, ref chunks.HeadSeriesRef) *memSeries {
	p := uint64(ref) >> refPageBits
	if p >= maxRefPages {
		ri.farMu.RLock()
		defer ri.farMu.RUnlock()
		return ri.far[ref]
	}
	if p >= uint64(len(d.sparse)) || d.sparse[p] == nil {
		return nil
	}
	if e := d.sparse[p].slot(uint64(ref) & (refPageSize - 1)); e != nil {
		return e.Load()
	}
	return nil
}

// set makes ms the series of ref (ms == nil removes it).
func (ri *refIndex) set(ref chunks.HeadSeriesRef, ms *memSeries) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	ri.setLocked(ref, ms)
}

func (ri *refIndex) setLocked(ref chunks.HeadSeriesRef, ms *memSeries) {
	p := uint64(ref) >> refPageBits
	if p >= maxRefPages {
		ri.farMu.Lock()
		if ms == nil {
			delete(ri.far, ref)
		} else {
			ri.far[ref] = ms
		}
		ri.farMu.Unlock()
		return
	}
	i := uint64(ref) & (refPageSize - 1)
	d := ri.dir.Load()
	if p < uint64(len(d.sparse)) && d.sparse[p] != nil {
		sp := d.sparse[p]
		if e := sp.slot(i); e != nil {
			switch old := e.Swap(ms); {
			case old == nil && ms != nil:
				sp.live++
			case old != nil && ms == nil:
				sp.live--
				if sp.live == 0 {
					ri.dropPageLocked(p)
				}
			}
			return
		}
		if ms == nil {
			return
		}
		d = ri.replaceLocked(p, sp.densify(), nil)
	}
	if p >= uint64(len(d.dense)) || d.dense[p] == nil {
		if ms == nil {
			return
		}
		d = ri.replaceLocked(p, &refPage{}, nil)
	}
	pg := d.dense[p]
	switch old := pg.entries[i].Swap(ms); {
	case old == nil && ms != nil:
		pg.live++
	case old != nil && ms == nil:
		pg.live--
		if pg.live == 0 {
			ri.dropPageLocked(p)
		}
	}
}

// replaceLocked installs a directory in which page p is dense (or sparse,
// or absent when both are nil), grown or trimmed as needed, and returns it.
func (ri *refIndex) replaceLocked(p uint64, dense *refPage, sparse *sparseRefPage) *refDir {
	old := ri.dir.Load()
	n := max(len(old.dense), int(p)+1)
	d := &refDir{dense: make([]*refPage, n), sparse: make([]*sparseRefPage, n)}
	copy(d.dense, old.dense)
	copy(d.sparse, old.sparse)
	d.dense[p], d.sparse[p] = dense, sparse
	d.trim()
	ri.dir.Store(d)
	return d
}

// trim drops trailing empty pages.
func (d *refDir) trim() {
	n := len(d.dense)
	for n > 0 && d.dense[n-1] == nil && d.sparse[n-1] == nil {
		n--
	}
	d.dense, d.sparse = d.dense[:n], d.sparse[:n]
}

// dropPageLocked replaces the directory by one without page p. Readers
// holding the old directory still see the page, whose entries are all nil.
func (ri *refIndex) dropPageLocked(p uint64) {
	ri.replaceLocked(p, nil, nil)
}

// densify returns the page's series as a dense page.
func (sp *sparseRefPage) densify() *refPage {
	pg := &refPage{}
	k := 0
	for w, word := range sp.words {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &= word - 1
			if ms := sp.entries[k].Load(); ms != nil {
				pg.entries[w*64+b].Store(ms)
				pg.live++
			}
			k++
		}
	}
	return pg
}

// compactLocked makes pages at most 1/8 full sparse (all but the highest
// page) and rebuilds sparse pages that removals left half empty, in one
// new directory. The caller holds mu.
func (ri *refIndex) compactLocked() {
	old := ri.dir.Load()
	var d *refDir
	top := len(old.dense) - 1
	for p := range old.dense {
		var sp *sparseRefPage
		switch {
		case old.dense[p] != nil && old.dense[p].live <= refSparseMaxLive && p != top:
			pg := old.dense[p]
			sp = newSparseRefPage(pg.live, func(yield func(int, *memSeries)) {
				for i := range pg.entries {
					if ms := pg.entries[i].Load(); ms != nil {
						yield(i, ms)
					}
				}
			})
		case old.sparse[p] != nil && old.sparse[p].live < len(old.sparse[p].entries)/2:
			o := old.sparse[p]
			sp = newSparseRefPage(o.live, func(yield func(int, *memSeries)) {
				k := 0
				for w, word := range o.words {
					for word != 0 {
						b := bits.TrailingZeros64(word)
						word &= word - 1
						if ms := o.entries[k].Load(); ms != nil {
							yield(w*64+b, ms)
						}
						k++
					}
				}
			})
		default:
			continue
		}
		if d == nil {
			d = &refDir{dense: append([]*refPage(nil), old.dense...), sparse: append([]*sparseRefPage(nil), old.sparse...)}
		}
		d.dense[p], d.sparse[p] = nil, sp
	}
	if d != nil {
		ri.dir.Store(d)
	}
}

// newSparseRefPage builds a sparse page of live series from each, which
// yields them in slot order.
func newSparseRefPage(live int, each func(yield func(int, *memSeries))) *sparseRefPage {
	sp := &sparseRefPage{live: live, entries: make([]atomic.Pointer[memSeries], live)}
	k := 0
	each(func(i int, ms *memSeries) {
		sp.words[i/64] |= 1 << (i % 64)
		sp.entries[k].Store(ms)
		k++
	})
	n := 0
	for w, word := range sp.words {
		sp.rank[w] = uint16(n)
		n += bits.OnesCount64(word)
	}
	return sp
}

// forEachLocked calls f for every indexed series; f may call setLocked to
// remove the series it is given. The caller holds mu.
func (ri *refIndex) forEachLocked(f func(ref chunks.HeadSeriesRef, ms *memSeries)) {
	d := ri.dir.Load()
	for p := range d.dense {
		base := uint64(p) << refPageBits
		if pg := d.dense[p]; pg != nil {
			for i := range pg.entries {
				if ms := pg.entries[i].Load(); ms != nil {
					f(chunks.HeadSeriesRef(base|uint64(i)), ms)
				}
			}
			continue
		}
		if sp := d.sparse[p]; sp != nil {
			k := 0
			for w, word := range sp.words {
				for word != 0 {
					b := bits.TrailingZeros64(word)
					word &= word - 1
					if ms := sp.entries[k].Load(); ms != nil {
						f(chunks.HeadSeriesRef(base|uint64(w*64+b)), ms)
					}
					k++
				}
			}
		}
	}
	ri.farMu.RLock()
	far := make(map[chunks.HeadSeriesRef]*memSeries, len(ri.far))
	for ref, ms := range ri.far {
		far[ref] = ms
	}
	ri.farMu.RUnlock()
	for ref, ms := range far {
		f(ref, ms)
	}
}
