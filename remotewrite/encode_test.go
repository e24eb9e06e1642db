package remotewrite

import (
	"bytes"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// generatedRequest is the request build+encode must produce, made the
// straightforward way: prompb types filled item by item, series in order of
// their first item.
func generatedRequest(items []item, md []prompb.MetricMetadata) prompb.WriteRequest {
	req := prompb.WriteRequest{Metadata: md}
	index := map[chunks.HeadSeriesRef]int{}
	for _, it := range items {
		i, ok := index[it.ref]
		if !ok {
			i = len(req.Timeseries)
			index[it.ref] = i
			req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: prompb.FromLabels(it.lbls, nil)})
		}
		addToTimeSeries(&req.Timeseries[i], &it)
	}
	return req
}

func decodeV1(t *testing.T, raw []byte) prompb.WriteRequest {
	t.Helper()
	var req prompb.WriteRequest
	unsnappy(t, raw, &req)
	return req
}

// unsnappy decodes raw, a snappy-compressed request body, into m.
func unsnappy(t *testing.T, raw []byte, m interface{ Unmarshal([]byte) error }) {
	t.Helper()
	plain, err := snappy.Decode(nil, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unmarshal(plain); err != nil {
		t.Fatal(err)
	}
}

// The hand-written 1.0 encoder must say exactly what the generated code
// says: every series with its labels, samples (zero, negative, NaN,
// huge and negative timestamps), histograms, exemplars, metadata; series
// below 128 bytes, and above 16 KiB, whose size does not fit its slot.
func TestEncodeMatchesGenerated(t *testing.T) {
	long := labels.FromStrings("__name__", "m", "long", string(make([]byte, 20000)), "z", "")
	a := labels.FromStrings("__name__", "a", "job", "j")
	c := labels.FromStrings("__name__", "c", "instance", "host:9100")
	ex := labels.FromStrings("trace_id", "abc")
	items := []item{
		{ref: 1, lbls: a, kind: kindSample, t: 1, v: 1},
		{ref: 2, lbls: c, kind: kindSample, t: 0, v: 0},
		{ref: 1, lbls: a, kind: kindSample, t: 2, v: math.NaN()},
		{ref: 3, lbls: long, kind: kindSample, t: -5, v: -1e300},
		{ref: 4, lbls: c, kind: kindHistogram, t: 7, x: &itemExtra{h: testHistogram(2)}},
		{ref: 5, lbls: a, kind: kindFloatHistogram, t: 8, x: &itemExtra{fh: testHistogram(3).ToFloat(nil)}},
		{ref: 4, lbls: c, kind: kindExemplar, t: 6, v: 0.5, x: &itemExtra{exLbls: ex}},
		{ref: 6, lbls: a, kind: kindExemplar, t: 9, v: 2, x: &itemExtra{exLbls: ex}},
		{ref: 2, lbls: c, kind: kindSample, t: math.MaxInt64, v: math.Inf(-1)},
		{ref: 7, lbls: labels.EmptyLabels(), kind: kindSample, t: 3, v: 3},
	}
	md := []prompb.MetricMetadata{{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "a", Help: "help", Unit: "s"}}
	b := newShardBuffers()
	for _, tc := range []struct {
		name  string
		items []item
		md    []prompb.MetricMetadata
	}{
		{"all kinds", items, md},
		{"one sample each", items[:2], nil},
		{"metadata only", nil, md},
		{"after a bigger request", items[8:9], nil}, // reused buffers carry nothing over
	} {
		t.Run(tc.name, func(t *testing.T) {
			cnt := b.build(tc.items, tc.md)
			raw, err := b.encode()
			if err != nil {
				t.Fatal(err)
			}
			// Compared in the generated code's canonical form (a decoded
			// request has empty slices where a built one has nil ones).
			got := decodeV1(t, raw)
			want := generatedRequest(tc.items, tc.md)
			gotB, err := got.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			wantB, err := want.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gotB, wantB) {
				t.Errorf("decoded request differs from the generated one:\n got %v\nwant %v", got.String(), want.String())
			}
			if len(got.Timeseries) != len(want.Timeseries) {
				t.Errorf("%d series, want %d", len(got.Timeseries), len(want.Timeseries))
			}
			var wantCnt counts
			for _, it := range tc.items {
				switch it.kind {
				case kindSample:
					wantCnt.samples++
				case kindExemplar:
					wantCnt.exemplars++
				default:
					wantCnt.histograms++
				}
				if it.kind != kindExemplar {
					wantCnt.maxT = max(wantCnt.maxT, it.t)
				}
			}
			wantCnt.metadata = len(tc.md)
			if cnt != wantCnt {
				t.Errorf("counts %+v, want %+v", cnt, wantCnt)
			}
		})
	}
}

// The journal entries of a request are each series timeline's highest
// timestamp, exemplars apart, as journal.intent computes them.
func TestGroupJournalEntries(t *testing.T) {
	items := []item{
		{ref: 1, kind: kindSample, t: 5},
		{ref: 2, kind: kindExemplar, t: 9},
		{ref: 1, kind: kindSample, t: 3},
		{ref: 2, kind: kindHistogram, t: 4},
		{ref: 1, kind: kindExemplar, t: 1},
		{ref: 2, kind: kindExemplar, t: 2},
	}
	b := newShardBuffers()
	b.group(items)
	got := map[wmKey]int64{}
	for _, e := range b.entries {
		if _, dup := got[e.key]; dup {
			t.Fatalf("timeline %+v twice", e.key)
		}
		got[e.key] = e.maxT
	}
	want := map[wmKey]int64{{1, false}: 5, {1, true}: 1, {2, false}: 4, {2, true}: 9}
	if !maps.Equal(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	var order []int32
	for _, s := range b.series {
		order = append(order, b.order[s.start:s.start+s.n]...)
	}
	if want := []int32{0, 2, 4, 1, 3, 5}; !slices.Equal(order, want) {
		t.Errorf("items series by series %v, want %v", order, want)
	}
}
