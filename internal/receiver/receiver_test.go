package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/util/compression"
)

// series is one time series to send: floats and/or histograms.
type series struct {
	ls     labels.Labels
	floats []Sample
	hists  []histAt
}

type histAt struct {
	t int64
	h *histogram.Histogram
}

// sender pushes requests with Prometheus' own remote-write client.
type sender struct {
	t      testing.TB
	client remote.WriteClient
	v2     bool
}

func newSender(t testing.TB, baseURL string, v2 bool) *sender {
	t.Helper()
	u, err := url.Parse(baseURL + "/api/v1/write")
	if err != nil {
		t.Fatal(err)
	}
	msg := remoteapi.WriteV1MessageType
	if v2 {
		msg = remoteapi.WriteV2MessageType
	}
	c, err := remote.NewWriteClient("test", &remote.ClientConfig{
		URL:           &config_util.URL{URL: u},
		Timeout:       model.Duration(30 * time.Second),
		WriteProtoMsg: msg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &sender{t: t, client: c, v2: v2}
}

// send encodes ss in the sender's protocol and stores it.
func (s *sender) send(ss ...series) (remote.WriteResponseStats, error) {
	s.t.Helper()
	var (
		raw []byte
		err error
	)
	if s.v2 {
		st := writev2.NewSymbolTable()
		req := &writev2.Request{}
		for _, x := range ss {
			ts := writev2.TimeSeries{LabelsRefs: st.SymbolizeLabels(x.ls, nil)}
			for _, f := range x.floats {
				ts.Samples = append(ts.Samples, writev2.Sample{Timestamp: f.T, Value: f.V})
			}
			for _, h := range x.hists {
				ts.Histograms = append(ts.Histograms, writev2.FromIntHistogram(0, h.t, h.h))
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
		req.Symbols = st.Symbols()
		raw, err = req.Marshal()
	} else {
		req := &prompb.WriteRequest{}
		for _, x := range ss {
			ts := prompb.TimeSeries{Labels: prompb.FromLabels(x.ls, nil)}
			for _, f := range x.floats {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: f.T, Value: f.V})
			}
			for _, h := range x.hists {
				ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(h.t, h.h))
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
		raw, err = req.Marshal()
	}
	if err != nil {
		s.t.Fatal(err)
	}
	body, err := compression.Encode(compression.Snappy, raw, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.client.Store(context.Background(), body, 0)
}

func (s *sender) mustSend(ss ...series) remote.WriteResponseStats {
	s.t.Helper()
	st, err := s.send(ss...)
	if err != nil {
		s.t.Fatalf("remote write: %v", err)
	}
	return st
}

func openTest(t testing.TB) (*Receiver, *httptest.Server) {
	t.Helper()
	r, err := New(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(func() {
		srv.Close()
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r, srv
}

// base is a recent, whole-second timestamp: the head only accepts samples
// near the newest one it has.
func base() int64 { return time.Now().Add(-time.Minute).Truncate(time.Second).UnixMilli() }

func floats(t0 int64, n int, step int64, v0 float64) []Sample {
	out := make([]Sample, n)
	for i := range out {
		out[i] = Sample{T: t0 + int64(i)*step, V: v0 + float64(i)}
	}
	return out
}

func equalSamples(t *testing.T, what string, got, want []Sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d samples %v, want %d %v", what, len(got), got, len(want), want)
	}
	for i := range want {
		if got[i].T != want[i].T || math.Float64bits(got[i].V) != math.Float64bits(want[i].V) || (got[i].H == nil) != (want[i].H == nil) {
			t.Fatalf("%s: sample %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func TestWriteAndReadBack(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			r, srv := openTest(t)
			s := newSender(t, srv.URL, v2)
			t0 := base()
			a := series{ls: labels.FromStrings("__name__", "test_metric", "instance", "a", "job", "j"), floats: floats(t0, 10, 1000, 1)}
			b := series{ls: labels.FromStrings("__name__", "test_metric", "instance", "b", "job", "j"), floats: floats(t0, 10, 1000, 100)}
			other := series{ls: labels.FromStrings("__name__", "other_metric", "job", "j"), floats: floats(t0, 3, 5000, 7)}
			st := s.mustSend(a, b)
			s.mustSend(other)
			if v2 && st.Samples != 20 {
				t.Errorf("Remote-Write 2.0 response says %d samples written, want 20", st.Samples)
			}

			got, err := r.Samples(labels.MustNewMatcher(labels.MatchEqual, "__name__", "test_metric"))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("got %d series, want 2: %v", len(got), got)
			}
			equalSamples(t, "a", got[a.ls.String()], a.floats)
			equalSamples(t, "b", got[b.ls.String()], b.floats)

			all, err := r.Series()
			if err != nil {
				t.Fatal(err)
			}
			want := []labels.Labels{other.ls, a.ls, b.ls}
			if len(all) != len(want) {
				t.Fatalf("Series() = %v, want %v", all, want)
			}
			for i := range want {
				if !labels.Equal(all[i], want[i]) {
					t.Fatalf("Series()[%d] = %v, want %v", i, all[i], want[i])
				}
			}

			stats := r.Stats()
			if stats.Accepted != 23 || stats.Stored != 23 || stats.Rejected() != 0 || stats.Dropped != 0 || stats.RolledBack != 0 || stats.Series != 3 {
				t.Errorf("stats = %+v, want 23 accepted and stored in 3 series, nothing rejected", stats)
			}
		})
	}
}

// apiResponse is Prometheus' JSON envelope.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

func getAPI(t *testing.T, srv *httptest.Server, path string, params url.Values) (int, apiResponse) {
	t.Helper()
	resp, err := http.Get(srv.URL + path + "?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ar apiResponse
	if err := json.NewDecoder(resp.Body).Decode(&ar); err != nil {
		t.Fatalf("GET %s: decoding: %v", path, err)
	}
	return resp.StatusCode, ar
}

type queryResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric    map[string]string `json:"metric"`
		Value     []any             `json:"value"`
		Values    [][]any           `json:"values"`
		Histogram []any             `json:"histogram"`
	} `json:"result"`
}

func query(t *testing.T, srv *httptest.Server, path string, params url.Values) queryResult {
	t.Helper()
	code, ar := getAPI(t, srv, path, params)
	if code != http.StatusOK || ar.Status != "success" {
		t.Fatalf("GET %s?%s: %d %s %s", path, params.Encode(), code, ar.ErrorType, ar.Error)
	}
	var qr queryResult
	if err := json.Unmarshal(ar.Data, &qr); err != nil {
		t.Fatal(err)
	}
	return qr
}

func secs(ms int64) string { return fmt.Sprintf("%.3f", float64(ms)/1000) }

func TestQueryAPI(t *testing.T) {
	_, srv := openTest(t)
	s := newSender(t, srv.URL, false)
	t0 := base()
	a := series{ls: labels.FromStrings("__name__", "q_metric", "instance", "a"), floats: floats(t0, 10, 1000, 1)}
	b := series{ls: labels.FromStrings("__name__", "q_metric", "instance", "b"), floats: floats(t0, 10, 1000, 100)}
	s.mustSend(a, b)

	// Instant query at the last sample.
	qr := query(t, srv, "/api/v1/query", url.Values{"query": {`sum(q_metric)`}, "time": {secs(t0 + 9000)}})
	if qr.ResultType != "vector" || len(qr.Result) != 1 || qr.Result[0].Value[1] != "119" {
		t.Fatalf("sum(q_metric) = %+v, want one sample 10+109=119", qr)
	}
	// RFC 3339 time and a selector.
	qr = query(t, srv, "/api/v1/query", url.Values{"query": {`q_metric{instance="b"}`}, "time": {time.UnixMilli(t0 + 4000).UTC().Format(time.RFC3339)}})
	if len(qr.Result) != 1 || qr.Result[0].Metric["instance"] != "b" || qr.Result[0].Value[1] != "104" {
		t.Fatalf(`q_metric{instance="b"} = %+v, want 104`, qr)
	}
	// Range query: one point per step.
	qr = query(t, srv, "/api/v1/query_range", url.Values{
		"query": {`q_metric{instance="a"}`}, "start": {secs(t0)}, "end": {secs(t0 + 9000)}, "step": {"3s"},
	})
	if qr.ResultType != "matrix" || len(qr.Result) != 1 {
		t.Fatalf("range query = %+v", qr)
	}
	var vals []string
	for _, p := range qr.Result[0].Values {
		vals = append(vals, p[1].(string))
	}
	if got := strings.Join(vals, ","); got != "1,4,7,10" {
		t.Errorf("range query values = %s, want 1,4,7,10", got)
	}
	// An empty result is an empty list, not null.
	code, ar := getAPI(t, srv, "/api/v1/query", url.Values{"query": {`nothing_here`}})
	if code != http.StatusOK || !strings.Contains(string(ar.Data), `"result":[]`) {
		t.Errorf("empty query: %d %s", code, ar.Data)
	}
	// Scalars.
	qr2 := struct {
		ResultType string `json:"resultType"`
		Result     []any  `json:"result"`
	}{}
	_, ar = getAPI(t, srv, "/api/v1/query", url.Values{"query": {`1+1`}, "time": {"100"}})
	if err := json.Unmarshal(ar.Data, &qr2); err != nil || qr2.ResultType != "scalar" || qr2.Result[1] != "2" {
		t.Errorf("1+1 = %s (%v)", ar.Data, err)
	}

	// Series endpoint.
	code, ar = getAPI(t, srv, "/api/v1/series", url.Values{"match[]": {`q_metric`, `{instance="a"}`}})
	var sets []map[string]string
	if err := json.Unmarshal(ar.Data, &sets); err != nil || code != http.StatusOK {
		t.Fatalf("series: %d %s %v", code, ar.Data, err)
	}
	if len(sets) != 2 || sets[0]["instance"] != "a" || sets[1]["instance"] != "b" {
		t.Errorf("series = %v, want instance a then b, no duplicates", sets)
	}

	// Bad input is a Prometheus-style error, never a crash.
	for _, c := range []struct {
		path   string
		params url.Values
	}{
		{"/api/v1/query", url.Values{"query": {`sum(`}}},
		{"/api/v1/query", url.Values{"query": {`up`}, "time": {"yesterday"}}},
		{"/api/v1/query_range", url.Values{"query": {`up`}, "start": {"10"}, "end": {"20"}, "step": {"0"}}},
		{"/api/v1/query_range", url.Values{"query": {`up`}, "start": {"20"}, "end": {"10"}, "step": {"1"}}},
		{"/api/v1/query_range", url.Values{"query": {`up`}, "end": {"10"}, "step": {"1"}}},
		{"/api/v1/query_range", url.Values{"query": {`up`}, "start": {"0"}, "end": {"100000"}, "step": {"1"}}},
		{"/api/v1/series", url.Values{}},
		{"/api/v1/series", url.Values{"match[]": {`{`}}},
	} {
		code, ar := getAPI(t, srv, c.path, c.params)
		if code != http.StatusBadRequest || ar.Status != "error" || ar.ErrorType != "bad_data" || ar.Error == "" {
			t.Errorf("%s?%s: got %d %+v, want 400 bad_data", c.path, c.params.Encode(), code, ar)
		}
	}
}

func TestOutOfOrderRejectedAndCounted(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			r, srv := openTest(t)
			s := newSender(t, srv.URL, v2)
			t0 := base()
			la := labels.FromStrings("__name__", "ooo", "s", "a")
			lb := labels.FromStrings("__name__", "ooo", "s", "b")
			s.mustSend(series{ls: la, floats: []Sample{{T: t0 + 5000, V: 1}}}, series{ls: lb, floats: []Sample{{T: t0 + 5000, V: 1}}})

			// a moves on in order; b goes back in time.
			_, err := s.send(series{ls: la, floats: []Sample{{T: t0 + 6000, V: 2}}}, series{ls: lb, floats: []Sample{{T: t0 + 4000, V: 2}}})
			if err == nil || !strings.Contains(err.Error(), "400") {
				t.Fatalf("out-of-order write: err = %v, want a 400", err)
			}
			if errors.As(err, &remote.RecoverableError{}) {
				t.Errorf("out-of-order write must not be retried, got recoverable %v", err)
			}

			st := r.Stats()
			if st.OutOfOrder != 1 || st.Rejected() != 1 {
				t.Errorf("stats = %+v, want exactly 1 out-of-order rejection", st)
			}
			got, err := r.Samples()
			if err != nil {
				t.Fatal(err)
			}
			equalSamples(t, "b", got[lb.String()], []Sample{{T: t0 + 5000, V: 1}})
			if v2 {
				// 2.0 writes partially: the good sample stays.
				equalSamples(t, "a", got[la.String()], []Sample{{T: t0 + 5000, V: 1}, {T: t0 + 6000, V: 2}})
				if st.Accepted != 3 || st.RolledBack != 0 {
					t.Errorf("stats = %+v, want 3 accepted, nothing rolled back", st)
				}
			} else {
				// 1.0 fails the request as a whole.
				equalSamples(t, "a", got[la.String()], []Sample{{T: t0 + 5000, V: 1}})
				if st.Accepted != 2 || st.RolledBack != 1 {
					t.Errorf("stats = %+v, want 2 accepted, 1 rolled back", st)
				}
			}

			// The rejection is visible on /metrics, both as the TSDB's and as ours.
			body := get(t, srv.URL+"/metrics")
			for _, want := range []string{
				`prometheus_tsdb_out_of_order_samples_total{type="float"} 1`,
				`shoal_receiver_samples_rejected_total{reason="out_of_order"} 1`,
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
		})
	}
}

func TestDuplicatesAndTooOld(t *testing.T) {
	r, srv := openTest(t)
	s := newSender(t, srv.URL, true)
	t0 := base()
	l := labels.FromStrings("__name__", "dup")
	s.mustSend(series{ls: l, floats: []Sample{{T: t0, V: 1}}})
	// Same timestamp, same value: silently dropped by the TSDB.
	s.mustSend(series{ls: l, floats: []Sample{{T: t0, V: 1}}})
	// Same timestamp, other value: rejected.
	if _, err := s.send(series{ls: l, floats: []Sample{{T: t0, V: 2}}}); err == nil {
		t.Error("conflicting duplicate accepted")
	}
	// Far older than the head allows.
	if _, err := s.send(series{ls: labels.FromStrings("__name__", "old"), floats: []Sample{{T: t0 - 3*time.Hour.Milliseconds(), V: 1}}}); err == nil {
		t.Error("sample three hours older than the head accepted")
	}
	st := r.Stats()
	want := Stats{Series: 1, Accepted: 2, Stored: 1, Dropped: 1, Duplicate: 1, TooOld: 1}
	if st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
}

func testHistogram(i int) *histogram.Histogram {
	return &histogram.Histogram{
		Schema:          1,
		ZeroThreshold:   0.001,
		ZeroCount:       uint64(1 + i),
		Count:           uint64(5 + 2*i),
		Sum:             18.5 + float64(i),
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
		PositiveBuckets: []int64{1, 2 + int64(i)},
	}
}

func TestHistogramRoundTrip(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			r, srv := openTest(t)
			s := newSender(t, srv.URL, v2)
			t0 := base()
			l := labels.FromStrings("__name__", "latency_seconds", "job", "h")
			var hs []histAt
			for i := range 3 {
				hs = append(hs, histAt{t: t0 + int64(i)*1000, h: testHistogram(i)})
			}
			s.mustSend(series{ls: l, hists: hs})

			got, err := r.Samples(labels.MustNewMatcher(labels.MatchEqual, "job", "h"))
			if err != nil {
				t.Fatal(err)
			}
			ss := got[l.String()]
			if len(ss) != len(hs) {
				t.Fatalf("got %d samples, want %d: %v", len(ss), len(hs), ss)
			}
			for i, h := range hs {
				if ss[i].T != h.t || ss[i].H == nil || !ss[i].H.Equals(h.h.ToFloat(nil)) {
					t.Errorf("histogram %d = %v at %d, want %v at %d", i, ss[i].H, ss[i].T, h.h, h.t)
				}
			}
			if st := r.Stats(); st.Histograms != 3 || st.Accepted != 3 || st.Stored != 3 {
				t.Errorf("stats = %+v, want 3 histograms accepted and stored", st)
			}

			qr := query(t, srv, "/api/v1/query", url.Values{"query": {`histogram_count(latency_seconds)`}, "time": {secs(t0 + 2000)}})
			if len(qr.Result) != 1 || qr.Result[0].Value[1] != "9" {
				t.Errorf("histogram_count = %+v, want 9", qr)
			}
			qr = query(t, srv, "/api/v1/query", url.Values{"query": {`latency_seconds`}, "time": {secs(t0 + 2000)}})
			if len(qr.Result) != 1 || len(qr.Result[0].Histogram) != 2 {
				t.Errorf("latency_seconds = %+v, want a histogram sample", qr)
			}
		})
	}
}

