package wal

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

func TestRefIndex(t *testing.T) {
	ri := newRefIndex()
	series := map[chunks.HeadSeriesRef]*memSeries{}
	// 1<<40 stands for a ref from a damaged WAL: it must not size the directory.
	for _, ref := range []chunks.HeadSeriesRef{1, 2, refPageSize, 3*refPageSize + 5, 1 << 40} {
		series[ref] = &memSeries{ref: ref}
		ri.set(ref, series[ref])
	}
	if n := len(ri.dir.Load().dense); n != 4 {
		t.Fatalf("directory has %d pages, want 4", n)
	}
	for ref, ms := range series {
		if got := ri.get(ref); got != ms {
			t.Errorf("get(%d) = %p, want %p", ref, got, ms)
		}
	}
	for _, ref := range []chunks.HeadSeriesRef{0, 3, 2 * refPageSize, 1<<40 + 1, 1 << 50} {
		if ri.get(ref) != nil {
			t.Errorf("get(%d) found a series never set", ref)
		}
	}

	// Removing the last series of a page drops the page; trailing ones trim the directory.
	ri.set(3*refPageSize+5, nil)
	ri.set(refPageSize, nil)
	if n := len(ri.dir.Load().dense); n != 1 {
		t.Errorf("directory has %d pages after emptying the upper ones, want 1", n)
	}
	seen := map[chunks.HeadSeriesRef]bool{}
	ri.mu.Lock()
	ri.forEachLocked(func(ref chunks.HeadSeriesRef, ms *memSeries) {
		if ms.ref != ref {
			t.Errorf("forEach gave ref %d for series %d", ref, ms.ref)
		}
		seen[ref] = true
		if ref == 2 {
			ri.setLocked(ref, nil) // removing during iteration, as GC does
		}
	})
	ri.mu.Unlock()
	if len(seen) != 3 || !seen[1] || !seen[2] || !seen[1<<40] {
		t.Errorf("forEach saw %v", seen)
	}
	if ri.get(2) != nil || ri.get(1) == nil {
		t.Error("removal during iteration did not take, or took too much")
	}
}

