package remotewrite

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSeriesTableChurn measures what a queue's series table keeps
// after 1M series (refs 1..1M, as the WAL hands them out) of which 1%,
// every 100th ref, survive a checkpoint's garbage collection: heap in use
// afterwards minus before, per survivor. The survivors' labels exist
// before and after and are not counted. One op is one whole churn.
func BenchmarkSeriesTableChurn(b *testing.B) {
	const n, every = 1_000_000, 100
	lset := func(ref int) labels.Labels {
		return labels.FromStrings("__name__", "churn_metric", "instance", fmt.Sprintf("pod-%d:8080", ref/1000), "i", fmt.Sprint(ref%1000))
	}
	survivors := make([]labels.Labels, n/every+1)
	for ref := every; ref <= n; ref += every {
		survivors[ref/every] = lset(ref)
	}
	for b.Loop() {
		b.StopTimer()
		before := heapInUse()
		b.StartTimer()
		st := &seriesTable{}
		for ref := 1; ref <= n; ref++ {
			e := seriesEntry{}
			if ref%every == 0 {
				e.lbls, e.seg = survivors[ref/every], 1
			} else {
				e.lbls = lset(ref)
			}
			st.set(chunks.HeadSeriesRef(ref), e)
		}
		st.deleteIf(func(e seriesEntry) bool { return e.seg < 1 })
		b.StopTimer()
		after := heapInUse()
		if st.len() != n/every {
			b.Fatalf("%d entries after the churn, want %d", st.len(), n/every)
		}
		b.ReportMetric(float64(int64(after)-int64(before))/float64(n/every), "B/survivor")
		runtime.KeepAlive(st)
		b.StartTimer()
	}
	runtime.KeepAlive(survivors)
}

// BenchmarkSeriesTableGet is the per-sample lookup of a queue: refs of a
// scrape's worth of series in order, on a dense table.
func BenchmarkSeriesTableGet(b *testing.B) {
	const n = 100_000
	st := &seriesTable{}
	for ref := 1; ref <= n; ref++ {
		st.set(chunks.HeadSeriesRef(ref), seriesEntry{seg: 1})
	}
	var sink int
	for b.Loop() {
		for ref := 1; ref <= n; ref++ {
			e, _ := st.get(chunks.HeadSeriesRef(ref))
			sink += int(e.seg)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lookup")
	runtime.KeepAlive(sink)
}