func TestStaleMarkers(t *testing.T) {
	r, srv := openTest(t)
	s := newSender(t, srv.URL, false)
	t0 := base()
	l := labels.FromStrings("__name__", "gone")
	s.mustSend(series{ls: l, floats: []Sample{{T: t0, V: 1}, {T: t0 + 1000, V: math.Float64frombits(value.StaleNaN)}}})
	s.mustSend(series{ls: labels.FromStrings("__name__", "alive"), floats: []Sample{{T: t0, V: 1}}})

	m, err := r.StaleMarkers()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[l.String()]) != 1 || m[l.String()][0] != t0+1000 {
		t.Errorf("StaleMarkers() = %v, want one marker on %s at %d", m, l, t0+1000)
	}
	got, err := r.Samples(labels.MustNewMatcher(labels.MatchEqual, "__name__", "gone"))
	if err != nil {
		t.Fatal(err)
	}
	if ss := got[l.String()]; len(ss) != 2 || ss[0].IsStale() || !ss[1].IsStale() {
		t.Errorf("Samples = %v, want a value then a staleness marker", ss)
	}
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	r, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	t0 := base()
	l := labels.FromStrings("__name__", "durable")
	newSender(t, srv.URL, true).mustSend(series{ls: l, floats: floats(t0, 5, 1000, 1)})
	srv.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	r, err = New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Samples()
	if err != nil {
		t.Fatal(err)
	}
	equalSamples(t, "after reopen", got[l.String()], floats(t0, 5, 1000, 1))
}

