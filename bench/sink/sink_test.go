package sink

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

func post(t *testing.T, url, contentType, encoding string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func v1Request(t *testing.T, now time.Time) []byte {
	t.Helper()
	ms := now.UnixMilli()
	h := &histogram.Histogram{Count: 3, Sum: 1.5, Schema: 0, PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{3}}
	wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{
			Labels:  []prompb.Label{{Name: "__name__", Value: "a"}, {Name: "job", Value: "j"}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: ms - 20000}, {Value: 2, Timestamp: ms - 10000}},
		},
		{
			Labels:  []prompb.Label{{Name: "__name__", Value: "b"}, {Name: "job", Value: "j"}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: ms - 2000}},
		},
		{
			Labels:     []prompb.Label{{Name: "__name__", Value: "h"}},
			Histograms: []prompb.Histogram{prompb.FromIntHistogram(ms-3000, h)},
		},
	}}
	raw, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, raw)
}

func TestCountsRemoteWriteV1(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	s := New(Options{TrackSeries: true, Now: func() time.Time { return now }})
	srv := httptest.NewServer(s)
	defer srv.Close()

	for range 2 {
		if resp := post(t, srv.URL+"/api/v1/write", "application/x-protobuf", "snappy", v1Request(t, now)); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	snap := s.Snapshot()
	if snap.Samples != 8 || snap.Requests != 2 || snap.Series != 3 || snap.Rejected != 0 {
		t.Fatalf("snapshot %+v: want 8 samples, 2 requests, 3 series", snap)
	}
	if snap.NewestMs != now.UnixMilli()-2000 {
		t.Fatalf("newest %d, want %d", snap.NewestMs, now.UnixMilli()-2000)
	}
	if f, ok := s.Freshness(); !ok || f != 2*time.Second {
		t.Fatalf("freshness %v %v, want 2s", f, ok)
	}
	lags := s.TakeLags()
	if len(lags) != 2 || lags[0] != 2 || lags[1] != 2 {
		t.Fatalf("lags %v, want [2 2]", lags)
	}
	if len(s.TakeLags()) != 0 {
		t.Fatal("TakeLags did not forget")
	}
	s.ResetSeries()
	if s.Snapshot().Series != 0 {
		t.Fatal("ResetSeries did not forget")
	}
}

func TestCountsRemoteWriteV2(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	s := New(Options{TrackSeries: true, Now: func() time.Time { return now }})
	srv := httptest.NewServer(s)
	defer srv.Close()
	ms := now.UnixMilli()
	req := &writev2.Request{
		Symbols: []string{"", "__name__", "a", "job", "j", "b"},
		Timeseries: []writev2.TimeSeries{
			{LabelsRefs: []uint32{1, 2, 3, 4}, Samples: []writev2.Sample{{Value: 1, Timestamp: ms - 5000}, {Value: 2, Timestamp: ms - 1000}}},
			{LabelsRefs: []uint32{1, 5, 3, 4}, Samples: []writev2.Sample{{Value: 1, Timestamp: ms - 4000}}},
			{LabelsRefs: []uint32{1, 5, 3, 4}, Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, ms-500, &histogram.Histogram{Count: 1, Sum: 1})}},
		},
	}
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, srv.URL, "application/x-protobuf;proto=io.prometheus.write.v2.Request", "snappy", snappy.Encode(nil, raw))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written"); got != "3" {
		t.Fatalf("samples-written header %q, want 3", got)
	}
	if got := resp.Header.Get("X-Prometheus-Remote-Write-Histograms-Written"); got != "1" {
		t.Fatalf("histograms-written header %q, want 1", got)
	}
	snap := s.Snapshot()
	if snap.Samples != 4 || snap.Series != 2 || snap.NewestMs != ms-500 {
		t.Fatalf("snapshot %+v: want 4 samples, 2 series, newest %d", snap, ms-500)
	}
}

func TestRejectsBadInput(t *testing.T) {
	s := New(Options{TrackSeries: true})
	srv := httptest.NewServer(s)
	defer srv.Close()
	good := v1Request(t, time.Now())
	truncated, _ := snappy.Decode(nil, good)
	truncated = snappy.Encode(nil, truncated[:len(truncated)-3])
	badRef, _ := (&writev2.Request{Symbols: []string{""}, Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{7, 8}, Samples: []writev2.Sample{{Timestamp: 1}}}}}).Marshal()
	cases := []struct {
		name, ctype, enc string
		body             []byte
		want             int
	}{
		{"not snappy", "application/x-protobuf", "snappy", []byte("hello world"), http.StatusBadRequest},
		{"truncated protobuf", "application/x-protobuf", "snappy", truncated, http.StatusBadRequest},
		{"gzip", "application/x-protobuf", "gzip", good, http.StatusUnsupportedMediaType},
		{"v2 label ref out of range", "application/x-protobuf;proto=io.prometheus.write.v2.Request", "snappy", snappy.Encode(nil, badRef), http.StatusBadRequest},
	}
	for _, c := range cases {
		if resp := post(t, srv.URL, c.ctype, c.enc, c.body); resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d", resp.StatusCode)
	}
	snap := s.Snapshot()
	if snap.Samples != 0 || snap.Rejected != int64(len(cases)) || snap.LastErr == "" {
		t.Fatalf("after bad input: %+v", snap)
	}
	if _, ok := s.Freshness(); ok {
		t.Fatal("freshness reported with no sample")
	}
	// Still serving after garbage.
	if resp := post(t, srv.URL, "application/x-protobuf", "snappy", good); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("good request after bad ones: status %d", resp.StatusCode)
	}
}

func TestTooLarge(t *testing.T) {
	s := New(Options{})
	srv := httptest.NewServer(s)
	defer srv.Close()
	body := bytes.Repeat([]byte{0}, MaxRequestBytes+10)
	if resp := post(t, srv.URL, "application/x-protobuf", "snappy", body); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	if !strings.Contains(s.Snapshot().LastErr, "too large") {
		t.Fatalf("last error %q", s.Snapshot().LastErr)
	}
}

func TestPercentile(t *testing.T) {
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Fatal("empty percentile not NaN")
	}
	v := []float64{5, 1, 4, 2, 3}
	if Percentile(v, 50) != 3 || Percentile(v, 100) != 5 || Percentile(v, 0) != 1 || Percentile(v, 99) != 5 {
		t.Fatalf("percentiles of 1..5 wrong")
	}
}
