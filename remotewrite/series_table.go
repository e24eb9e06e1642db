package remotewrite

import "github.com/prometheus/prometheus/tsdb/chunks"

// seriesTable maps WAL series refs to their cached entries. The WAL hands out
// refs as small integers in increasing order, and a target's series are
// created together, so a paged array beats a hash map on the per-sample
// lookup: an index instead of a hash probe, and neighbouring series share
// cache lines.
//
// Churn leaves pages with a few long-lived series among thousands of
// forgotten ones, and a full page (96 KiB) per survivor would keep the
// memory of every series ever seen. So deleteIf moves the entries of a page
// left at most 1/8 full (except the highest, where new refs go) into a
// map and frees the page: about 50 bytes per survivor instead of a page
// share, at the price of a hash probe for those survivors only. The map
// also holds refs beyond maxSeriesPages pages, which a healthy WAL does not
// reach, so that a corrupt huge ref cannot grow pages without bound.
//
// A ref is in its page or in far, never both; get looks in far when the
// page does not have it, which keeps get small enough to be inlined.
type seriesTable struct {
	pages []*seriesPage
	far   map[chunks.HeadSeriesRef]seriesEntry
	// farPeak is the most entries far held since it was made (see shrinkMap).
	farPeak int
	n       int
}

const (
	seriesPageBits = 12
	seriesPageSize = 1 << seriesPageBits
	maxSeriesPages = 1 << 20 // refs below 2^32: at most 8 MiB of page pointers
	// sparseMaxLive: deleteIf moves the entries of a page with at most this many to far.
	sparseMaxLive = seriesPageSize / 8
)

type seriesPage struct {
	live    int
	entries [seriesPageSize]seriesEntry // 24 bytes each; inPage marks a used slot
}

func (t *seriesTable) get(ref chunks.HeadSeriesRef) (seriesEntry, bool) {
	if p := uint64(ref) >> seriesPageBits; p < uint64(len(t.pages)) && t.pages[p] != nil {
		if e := &t.pages[p].entries[uint64(ref)&(seriesPageSize-1)]; e.inPage {
			return *e, true
		}
	}
	e, ok := t.far[ref]
	return e, ok
}

func (t *seriesTable) set(ref chunks.HeadSeriesRef, se seriesEntry) {
	p := uint64(ref) >> seriesPageBits
	if _, ok := t.far[ref]; ok || p >= maxSeriesPages {
		if t.far == nil {
			t.far = map[chunks.HeadSeriesRef]seriesEntry{}
		}
		if !ok {
			t.n++
		}
		t.far[ref] = se
		t.farPeak = max(t.farPeak, len(t.far))
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
	if !e.inPage {
		pg.live++
		t.n++
	}
	*e = se
	e.inPage = true
}

// deleteIf forgets every entry for which drop returns true and returns how
// many. It moves the entries of pages it leaves at most 1/8 full to far.
func (t *seriesTable) deleteIf(drop func(seriesEntry) bool) int {
	n := 0
	for ref, e := range t.far {
		if drop(e) {
			delete(t.far, ref)
			n++
		}
	}
	top := len(t.pages) - 1
	for i, pg := range t.pages {
		if pg == nil {
			continue
		}
		for j := range pg.entries {
			e := &pg.entries[j]
			if e.inPage && drop(*e) {
				*e = seriesEntry{}
				pg.live--
				n++
			}
		}
		if pg.live > sparseMaxLive || i == top {
			if pg.live == 0 {
				t.pages[i] = nil
			}
			continue
		}
		if pg.live > 0 && t.far == nil {
			t.far = map[chunks.HeadSeriesRef]seriesEntry{}
		}
		for j := range pg.entries {
			if e := &pg.entries[j]; e.inPage {
				fe := *e
				fe.inPage = false
				t.far[chunks.HeadSeriesRef(uint64(i)<<seriesPageBits|uint64(j))] = fe
			}
		}
		t.farPeak = max(t.farPeak, len(t.far))
		t.pages[i] = nil
	}
	t.n -= n
	for len(t.pages) > 0 && t.pages[len(t.pages)-1] == nil {
		t.pages = t.pages[:len(t.pages)-1]
	}
	t.far = shrinkMap(t.far, &t.farPeak)
	return n
}

func (t *seriesTable) len() int { return t.n }

// shrinkMap returns m, or a copy of it sized to its contents once it holds
// fewer than a quarter of its peak entries (and resets peak): a Go map
// keeps the memory of its largest size. The quarter keeps the copying
// amortised.
func shrinkMap[K comparable, V any](m map[K]V, peak *int) map[K]V {
	if *peak < 64 || len(m) >= *peak/4 {
		return m
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	*peak = len(out)
	return out
}