// writeDistinct sends requests of one new sample for each of seriesPer
// series of writer w, step ms apart from t0; it reports a failed send as a
// test error and stops.
func writeDistinct(t *testing.T, s *sender, w, requests, seriesPer int, t0, step int64) {
	for i := range requests {
		var ss []series
		for k := range seriesPer {
			ss = append(ss, series{
				ls:     labels.FromStrings("__name__", "load", "writer", fmt.Sprint(w), "k", fmt.Sprint(k)),
				floats: []Sample{{T: t0 + int64(i)*step, V: float64(i)}},
			})
		}
		if _, err := s.send(ss...); err != nil {
			t.Error(err)
			return
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	r, srv := openTest(t)
	t0 := base()
	const writers, requests, seriesPer = 4, 20, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() { writeDistinct(t, newSender(t, srv.URL, w%2 == 1), w, requests, seriesPer, t0, 1000) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	const total = writers * requests * seriesPer
	if st := r.Stats(); st.Accepted != total || st.Stored != total || st.Rejected() != 0 || st.Series != writers*seriesPer {
		t.Errorf("stats = %+v, want %d samples in %d series", st, total, writers*seriesPer)
	}
	got, err := r.Samples()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ss := range got {
		n += len(ss)
	}
	if n != total {
		t.Errorf("read back %d samples, want %d", n, total)
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return string(b)
}

func TestStatusPageAndHealth(t *testing.T) {
	_, srv := openTest(t)
	newSender(t, srv.URL, false).mustSend(series{ls: labels.FromStrings("__name__", "x"), floats: floats(base(), 4, 1000, 0)})
	page := get(t, srv.URL+"/")
	for _, want := range []string{"series (head)              1", "samples accepted           4", "/api/v1/query?query="} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q:\n%s", want, page)
		}
	}
	if got := get(t, srv.URL+"/-/healthy"); !strings.Contains(got, "OK") {
		t.Errorf("/-/healthy = %q", got)
	}
	resp, err := http.Get(srv.URL + "/api/v1/write")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /api/v1/write = %d, want 405", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL+"/api/v1/write", "application/x-protobuf", bytes.NewReader([]byte("not snappy")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("garbage write = %d, want 400", resp.StatusCode)
	}
	if body := get(t, srv.URL+"/metrics"); !strings.Contains(body, `shoal_receiver_http_requests_total{code="400",handler="write"} 1`) {
		t.Log(body)
		t.Errorf("/metrics does not count the bad write")
	}
}

func TestLogLimit(t *testing.T) {
	var buf bytes.Buffer
	l, st := newLimitedLogger(slog.New(slog.NewTextHandler(&buf, nil)), 3)
	l = l.With("component", "x")
	for i := range 20 {
		l.Error("rejected", "i", i)
	}
	if n := strings.Count(buf.String(), "rejected"); n != 3 {
		t.Errorf("%d lines logged in one burst, want 3:\n%s", n, buf.String())
	}
	if st.suppressed.Load() != 17 {
		t.Errorf("suppressed = %d, want 17", st.suppressed.Load())
	}
	// A later second gets a fresh allowance.
	if !st.allow(time.Now().Add(2 * time.Second)) {
		t.Error("no allowance in a new second")
	}
}

// BenchmarkRemoteWrite measures ingestion through HTTP, the write handler
// and the TSDB: requests of 2000 series with one sample each, as a
// remote-write queue shard sends them.
func BenchmarkRemoteWrite(b *testing.B) {
	for _, v2 := range []bool{false, true} {
		b.Run(fmt.Sprintf("v2=%v", v2), func(b *testing.B) {
			r, srv := openTest(b)
			s := newSender(b, srv.URL, v2)
			const perReq = 2000
			t0 := time.Now().UnixMilli()
			ls := make([]labels.Labels, perReq)
			for k := range ls {
				ls[k] = labels.FromStrings("__name__", "bench_metric", "instance", fmt.Sprintf("host-%d:9100", k%100), "k", fmt.Sprint(k))
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ss := make([]series, perReq)
				for k := range ss {
					ss[k] = series{ls: ls[k], floats: []Sample{{T: t0 + int64(i), V: float64(i)}}}
				}
				s.mustSend(ss...)
			}
			b.ReportMetric(float64(b.N*perReq)/b.Elapsed().Seconds(), "samples/s")
			if st := r.Stats(); st.Rejected() != 0 {
				b.Fatalf("rejections during benchmark: %+v", st)
			}
		})
	}
}

// TestStatsWhileWritingShowsNoDrops reads Stats while writers commit new,
// distinct samples: nothing is a duplicate, so no read may count a drop,
// whatever commit lands between the counters it reads.
func TestStatsWhileWritingShowsNoDrops(t *testing.T) {
	r, srv := openTest(t)
	t0 := base()
	const writers, requests, seriesPer = 4, 200, 20
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() { writeDistinct(t, newSender(t, srv.URL, false), w, requests, seriesPer, t0, 100) })
	}
	go func() { wg.Wait(); close(done) }()
	reads, bad := 0, Stats{}
	for waiting := true; waiting; reads++ {
		select {
		case <-done:
			waiting = false
		default:
		}
		if st := r.Stats(); st.Dropped != 0 && bad.Dropped == 0 {
			bad = st
		}
	}
	if bad.Dropped != 0 {
		t.Errorf("a read while writing counted %d drops of distinct samples: %+v", bad.Dropped, bad)
	}
	if st := r.Stats(); st.Dropped != 0 || st.Accepted != writers*requests*seriesPer {
		t.Errorf("after the writes: %+v", st)
	}
	t.Logf("%d reads while writing", reads)
}
