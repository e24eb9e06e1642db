package wal

import (
	"sync"
	"testing"

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
	if n := len(*ri.dir.Load()); n != 4 {
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
	if n := len(*ri.dir.Load()); n != 1 {
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