// Readers never lock: run them against writers under the race detector.
func TestRefIndexConcurrent(t *testing.T) {
	ri := newRefIndex()
	const n = 3 * refPageSize
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ref := chunks.HeadSeriesRef(1); ref <= n; ref++ {
			ri.set(ref, &memSeries{ref: ref})
		}
		for ref := chunks.HeadSeriesRef(1); ref <= n; ref += 2 {
			ri.set(ref, nil)
		}
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				for ref := chunks.HeadSeriesRef(1); ref <= n; ref++ {
					if ms := ri.get(ref); ms != nil && ms.ref != ref {
						t.Errorf("get(%d) returned series %d", ref, ms.ref)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for ref := chunks.HeadSeriesRef(1); ref <= n; ref++ {
		if got := ri.get(ref) != nil; got != (ref%2 == 0) {
			t.Fatalf("ref %d present = %v", ref, got)
		}
	}
}

// TestRefIndexCompacts removes all but ~1% of 20 pages of series (and keeps
// the last page whole, as new refs go there): the sparse pages hold only the
// survivors, every lookup answers as before, a sparse page takes removals
// and new refs, and emptied pages go.
func TestRefIndexCompacts(t *testing.T) {
	const n = 20*refPageSize - 1
	ri := newRefIndex()
	want := map[chunks.HeadSeriesRef]*memSeries{}
	for ref := chunks.HeadSeriesRef(1); ref <= n; ref++ {
		ms := &memSeries{ref: ref}
		ri.set(ref, ms)
		if ref%97 == 0 || ref >= 19*refPageSize {
			want[ref] = ms
		}
	}
	ri.mu.Lock()
	ri.forEachLocked(func(ref chunks.HeadSeriesRef, ms *memSeries) {
		if want[ref] == nil {
			ri.setLocked(ref, nil)
		}
	})
	ri.compactLocked()
	ri.mu.Unlock()
	check := func(when string) {
		t.Helper()
		for ref := chunks.HeadSeriesRef(0); ref <= n+refPageSize; ref++ {
			if got := ri.get(ref); got != want[ref] {
				t.Fatalf("%s: get(%d) = %p, want %p", when, ref, got, want[ref])
			}
		}
		seen := 0
		ri.mu.Lock()
		ri.forEachLocked(func(ref chunks.HeadSeriesRef, ms *memSeries) {
			if want[ref] != ms {
				t.Errorf("%s: forEach gave %d -> %p", when, ref, ms)
			}
			seen++
		})
		ri.mu.Unlock()
		if seen != len(want) {
			t.Fatalf("%s: forEach saw %d series, want %d", when, seen, len(want))
		}
	}
	check("after compaction")
	d := ri.dir.Load()
	for p := range 19 {
		if d.dense[p] != nil || d.sparse[p] == nil || len(d.sparse[p].entries) > refPageSize/90 {
			t.Fatalf("page %d not compacted to its survivors", p)
		}
	}
	if d.dense[19] == nil {
		t.Fatal("the highest page was compacted")
	}

	// Removing from a sparse page, then compacting, rebuilds it smaller.
	var removed int
	for ref := range want {
		if ref < refPageSize && removed < 30 {
			ri.set(ref, nil)
			delete(want, ref)
			removed++
		}
	}
	check("after removals from a sparse page")
	before := len(ri.dir.Load().sparse[0].entries)
	ri.mu.Lock()
	ri.compactLocked()
	ri.mu.Unlock()
	if after := len(ri.dir.Load().sparse[0].entries); after != before-removed {
		t.Fatalf("sparse page 0 has %d slots after compaction, want %d", after, before-removed)
	}
	check("after second compaction")

	// A new ref in a sparse page makes it dense again.
	ms := &memSeries{ref: refPageSize + 1}
	ri.set(ms.ref, ms)
	want[ms.ref] = ms
	if ri.dir.Load().dense[1] == nil {
		t.Fatal("a new ref did not make its sparse page dense")
	}
	check("after insert")

	// Emptying a sparse page drops it.
	for ref := range want {
		if ref >= 2*refPageSize && ref < 3*refPageSize {
			ri.set(ref, nil)
			delete(want, ref)
		}
	}
	if d := ri.dir.Load(); d.sparse[2] != nil || d.dense[2] != nil {
		t.Fatal("an emptied sparse page was kept")
	}
	check("after emptying page 2")
}

// Readers never lock: while a writer removes series (marking them dead
// first, as GC does), compacts and adds new pages, readers must always find
// every survivor, and may find a removed series only as dead.
func TestRefIndexCompactConcurrentReaders(t *testing.T) {
	const n = 8*refPageSize - 1 // pages 0-7; new series go to page 8
	ri := newRefIndex()
	all := make([]*memSeries, n+1)
	for ref := 1; ref <= n; ref++ {
		all[ref] = &memSeries{ref: chunks.HeadSeriesRef(ref)}
		ri.set(chunks.HeadSeriesRef(ref), all[ref])
	}
	survivor := func(ref int) bool { return ref%50 == 0 }
	var removed [8]atomic.Bool // set once page p's removals are done
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for ref := 1; ref <= n; ref++ {
					gone := removed[ref>>refPageBits].Load()
					got := ri.get(chunks.HeadSeriesRef(ref))
					switch {
					case survivor(ref) && got != all[ref]:
						t.Errorf("survivor %d: got %p, want %p", ref, got, all[ref])
						return
					case !survivor(ref) && got != all[ref] && got != nil:
						t.Errorf("ref %d: got %p, want %p or nil", ref, got, all[ref])
						return
					case !survivor(ref) && gone && got != nil && !got.isDead():
						t.Errorf("removed %d: got %p (dead %v)", ref, got, got != nil && got.isDead())
						return
					}
				}
			}
		}()
	}
	// Remove in rounds, a page at a time, compacting after each as GC does.
	for p := range 8 {
		ri.mu.Lock()
		ri.forEachLocked(func(ref chunks.HeadSeriesRef, ms *memSeries) {
			if int(ref)>>refPageBits == p && !survivor(int(ref)) {
				ms.mu.Lock()
				ms.dead = true
				ms.mu.Unlock()
				ri.setLocked(ref, nil)
			}
		})
		ri.compactLocked()
		ri.mu.Unlock()
		removed[p].Store(true)
		ms := &memSeries{ref: chunks.HeadSeriesRef(n + 1 + p)}
		ri.set(ms.ref, ms) // new series keep coming at the top
	}
	close(done)
	wg.Wait()
	if d := ri.dir.Load(); d.sparse[3] == nil {
		t.Fatal("pages were not compacted")
	}
}

