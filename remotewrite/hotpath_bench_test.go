package remotewrite

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
)

// The benchmarks in this file measure a queue's per-sample hot paths one by
// one, without HTTP, on series shaped like a node exporter's: seven labels
// plus one external label. Steady state is one sample per series per
// scrape, so a request of max_samples_per_send (2,000) items holds 2,000
// series of one sample each.

const benchTargetSeries = 200 // series per target (as bench/loadgen's small targets)

// benchLabels returns the WAL labels of series i.
func benchLabels(i int) labels.Labels {
	t := i / benchTargetSeries
	return labels.FromStrings(
		"__name__", fmt.Sprintf("node_metric_%d_total", i%40),
		"instance", fmt.Sprintf("10.%d.%d.%d:9100", t>>16&255, t>>8&255, t&255),
		"job", "node",
		"cpu", fmt.Sprint(i%16),
		"mode", []string{"user", "system", "idle", "iowait"}[i%4],
		"device", fmt.Sprintf("sd%c", 'a'+i%8),
		"series", fmt.Sprint(i),
	)
}

// cpuTime is the process' user and system CPU time so far. The machine is
// shared, so wall time per op says more about the neighbours than about the
// code; CPU time per sample (GC included) is the figure to compare.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// discardClient acknowledges every request without sending it.
type discardClient struct{ bytes, requests int }

func (c *discardClient) Store(_ context.Context, raw []byte, _ int) (remote.WriteResponseStats, error) {
	c.bytes += len(raw)
	c.requests++
	return remote.WriteResponseStats{}, nil
}
func (*discardClient) Name() string     { return "discard" }
func (*discardClient) Endpoint() string { return "http://discard.invalid/" }

// benchQueue is a queue with n series cached and its journal open in a
// temporary directory, as in a running agent, with one external label.
func benchQueue(b testing.TB, n int, protobufMessage string) (*queue, *discardClient) {
	return benchQueueWith(b, n, protobufMessage, labels.FromStrings("cluster", "bench-eu-1"), nil)
}

// benchQueueWith is benchQueue with the given external labels, sharing the
// label sets of src when it is not nil.
func benchQueueWith(b testing.TB, n int, protobufMessage string, external labels.Labels, src LocalWAL) (*queue, *discardClient) {
	b.Helper()
	yml := "  - url: http://discard.invalid/write\n    name: bench\n"
	if protobufMessage != "" {
		yml += "    protobuf_message: " + protobufMessage + "\n"
	}
	c := &discardClient{}
	return cachingQueue(b, yml, external, src, c, n, benchLabels), c
}

// cachingQueue is a queue of the remote_write entry yml (under a
// remote_write: list) with the given external labels, asking local (nil:
// none), with its journal open in a temporary directory, as in a running
// agent, and with series refs 1 to n cached: ref i+1 has labels(i), stored
// a target (benchTargetSeries) at a time through the record encoder and
// decoder, as the queue gets them.
func cachingQueue(tb testing.TB, yml string, external labels.Labels, local LocalWAL, c remote.WriteClient, n int, lbls func(i int) labels.Labels) *queue {
	tb.Helper()
	sp, err := newSpec(loadConfig(tb, "remote_write:\n"+yml).RemoteWriteConfigs[0], external)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	q := newQueue(sp, dir+"/wal", dir, c, unregisteredMetrics(), slog.New(slog.DiscardHandler))
	q.local = local
	if err := q.journal.open(position{}, 0, false, 1); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(q.journal.close)
	var enc record.Encoder
	var dec record.Decoder
	for base := 0; base < n; base += benchTargetSeries {
		s := make([]record.RefSeries, 0, benchTargetSeries)
		for i := base; i < min(n, base+benchTargetSeries); i++ {
			s = append(s, record.RefSeries{Ref: chunks.HeadSeriesRef(i + 1), Labels: lbls(i)})
		}
		got, err := dec.Series(enc.Series(s, nil), nil)
		if err != nil {
			tb.Fatal(err)
		}
		q.storeSeries(got, 1)
	}
	return q
}

// walLabels stands for the WAL's in-memory series: the label sets of refs
// 1 to n, as the appender created them.
type walLabels []labels.Labels

func newWALLabels(n int) walLabels {
	w := make(walLabels, n+1)
	for i := range n {
		w[i+1] = benchLabels(i)
	}
	return w
}

