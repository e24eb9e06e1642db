package remotewrite

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

func TestSeriesTable(t *testing.T) {
	var st seriesTable
	if _, ok := st.get(0); ok {
		t.Fatal("empty table has ref 0")
	}
	// 1<<40 stands for a corrupt ref: it must not make the table allocate pages up to it.
	refs := []chunks.HeadSeriesRef{1, 2, seriesPageSize - 1, seriesPageSize, 5*seriesPageSize + 7, 1 << 40}
	for i, r := range refs {
		st.set(r, seriesEntry{lbls: labels.FromStrings("i", string(rune('a'+i))), seg: int32(i)})
	}
	st.set(2, seriesEntry{lbls: labels.FromStrings("i", "b2"), seg: 1}) // overwrite is not a new entry
	if st.len() != len(refs) || len(st.pages) > 6 {
		t.Fatalf("len = %d, want %d", st.len(), len(refs))
	}
	for i, r := range refs {
		e, ok := st.get(r)
		if !ok || int(e.seg) != i {
			t.Errorf("get(%d) = %+v, %v", r, e, ok)
		}
	}
	if e, _ := st.get(2); e.lbls.Get("i") != "b2" {
		t.Errorf("overwrite lost: %v", e.lbls)
	}
	for _, r := range []chunks.HeadSeriesRef{3, seriesPageSize + 1, 7 * seriesPageSize, 1<<40 + 1} {
		if _, ok := st.get(r); ok {
			t.Errorf("get(%d) found an entry never set", r)
		}
	}

	// Forget everything from segment 3 on: the pages of the high refs go.
	if n := st.deleteIf(func(e seriesEntry) bool { return e.seg >= 3 }); n != 3 {
		t.Fatalf("deleteIf removed %d, want 3", n)
	}
	if st.len() != 3 || len(st.pages) > 1 {
		t.Fatalf("after deleteIf: len %d, %d pages; want 3 entries, at most 1 page", st.len(), len(st.pages))
	}
	if _, ok := st.get(1 << 40); ok {
		t.Error("deleted ref still found")
	}
	st.set(seriesPageSize, seriesEntry{seg: 9}) // a forgotten ref can come back
	if e, ok := st.get(seriesPageSize); !ok || e.seg != 9 || st.len() != 4 {
		t.Errorf("re-set after delete: %+v %v len %d", e, ok, st.len())
	}
}

// bytes estimates the memory the table takes (labels not counted; a map
// entry as twice its key and value).
func (t *seriesTable) bytes() int {
	n := len(t.pages) * 8
	for _, pg := range t.pages {
		if pg != nil {
			n += int(unsafe.Sizeof(*pg))
		}
	}
	return n + len(t.far)*2*int(unsafe.Sizeof(seriesEntry{})+8)
}

// TestSeriesTableCompacts churns refs with a few survivors per page: their
// pages are freed and the memory shrinks to about the survivors, every
// lookup (present or not) answers as a map would, and compacted refs take
// overwrites, new neighbours and deletions.
func TestSeriesTableCompacts(t *testing.T) {
	const n = 20*seriesPageSize - 1 // refs 1..n fill pages 0-19
	var st seriesTable
	want := map[chunks.HeadSeriesRef]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for ref := chunks.HeadSeriesRef(1); ref <= n; ref++ {
		st.set(ref, seriesEntry{seg: int32(ref)})
		want[ref] = int(ref)
	}
	full := st.bytes()
	// Keep ~1% at random, and the whole last page (where new refs go).
	kept := map[int]bool{}
	st.deleteIf(func(e seriesEntry) bool {
		if e.seg >= 19*seriesPageSize || rng.IntN(100) == 0 {
			kept[int(e.seg)] = true
			return false
		}
		return true
	})
	for ref := range want {
		if !kept[int(ref)] {
			delete(want, ref)
		}
	}
	check := func(when string) {
		t.Helper()
		if st.len() != len(want) {
			t.Fatalf("%s: len %d, want %d", when, st.len(), len(want))
		}
		for ref := chunks.HeadSeriesRef(0); ref <= n+seriesPageSize; ref++ {
			e, ok := st.get(ref)
			w, wok := want[ref]
			if ok != wok || (ok && int(e.seg) != w) {
				t.Fatalf("%s: get(%d) = %d %v, want %d %v", when, ref, e.seg, ok, w, wok)
			}
		}
	}
	check("after churn")
	for p := range 19 {
		if st.pages[p] != nil {
			t.Fatalf("page %d with ~1%% survivors was kept", p)
		}
	}
	if st.pages[19] == nil {
		t.Fatal("the highest page was compacted")
	}
	// What is left: the last page and ~41 entries for each other page.
	if got := st.bytes(); got > int(unsafe.Sizeof(seriesPage{}))+19*60*100 {
		t.Fatalf("table takes %d bytes after churn (%d before): pages were not reclaimed", got, full)
	}

	// Overwrite a compacted entry.
	var some chunks.HeadSeriesRef
	for ref := range want {
		if ref < 19*seriesPageSize {
			some = ref
			break
		}
	}
	st.set(some, seriesEntry{seg: -1})
	want[some] = -1
	check("after overwrite")
	// A new ref next to compacted ones (replay can do that) gets a page;
	// its neighbours are still found.
	fresh := some + 1
	for want[fresh] != 0 {
		fresh++
	}
	st.set(fresh, seriesEntry{seg: -2})
	want[fresh] = -2
	check("after insert")
	st.set(some, seriesEntry{seg: -3})
	want[some] = -3
	check("after overwrite next to a new page")

	// Deleting keeps everything else exact; deleting all leaves nothing.
	st.deleteIf(func(e seriesEntry) bool { return e.seg%2 == 0 })
	for ref, seg := range want {
		if seg%2 == 0 {
			delete(want, ref)
		}
	}
	check("after odd-only")
	st.deleteIf(func(seriesEntry) bool { return true })
	want = map[chunks.HeadSeriesRef]int{}
	check("after all")
	if len(st.pages) != 0 || len(st.far) != 0 {
		t.Fatalf("empty table keeps %d page slots, %d far entries", len(st.pages), len(st.far))
	}
}