func TestShrink(t *testing.T) {
	m := map[int]int{}
	peak := 0
	for i := range 1000 {
		m[i] = i
		peak = max(peak, len(m))
	}
	if got := shrink(m, &peak); len(got) != 1000 || peak != 1000 {
		t.Fatal("a full map was rebuilt")
	}
	for i := range 900 {
		delete(m, i)
	}
	got := shrink(m, &peak)
	if peak != 100 || len(got) != 100 || got[950] != 950 {
		t.Fatalf("shrink: peak %d, len %d", peak, len(got))
	}
	got[-1] = 1
	if _, ok := m[-1]; ok {
		t.Fatal("shrink returned the old map")
	}
}

// TestSeriesGCGivesMemoryBack churns 5 pages of series down to every 100th
// through the Storage: the ref index keeps the survivors in sparse pages,
// the map of forgotten refs is rebuilt once truncation is past them, and
// survivors are still found by ref and by labels, take samples, and new
// series still come.
func TestSeriesGCGivesMemoryBack(t *testing.T) {
	w := openTest(t, t.TempDir(), Options{}, nil)
	series := makeSeries(5*refPageSize, "churn")
	refs := appendFloats(t, w.Storage, series, w.clock.Ms(), 1)
	var survivors []labels.Labels
	var survivorRefs []storage.SeriesRef
	for i := range series {
		if i%100 == 0 {
			survivors = append(survivors, series[i])
			survivorRefs = append(survivorRefs, refs[i])
		}
	}
	w.clock.Advance(w.opts.SeriesGCAge + time.Minute)
	appendFloats(t, w.Storage, survivors, w.clock.Ms(), 2)
	if err := w.Truncate(); err != nil { // forgets the rest
		t.Fatal(err)
	}
	if got := w.ActiveSeries(); got != len(survivors) {
		t.Fatalf("%d series after GC, want %d", got, len(survivors))
	}
	d := w.series.refs.dir.Load()
	sparse := 0
	for p := range d.sparse {
		if d.sparse[p] != nil {
			sparse++
		}
	}
	if sparse < 4 {
		t.Fatalf("%d sparse pages after GC kept 1%% of 5 pages, want at least 4", sparse)
	}
	for i, ls := range survivors {
		ms := w.series.getByRef(chunks.HeadSeriesRef(survivorRefs[i]))
		if ms == nil || !labels.Equal(ms.lset, ls) || w.series.getByLabels(ls.Hash(), ls) != ms {
			t.Fatalf("survivor %s lost after compaction", ls)
		}
	}
	// Survivors take samples by their cached ref; new series get new refs.
	app := w.AppenderV2(t.Context())
	w.clock.Advance(time.Minute)
	for i, ls := range survivors {
		ref, err := app.Append(survivorRefs[i], ls, 0, w.clock.Ms(), 3, nil, nil, storage.AOptions{})
		if err != nil || ref != survivorRefs[i] {
			t.Fatalf("append to survivor %s: ref %d (want %d), %v", ls, ref, survivorRefs[i], err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	fresh := appendFloats(t, w.Storage, makeSeries(10, "fresh"), w.clock.Ms(), 1)
	if w.series.getByRef(chunks.HeadSeriesRef(fresh[0])) == nil {
		t.Fatal("a new series is not found by ref")
	}

	// The pass also deleted the segment that referred to the forgotten
	// refs (no reader holds it), so the map that remembered them until
	// then was rebuilt empty.
	if len(w.deleted) != 0 || w.deletedPeak != 0 {
		t.Fatalf("deleted holds %d refs (peak %d) after truncation passed them", len(w.deleted), w.deletedPeak)
	}
}