// LiveSegment is not asked in these benchmarks.
func (w walLabels) LiveSegment() int { return 0 }

func (w walLabels) SeriesLabels(ref chunks.HeadSeriesRef) (labels.Labels, bool) {
	if ref == 0 || int(ref) >= len(w) {
		return labels.EmptyLabels(), false
	}
	return w[ref], true
}

// BenchmarkDecodeSamples is reading one samples record (a target's scrape
// of 200 series) into a round: decoding, the series lookup and the item.
func BenchmarkDecodeSamples(b *testing.B) {
	const n = 10_000
	q, _ := benchQueue(b, n, "")
	var enc record.Encoder
	recs := make([][]byte, n/benchTargetSeries)
	for k := range recs {
		s := make([]record.RefSample, benchTargetSeries)
		for i := range s {
			s[i] = record.RefSample{Ref: chunks.HeadSeriesRef(k*benchTargetSeries + i + 1), T: 1_700_000_000_000 + int64(i), V: float64(i)}
		}
		recs[k] = enc.Samples(s, nil)
	}
	c := &chunk{}
	k := 0
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		q.handleRecord(recs[k], 1, true, c)
		if k++; k == len(recs) {
			k = 0
			c.reset()
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N*benchTargetSeries), "cpu-ns/sample")
}

// BenchmarkSendRequest is building, encoding and journalling one request of
// 2,000 series with one sample each, acknowledged at once by the client.
func BenchmarkSendRequest(b *testing.B) {
	for _, pm := range []string{"prometheus.WriteRequest", "io.prometheus.write.v2.Request"} {
		b.Run(pm, func(b *testing.B) {
			const n = 2000
			// As in the agent: the WAL's label sets, the external label added
			// by the encoder.
			q, c := benchQueueWith(b, n, pm, labels.FromStrings("cluster", "bench-eu-1"), newWALLabels(n))
			items := make([]item, n)
			for i := range items {
				ref := chunks.HeadSeriesRef(i + 1)
				lbls, _ := q.lookup(ref, func(string) { b.Fatal("unknown series") })
				items[i] = item{ref: ref, kind: kindSample, t: 1_700_000_000_000 + int64(i), v: float64(i), lbls: lbls}
			}
			sb := q.newBuffers()
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				if ok, _ := q.send(ctx, sb, items, nil, position{Segment: 1}, false); !ok {
					b.Fatal("not sent")
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N*n), "cpu-ns/sample")
			b.ReportMetric(float64(c.bytes)/float64(b.N*n), "wire-B/sample")
		})
	}
}

// BenchmarkSeriesCacheMemory is what a queue keeps per cached series: heap
// in use after storing 100k series records, minus before, per series. The
// decoded WAL labels are garbage afterwards, as in a running queue. The
// WAL's own label sets exist before the first reading, as in the agent,
// where the scrape loops and the WAL hold them anyway: labels=copied is a
// queue with a copy of its own (no WAL to share), labels=shared one that
// keeps the WAL's.
func BenchmarkSeriesCacheMemory(b *testing.B) {
	const n = 100_000
	wal := newWALLabels(n)
	for _, bc := range []struct {
		name     string
		external labels.Labels
		src      LocalWAL
	}{
		{"external=cluster/labels=copied", labels.FromStrings("cluster", "bench-eu-1"), nil},
		{"external=cluster/labels=shared", labels.FromStrings("cluster", "bench-eu-1"), wal},
		{"external=none/labels=copied", labels.EmptyLabels(), nil},
		{"external=none/labels=shared", labels.EmptyLabels(), wal},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				before := heapInUse()
				b.StartTimer()
				q, _ := benchQueueWith(b, n, "", bc.external, bc.src)
				b.StopTimer()
				after := heapInUse()
				if q.series.len() != n {
					b.Fatalf("%d series cached, want %d", q.series.len(), n)
				}
				b.ReportMetric(float64(int64(after)-int64(before))/n, "B/series")
				runtime.KeepAlive(q)
				b.StartTimer()
			}
		})
	}
	runtime.KeepAlive(wal)
}

// benchQueueT is benchQueue for a test: one series cached.
func benchQueueT(t *testing.T) *queue {
	q, _ := benchQueue(t, 1, "")
	return q
}
