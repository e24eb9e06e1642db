package remotewrite

import (
	"testing"

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
		st.set(r, seriesEntry{lbls: labels.FromStrings("i", string(rune('a'+i))), seg: i})
	}
	st.set(2, seriesEntry{lbls: labels.FromStrings("i", "b2"), seg: 1}) // overwrite is not a new entry
	if st.len() != len(refs) || len(st.pages) > 6 {
		t.Fatalf("len = %d, want %d", st.len(), len(refs))
	}
	for i, r := range refs {
		e, ok := st.get(r)
		if !ok || e.seg != i {
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
	if st.len() != 3 || len(st.pages) != 1 || len(st.far) != 0 {
		t.Fatalf("after deleteIf: len %d, %d pages; want 3 entries on 1 page", st.len(), len(st.pages))
	}
	if _, ok := st.get(1 << 40); ok {
		t.Error("deleted ref still found")
	}
	st.set(seriesPageSize, seriesEntry{seg: 9}) // a forgotten ref can come back
	if e, ok := st.get(seriesPageSize); !ok || e.seg != 9 || st.len() != 4 {
		t.Errorf("re-set after delete: %+v %v len %d", e, ok, st.len())
	}
}
