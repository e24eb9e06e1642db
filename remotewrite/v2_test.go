package remotewrite

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"

	tsdbreceiver "github.com/shoal-dev/shoal/internal/receiver"
	"github.com/shoal-dev/shoal/wal"
)

const v2Queue = `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: q
    protobuf_message: io.prometheus.write.v2.Request
    send_native_histograms: true
` + fastQueue

// writtenHeaderLie passes requests to the real receiver and, for the first
// one, reports one sample fewer written than the receiver said.
type writtenHeaderLie struct {
	http.ResponseWriter
	lie bool
}

func (w *writtenHeaderLie) WriteHeader(code int) {
	if w.lie {
		h := w.Header()
		if n, err := strconv.Atoi(h.Get("X-Prometheus-Remote-Write-Samples-Written")); err == nil && n > 0 {
			h.Set("X-Prometheus-Remote-Write-Samples-Written", strconv.Itoa(n-1))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Remote-Write 2.0 against the real receiver (Prometheus' write handler,
// 2.0 enabled): samples and native histograms arrive with the 2.0 headers,
// series metadata from the WAL travels with the series, and the receiver's
// written-samples header is honoured (what it says it did not write is
// counted as not_written).
func TestRemoteWrite2AgainstRealReceiver(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	r, err := tsdbreceiver.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var (
		requests    atomic.Int64
		badProto    atomic.Value
		sawMetadata atomic.Bool
	)
	h := r.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf;proto=io.prometheus.write.v2.Request" {
			badProto.Store(ct)
		}
		if v := req.Header.Get("X-Prometheus-Remote-Write-Version"); v != "2.0.0" {
			badProto.Store("version " + v)
		}
		body, _ := io.ReadAll(req.Body)
		if raw, err := snappy.Decode(nil, body); err == nil {
			var wr writev2.Request
			if err := wr.Unmarshal(raw); err == nil {
				for _, ts := range wr.Timeseries {
					md, _ := ts.ToMetadata(wr.Symbols)
					if ls, _ := ts.ToLabels(&labels.ScratchBuilder{}, wr.Symbols); ls.Get("i") == "1" && md.Help == "a test counter" && md.Unit == "requests" && md.Type == "counter" {
						sawMetadata.Store(true)
					}
				}
			}
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		n := requests.Add(1)
		h.ServeHTTP(&writtenHeaderLie{ResponseWriter: w, lie: n == 1}, req)
	}))
	t.Cleanup(srv.Close)

	refs := tw.fleet(1, 10)
	tw.series(100, "__name__", "latency_seconds")
	tw.log(tw.enc.Metadata([]record.RefMetadata{{Ref: 1, Type: record.GetMetricType("counter"), Help: "a test counter", Unit: "requests"}}, nil))
	base := time.Now().Add(-time.Minute).UnixMilli()
	tss := writeRounds(tw, refs, base, 5)
	var hs []record.RefHistogramSample
	for i := range 5 {
		hs = append(hs, record.RefHistogramSample{Ref: chunks.HeadSeriesRef(100), T: base + int64(i)*1000, H: validHistogram(i)})
	}
	hrec, _ := tw.enc.HistogramSamples(hs, nil)
	tw.log(hrec)

	tm := startManager(t, walDir, progDir, loadConfig(t, v2Queue, srv.URL+"/api/v1/write"))
	waitFor(t, "every sample and histogram stored", func() bool {
		got, err := r.Samples(labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, "test_metric|latency_seconds"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ss := range got {
			n += len(ss)
		}
		return n == len(refs)*len(tss)+len(hs)
	})
	tm.shutdown(t, 5*time.Second)
	if v := badProto.Load(); v != nil {
		t.Fatalf("a request was not Remote-Write 2.0: %v", v)
	}
	if !sawMetadata.Load() {
		t.Fatal("no request carried the WAL's metadata (counter, help, unit) with series i=1")
	}
	if st := r.Stats(); st.Rejected() != 0 || st.Histograms != uint64(len(hs)) {
		t.Fatalf("receiver stats %+v: want nothing rejected and %d histograms", st, len(hs))
	}
	if v := tm.metric(t, "shoal_remotewrite_samples_dropped_total", "remote_name", "q", "reason", dropNotWritten); v != 1 {
		t.Fatalf("samples the receiver said it did not write = %v, want 1", v)
	}
	if v := tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q"); v != 1 {
		t.Fatalf("samples_failed_total = %v, want 1 (the one not written)", v)
	}
}

// validHistogram is testHistogram with a count a TSDB accepts.
func validHistogram(i int) *histogram.Histogram {
	h := testHistogram(i)
	h.Count = uint64(4*i + 7) // zero count 2 + buckets i+1, i+2, i+1, i+1
	return h
}

// metadataChecker is a Remote-Write 2.0 receiver that records every series
// sent with samples or histograms but without its type and help.
type metadataChecker struct {
	mtx     sync.Mutex
	missing []string
	seen    map[string]bool
}

func (c *metadataChecker) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	raw, err := snappy.Decode(nil, body)
	var wr writev2.Request
	if err == nil {
		err = wr.Unmarshal(raw)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mtx.Lock()
	defer c.mtx.Unlock()
	for _, ts := range wr.Timeseries {
		ls, _ := ts.ToLabels(&labels.ScratchBuilder{}, wr.Symbols)
		md, _ := ts.ToMetadata(wr.Symbols)
		if len(ts.Samples)+len(ts.Histograms) == 0 {
			continue
		}
		name := ls.Get(labels.MetricName)
		c.seen[name] = true
		if md.Type == model.MetricTypeUnknown || md.Help == "" {
			c.missing = append(c.missing, fmt.Sprintf("%s (type %q, help %q)", name, md.Type, md.Help))
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// Every Remote-Write 2.0 request that carries samples or histograms of a
// series carries its type and help, the first one included: the WAL's
// appender writes a commit's metadata before its data, so the queue knows it
// before the first sample, even when a round ends right after the samples
// (one series per request here).
func TestRemoteWrite2FirstRequestOfASeriesCarriesItsMetadata(t *testing.T) {
	progDir := t.TempDir()
	opts := wal.DefaultOptions()
	s, err := wal.Open(t.TempDir(), opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	chk := &metadataChecker{seen: map[string]bool{}}
	srv := httptest.NewServer(chk)
	t.Cleanup(srv.Close)

	now := time.Now().Add(-time.Minute).UnixMilli()
	counter := metadata.Metadata{Type: model.MetricTypeCounter, Help: "Requests served.", Unit: "requests"}
	hist := metadata.Metadata{Type: model.MetricTypeHistogram, Help: "Request latency.", Unit: "seconds"}
	commit := func(k int, names ...string) {
		t.Helper()
		a := s.AppenderV2(context.Background())
		for _, n := range names {
			ls := labels.FromStrings("__name__", n, "k", "v")
			var err error
			if strings.HasSuffix(n, "_seconds") {
				_, err = a.Append(0, ls, 0, now+int64(k)*1000, 0, validHistogram(k), nil, storage.AOptions{Metadata: hist})
			} else {
				_, err = a.Append(0, ls, 0, now+int64(k)*1000, float64(k), nil, nil, storage.AOptions{Metadata: counter})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	commit(0, "a_total", "b_total", "latency_seconds")
	tm := startManager(t, s.Dir(), progDir, loadConfig(t, `
remote_write:
  - url: URL0
    name: q
    protobuf_message: io.prometheus.write.v2.Request
    send_native_histograms: true
    queue_config: {batch_send_deadline: 20ms, max_samples_per_send: 1, capacity: 1, max_shards: 1, min_backoff: 5ms, max_backoff: 40ms}
`, srv.URL))
	// New series while the queue runs: their first commit has their metadata.
	commit(1, "a_total", "c_total", "other_seconds")
	tm.Notify()
	waitFor(t, "every series received", func() bool {
		chk.mtx.Lock()
		defer chk.mtx.Unlock()
		return len(chk.seen) == 5
	})
	tm.shutdown(t, 5*time.Second)
	chk.mtx.Lock()
	defer chk.mtx.Unlock()
	if len(chk.missing) > 0 {
		t.Fatalf("requests carried samples without the series' metadata: %v", chk.missing)
	}
}
