package remotewrite

import "github.com/prometheus/prometheus/tsdb/chunks"

// seriesTable maps WAL series refs to their cached entries. The WAL hands out
// refs as small integers in increasing order, and a target's series are
// created together, so a paged array beats a hash map on the per-sample
// lookup: an index instead of a hash probe, and neighbouring series share
// cache lines. A page is freed when its last series is forgotten, so refs
// that only grow (series churn, restarts) cost a pointer per 4096 refs.
type seriesTable struct {
	pages []*seriesPage
	// far holds refs beyond maxSeriesPages pages, which a healthy WAL does not
	// reach; it keeps a corrupt huge ref from growing pages without bound.
	far map[chunks.HeadSeriesRef]seriesEntry
	n   int
}

const (
	seriesPageBits = 12
	seriesPageSize = 1 << seriesPageBits
	maxSeriesPages = 1 << 20 // refs below 2^32: at most 8 MiB of page pointers
)

type seriesPage struct {
	live    int
	entries [seriesPageSize]struct {
		seriesEntry
		ok bool
	}
}

func (t *seriesTable) get(ref chunks.HeadSeriesRef) (seriesEntry, bool) {
	p := uint64(ref) >> seriesPageBits
	if p >= maxSeriesPages {
		e, ok := t.far[ref]
		return e, ok
	}
	if p >= uint64(len(t.pages)) || t.pages[p] == nil {
		return seriesEntry{}, false
	}
	e := &t.pages[p].entries[uint64(ref)&(seriesPageSize-1)]
	return e.seriesEntry, e.ok
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
	for uint64(len(t.pages)) <= p {
		t.pages = append(t.pages, nil)
	}
	if t.pages[p] == nil {
		t.pages[p] = &seriesPage{}
	}
	pg := t.pages[p]
	e := &pg.entries[uint64(ref)&(seriesPageSize-1)]
	if !e.ok {
		pg.live++
		t.n++
	}
	e.seriesEntry, e.ok = se, true
}

// deleteIf forgets every entry for which drop returns true and returns how many.
func (t *seriesTable) deleteIf(drop func(seriesEntry) bool) int {
	n := 0
	for ref, e := range t.far {
		if drop(e) {
			delete(t.far, ref)
			n++
		}
	}
	for i, pg := range t.pages {
		if pg == nil {
			continue
		}
		for j := range pg.entries {
			e := &pg.entries[j]
			if e.ok && drop(e.seriesEntry) {
				e.seriesEntry, e.ok = seriesEntry{}, false
				pg.live--
				n++
			}
		}
		if pg.live == 0 {
			t.pages[i] = nil
		}
	}
	t.n -= n
	for len(t.pages) > 0 && t.pages[len(t.pages)-1] == nil {
		t.pages = t.pages[:len(t.pages)-1]
	}
	return n
}

func (t *seriesTable) len() int { return t.n }
