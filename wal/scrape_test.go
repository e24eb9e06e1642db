package wal

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// The real Prometheus scrape manager appends into the WAL through
// AppenderV2: samples, metadata, report series and, when the target goes
// away, staleness markers all reach the log.
func TestScrapeManagerAppendsIntoWAL(t *testing.T) {
	var scrapes atomic.Int64
	rig := newScrapeRig(t, "demo", "", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := scrapes.Add(1)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP demo_requests_total Requests handled.\n# TYPE demo_requests_total counter\ndemo_requests_total{path=\"/\"} %d\n", n)
	}))
	dir, s, tsets, stop := rig.dir, rig.s, rig.tsets, rig.stop
	u := rig.target

	waitFor(t, 10*time.Second, "three scrapes", func() bool { return scrapes.Load() >= 3 })
	// Take the target away: its scrape loop ends with staleness markers.
	tsets <- map[string][]*targetgroup.Group{"demo": {{Source: "static"}}}
	waitFor(t, 10*time.Second, "staleness marker", func() bool { return staleMarkerFor(t, dir, "demo_requests_total") })
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	c := readRecords(t, dir)
	names := map[string]bool{}
	for _, sr := range c.series {
		names[sr.Labels.Get("__name__")] = true
	}
	for _, n := range []string{"demo_requests_total", "up", "scrape_duration_seconds", "scrape_samples_scraped"} {
		if !names[n] {
			t.Errorf("no series record for %s (have %v)", n, names)
		}
	}
	var values []float64
	for _, smp := range c.samples {
		if labelsOf(c, smp.Ref) == `{__name__="demo_requests_total", instance="`+u.Host+`", job="demo", path="/"}` && !value.IsStaleNaN(smp.V) {
			values = append(values, smp.V)
		}
	}
	if len(values) < 3 {
		t.Fatalf("demo_requests_total samples = %v, want at least 3", values)
	}
	for i := 1; i < len(values); i++ {
		if values[i] <= values[i-1] {
			t.Errorf("counter samples not increasing: %v", values)
		}
	}
	var gotMeta bool
	for _, m := range c.metas {
		if labelsOf(c, m.Ref) != "" && m.Help == "Requests handled." && record.ToMetricType(m.Type) == model.MetricTypeCounter {
			gotMeta = true
		}
	}
	if !gotMeta {
		t.Errorf("no counter metadata record with the help text; metadata: %+v", c.metas)
	}
}

// staleMarkerFor reports whether the WAL (being written meanwhile) already
// holds a staleness marker for a series called name.
func staleMarkerFor(t *testing.T, dir, name string) bool {
	sr, err := wlog.NewSegmentsReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	dec := record.NewDecoder(labels.NewSymbolTable(), nil)
	names := map[chunks.HeadSeriesRef]string{}
	rd := wlog.NewReader(sr)
	// A record being written right now may read as torn: stop there.
	for rd.Next() {
		rec := rd.Record()
		switch dec.Type(rec) {
		case record.Series:
			series, err := dec.Series(rec, nil)
			if err != nil {
				return false
			}
			for _, s := range series {
				names[s.Ref] = s.Labels.Get("__name__")
			}
		case record.Samples:
			samples, err := dec.Samples(rec, nil)
			if err != nil {
				return false
			}
			for _, s := range samples {
				if value.IsStaleNaN(s.V) && names[s.Ref] == name {
					return true
				}
			}
		}
	}
	return false
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrapeRig is Prometheus' scrape manager scraping one HTTP target into a
// fresh WAL every 100ms.
type scrapeRig struct {
	dir    string
	s      *Storage
	target *url.URL
	tsets  chan<- map[string][]*targetgroup.Group
	stop   func() // idempotent; the WAL is closed by the test's cleanup
}

// newScrapeRig serves h, opens a WAL and starts the scrape manager with one
// job (jobOpts are extra lines of its scrape config) that targets h.
func newScrapeRig(t *testing.T, job, jobOpts string, h http.Handler) *scrapeRig {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := Open(dir, Options{}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	mgr, err := scrape.NewManager(&scrape.Options{
		AppendMetadata:          true,
		DiscoveryReloadInterval: model.Duration(50 * time.Millisecond),
	}, nil, nil, nil, s, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(fmt.Sprintf(`
global:
  scrape_interval: 100ms
  scrape_timeout: 90ms
scrape_configs:
  - job_name: %s
    %s
`, job, jobOpts), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	tsets := make(chan map[string][]*targetgroup.Group, 1)
	done := make(chan error, 1)
	go func() { done <- mgr.Run(tsets) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			mgr.Stop()
			<-done
		}
	}
	t.Cleanup(stop)
	tsets <- map[string][]*targetgroup.Group{job: {{
		Source:  "static",
		Targets: []model.LabelSet{{model.AddressLabel: model.LabelValue(u.Host)}},
	}}}
	return &scrapeRig{dir: dir, s: s, target: u, tsets: tsets, stop: stop}
}

// A target instrumented with client_golang, scraped over protobuf: its
// native histogram and the exemplars on its counter and histogram reach the
// WAL as histogram and exemplar records.
func TestScrapedNativeHistogramsAndExemplarsReachWAL(t *testing.T) {
	reg := prometheus.NewRegistry()
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "demo_latency_seconds", Help: "Latency.", NativeHistogramBucketFactor: 1.1,
	})
	requests := prometheus.NewCounter(prometheus.CounterOpts{Name: "demo_requests_total", Help: "Requests."})
	reg.MustRegister(latency, requests)
	var observations atomic.Int64
	rig := newScrapeRig(t, "instrumented", "scrape_native_histograms: true\n    scrape_protocols: [PrometheusProto]", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := observations.Add(1)
		latency.(prometheus.ExemplarObserver).ObserveWithExemplar(float64(n)/100, prometheus.Labels{"trace_id": fmt.Sprint("t", n)})
		requests.(prometheus.ExemplarAdder).AddWithExemplar(1, prometheus.Labels{"trace_id": fmt.Sprint("c", n)})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	}))
	dir, s, stop := rig.dir, rig.s, rig.stop
	u := rig.target
	waitFor(t, 10*time.Second, "three scrapes", func() bool { return observations.Load() >= 3 })
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	c := readRecords(t, dir)
	histograms := 0
	for _, h := range c.hists {
		if labelsOf(c, h.Ref) == `{__name__="demo_latency_seconds", instance="`+u.Host+`", job="instrumented"}` {
			histograms++
			if h.H.Count == 0 || h.H.Schema < 0 {
				t.Errorf("native histogram sample looks empty: %+v", h.H)
			}
		}
	}
	for _, h := range c.fhists {
		if labelsOf(c, h.Ref) == `{__name__="demo_latency_seconds", instance="`+u.Host+`", job="instrumented"}` {
			histograms++
		}
	}
	if histograms < 2 {
		t.Errorf("native histogram samples for demo_latency_seconds = %d, want at least 2", histograms)
	}
	exemplarsBySeries := map[string]int{}
	for _, e := range c.exemplars {
		if e.Labels.Get("trace_id") == "" {
			t.Errorf("exemplar without its trace_id: %v", e.Labels)
		}
		exemplarsBySeries[labelsOf(c, e.Ref)]++
	}
	for _, name := range []string{"demo_requests_total", "demo_latency_seconds"} {
		found := false
		for series, n := range exemplarsBySeries {
			if strings.Contains(series, `__name__="`+name+`"`) && n > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("no exemplar record for %s; exemplars by series: %v", name, exemplarsBySeries)
		}
	}
}
