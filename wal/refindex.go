package wal

import (
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
type refIndex struct {
	mu  sync.Mutex
	dir atomic.Pointer[[]*refPage] // replaced, never modified, by writers
	far map[chunks.HeadSeriesRef]*memSeries
	// farMu guards far for readers; writers hold mu as well.
	farMu sync.RWMutex
}

const (
	refPageBits = 12
	refPageSize = 1 << refPageBits
	maxRefPages = 1 << 20 // refs below 2^32
)

type refPage struct {
	live    int // guarded by refIndex.mu
	entries [refPageSize]atomic.Pointer[memSeries]
}

func newRefIndex() *refIndex {
	ri := &refIndex{far: map[chunks.HeadSeriesRef]*memSeries{}}
	ri.dir.Store(&[]*refPage{})
	return ri
}

func (ri *refIndex) get(ref chunks.HeadSeriesRef) *memSeries {
	p := uint64(ref) >> refPageBits
	if p >= maxRefPages {
		ri.farMu.RLock()
		defer ri.farMu.RUnlock()
		return ri.far[ref]
	}
	dir := *ri.dir.Load()
	if p >= uint64(len(dir)) || dir[p] == nil {
		return nil
	}
	return dir[p].entries[uint64(ref)&(refPageSize-1)].Load()
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
	dir := *ri.dir.Load()
	if p >= uint64(len(dir)) || dir[p] == nil {
		if ms == nil {
			return
		}
		grown := make([]*refPage, max(len(dir), int(p)+1))
		copy(grown, dir)
		grown[p] = &refPage{}
		ri.dir.Store(&grown)
		dir = grown
	}
	pg := dir[p]
	e := &pg.entries[uint64(ref)&(refPageSize-1)]
	switch old := e.Swap(ms); {
	case old == nil && ms != nil:
		pg.live++
	case old != nil && ms == nil:
		pg.live--
		if pg.live == 0 {
			ri.dropPageLocked(p)
		}
	}
}

// dropPageLocked replaces the directory by one without page p, trimmed of
// trailing empty pages. Readers holding the old directory still see the
// page, whose entries are all nil.
func (ri *refIndex) dropPageLocked(p uint64) {
	dir := *ri.dir.Load()
	n := len(dir)
	for n > 0 && (dir[n-1] == nil || uint64(n-1) == p) {
		n--
	}
	shrunk := make([]*refPage, n)
	copy(shrunk, dir[:n])
	if p < uint64(n) {
		shrunk[p] = nil
	}
	ri.dir.Store(&shrunk)
}

// forEachLocked calls f for every indexed series; f may call setLocked to
// remove the series it is given. The caller holds mu.
func (ri *refIndex) forEachLocked(f func(ref chunks.HeadSeriesRef, ms *memSeries)) {
	for p, pg := range *ri.dir.Load() {
		if pg == nil {
			continue
		}
		for i := range pg.entries {
			if ms := pg.entries[i].Load(); ms != nil {
				f(chunks.HeadSeriesRef(uint64(p)<<refPageBits|uint64(i)), ms)
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
