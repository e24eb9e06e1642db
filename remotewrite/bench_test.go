package remotewrite

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"
)

// BenchmarkBacklog measures how fast a queue drains a WAL backlog of
// 10k series × 100 samples (1M samples) into a local receiver that decodes
// every request. Default queue_config except a short batch deadline.
func BenchmarkBacklog(b *testing.B) {
	const nSeries, rounds = 10000, 100
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := remote.DecodeWriteRequest(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var n int64
		for _, ts := range req.Timeseries {
			n += int64(len(ts.Samples))
		}
		got.Add(n)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	for range b.N {
		b.StopTimer()
		walDir, progDir := b.TempDir()+"/wal", b.TempDir()+"/rw"
		tw := newTestWAL(b, walDir)
		refs := make([]int, nSeries)
		for i := range refs {
			refs[i] = i + 1
			tw.series(i+1, "__name__", "bench_metric", "i", fmt.Sprint(i))
		}
		for k := range rounds {
			tw.samples(refs, int64(k+1)*15000)
		}
		tw.close()
		got.Store(0)
		cfg := loadConfig(b, `
remote_write:
  - url: URL0
    queue_config: {batch_send_deadline: 50ms}
`, srv.URL)
		m, err := NewManager(walDir, progDir, nil, prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		if err := m.ApplyConfig(cfg); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		b.StartTimer()
		start := time.Now()
		go func() { m.Run(ctx); close(done) }()
		for got.Load() < nSeries*rounds {
			time.Sleep(time.Millisecond)
		}
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(nSeries*rounds)/el.Seconds(), "samples/s")
		m.Stop(time.Second)
		cancel()
		<-done
	}
}

// BenchmarkCatchUp is a remote end coming back after an outage: the WAL
// holds a backlog of 10k series × 1,000 scrapes (10M samples, 10× that of
// BenchmarkBacklog) while fresh samples keep coming at 10k samples/s (the
// same series, one scrape a second). Default queue_config. It reports the
// time until the queue has caught up with the fresh samples, the rate it
// sent at meanwhile, the longest a fresh sample waited (it queues behind the
// backlog: the WAL is read in order), and the peak heap in use and RSS
// during the drain.
func BenchmarkCatchUp(b *testing.B) {
	const nSeries, backlog, interval = 10000, 1000, time.Second
	var mu sync.Mutex
	arrived := map[int64]time.Time{} // timestamp -> when its first sample arrived
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := remote.DecodeWriteRequest(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		now := time.Now()
		var n int64
		mu.Lock()
		for _, ts := range req.Timeseries {
			n += int64(len(ts.Samples))
			for _, s := range ts.Samples {
				if _, ok := arrived[s.Timestamp]; !ok {
					arrived[s.Timestamp] = now
				}
			}
		}
		mu.Unlock()
		got.Add(n)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	for range b.N {
		b.StopTimer()
		walDir, progDir := b.TempDir()+"/wal", b.TempDir()+"/rw"
		tw := newTestWAL(b, walDir)
		refs := make([]int, nSeries)
		for i := range refs {
			refs[i] = i + 1
			tw.series(i+1, "__name__", "bench_metric", "i", fmt.Sprint(i))
		}
		start := time.Now().Add(-backlog * interval).UnixMilli()
		for k := range backlog {
			tw.samples(refs, start+int64(k)*interval.Milliseconds())
		}
		mu.Lock()
		clear(arrived)
		mu.Unlock()
		got.Store(0)
		m, err := NewManager(walDir, progDir, nil, prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		if err := m.ApplyConfig(loadConfig(b, "remote_write:\n  - url: URL0\n", srv.URL)); err != nil {
			b.Fatal(err)
		}
		heap0, rss0 := heapAndRSS()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		b.StartTimer()
		began := time.Now()
		go func() { m.Run(ctx); close(done) }()

		// Fresh scrapes every interval, each remembered with its append time.
		fresh := map[int64]time.Time{}
		tick := time.NewTicker(interval)
		sample := time.NewTicker(50 * time.Millisecond)
		var peakHeap, peakRSS uint64
		var caughtUp time.Duration
		for caughtUp == 0 {
			select {
			case now := <-tick.C:
				ts := now.UnixMilli()
				tw.samples(refs, ts)
				fresh[ts] = now
				m.Notify()
			case <-sample.C:
				h, r := heapAndRSS()
				peakHeap, peakRSS = max(peakHeap, h), max(peakRSS, r)
				// Caught up: every fresh scrape older than one interval has arrived.
				mu.Lock()
				all := len(fresh) > 0
				for ts, at := range fresh {
					if _, ok := arrived[ts]; !ok && time.Since(at) > interval {
						all = false
					}
				}
				mu.Unlock()
				if all && got.Load() >= nSeries*backlog {
					caughtUp = time.Since(began)
				}
			}
		}
		tick.Stop()
		sample.Stop()
		b.StopTimer()
		var maxWait time.Duration
		mu.Lock()
		for ts, at := range fresh {
			if a, ok := arrived[ts]; ok {
				maxWait = max(maxWait, a.Sub(at))
			}
		}
		mu.Unlock()
		b.ReportMetric(caughtUp.Seconds(), "s-to-catch-up")
		b.ReportMetric(float64(got.Load())/caughtUp.Seconds(), "samples/s")
		b.ReportMetric(maxWait.Seconds(), "s-max-fresh-wait")
		b.ReportMetric(float64(peakHeap-min(heap0, peakHeap))/(1<<20), "MiB-heap-peak")
		b.ReportMetric(float64(peakRSS-min(rss0, peakRSS))/(1<<20), "MiB-RSS-growth")
		m.Stop(time.Second)
		cancel()
		<-done
		tw.close()
	}
}

// heapAndRSS returns the heap in use and the resident set size in bytes.
func heapAndRSS() (heap, rss uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, err := os.ReadFile("/proc/self/statm")
	if err == nil {
		var size, res uint64
		if _, err := fmt.Sscan(string(b), &size, &res); err == nil {
			rss = res * uint64(os.Getpagesize())
		}
	}
	return ms.HeapInuse, rss
}

// BenchmarkReadLiveTail is a queue catching up with the live segment after
// one commit, as it does on every commit: the writer logs a record of 200
// samples, the reader reads it and finds the end of the WAL for now. The
// WAL has eight segments before the live one, as a WAL under a minute of
// remote-write outage has. live=disk looks for the next segment's file (a
// hand-over's backlog), live=memory asks the WAL (the agent's queues).
func BenchmarkReadLiveTail(b *testing.B) {
	b.Run("live=disk", func(b *testing.B) { benchReadLiveTail(b, false) })
	b.Run("live=memory", func(b *testing.B) { benchReadLiveTail(b, true) })
}

func benchReadLiveTail(b *testing.B, memory bool) {
	dir := b.TempDir() + "/wal"
	tw := newTestWAL(b, dir)
	refs := tw.fleet(1, 200)
	// Segments large enough that the live one stays live throughout (the
	// reader is told so with live=memory).
	tw.close()
	w, err := wlog.NewSize(slog.New(slog.DiscardHandler), nil, dir, 1<<30, compression.None)
	if err != nil {
		b.Fatal(err)
	}
	tw.w = w
	live := 0
	for range 8 {
		tw.samples(refs, 1)
		live = tw.nextSegment()
	}
	r := newWALReader(dir, slog.New(slog.DiscardHandler))
	if memory {
		r.live = func() int { return live }
	}
	if _, err := r.open(b.Context(), position{}, false); err != nil {
		b.Fatal(err)
	}
	defer r.close()
	drain := func() int {
		n := 0
		for {
			rec, _, _, err := r.next(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			if rec == nil {
				return n
			}
			n++
		}
	}
	drain()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for i := 0; b.Loop(); i++ {
		tw.samples(refs, int64(i+2))
		if n := drain(); n != 1 {
			b.Fatalf("read %d records, want 1", n)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/commit")
}
