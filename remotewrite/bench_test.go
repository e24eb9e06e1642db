package remotewrite

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/storage/remote"
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
		m := NewManager(walDir, progDir, nil, prometheus.NewRegistry())
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
