package remotewrite

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// captureClient keeps the raw body of every request it acknowledges.
type captureClient struct{ bodies [][]byte }

func (c *captureClient) Store(_ context.Context, raw []byte, _ int) (remote.WriteResponseStats, error) {
	c.bodies = append(c.bodies, bytes.Clone(raw))
	return remote.WriteResponseStats{}, nil
}
func (*captureClient) Name() string     { return "capture" }
func (*captureClient) Endpoint() string { return "http://capture.invalid/" }

// sharingQueue is a queue of the remote_write entry yml (under a
// remote_write: list) with the given external labels, which shares the
// label sets of src when share is set, and has cached the series of src.
func sharingQueue(t *testing.T, yml string, external labels.Labels, src walLabels, share bool) (*queue, *captureClient) {
	t.Helper()
	var local LocalWAL
	if share {
		local = src
	}
	c := &captureClient{}
	return cachingQueue(t, yml, external, local, c, len(src)-1, func(i int) labels.Labels { return src[i+1] }), c
}

// sendAll sends, as one shard, a sample of each of the first n cached
// series, a histogram of the first and an exemplar of the second, and
// returns the request bodies.
func sendAll(t *testing.T, q *queue, c *captureClient, n int) [][]byte {
	t.Helper()
	var items []item
	fail := func(r string) { t.Fatalf("series dropped: %s", r) }
	for ref := 1; ref <= n; ref++ {
		lbls, ok := q.lookup(chunks.HeadSeriesRef(ref), fail)
		if !ok {
			continue
		}
		items = append(items, item{ref: chunks.HeadSeriesRef(ref), kind: kindSample, t: int64(ref), v: float64(ref), lbls: lbls})
	}
	lbls, _ := q.lookup(1, fail)
	items = append(items, item{ref: 1, kind: kindHistogram, t: 100, x: &itemExtra{h: testHistogram(1)}, lbls: lbls})
	if n > 1 {
		lbls, _ = q.lookup(2, fail)
		items = append(items, item{ref: 2, kind: kindExemplar, t: 2, v: 0.5, lbls: lbls, x: &itemExtra{exLbls: labels.FromStrings("trace_id", "abc")}})
	}
	b := q.newBuffers()
	b.items = items
	if ok, _ := q.runShard(context.Background(), b, nil, position{Segment: 1}, false); !ok {
		t.Fatal("not sent")
	}
	return c.bodies
}

// sentLabels decodes the label sets of every series of a request body.
func sentLabels(t *testing.T, raw []byte, v2 bool) []labels.Labels {
	t.Helper()
	var out []labels.Labels
	var sb labels.ScratchBuilder
	if !v2 {
		for _, ts := range decodeV1(t, raw).Timeseries {
			out = append(out, ts.ToLabels(&sb, nil))
		}
		return out
	}
	var req writev2.Request
	unsnappy(t, raw, &req)
	for _, ts := range req.Timeseries {
		ls, err := ts.ToLabels(&sb, req.Symbols)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ls)
	}
	return out
}

// A queue keeps the WAL's own label set of a series instead of a copy
// wherever it can, and sends what Prometheus sends: the series' labels,
// the external labels it lacks (its own label wins), then
// write_relabel_configs. External labels sorting before, between and after
// the series' own, one the series overrides, one without a value, one that
// requests are separated by (SeparateBy); samples, a histogram and an
// exemplar; Remote-Write 1.0 (hand-written and generated encoders) and 2.0.
// Without relabelling the cache shares every label set, with it only those
// relabelling left as they were; either way the requests are byte for byte
// those of a queue that keeps copies.
func TestSharedLabelSetsAreSentAsCopiedOnes(t *testing.T) {
	src := walLabels{labels.EmptyLabels()}
	for i := range 6 {
		ls := labels.FromStrings("__name__", fmt.Sprintf("m%d", i%2), "instance", fmt.Sprintf("h%d:9100", i), "job", "node")
		if i%3 == 0 {
			ls = labels.NewBuilder(ls).Set("zone", fmt.Sprintf("own-%d", i)).Labels()
		}
		src = append(src, ls)
	}
	relabelDrop := "    write_relabel_configs:\n      - {action: labeldrop, regex: instance}\n"
	relabelKeep := "    write_relabel_configs:\n      - {action: keep, source_labels: [job], regex: node}\n"
	for _, tc := range []struct {
		name     string
		external labels.Labels
		relabel  string
		shared   bool
		separate string
	}{
		{"no external labels", labels.EmptyLabels(), "", true, ""},
		{"one external label", labels.FromStrings("cluster", "eu-1"), "", true, ""},
		{"before, between, after and overridden", labels.FromStrings("a", "1", "job", "ext", "k", "2", "zz", "3"), "", true, ""},
		{"one without a value", labels.FromStrings("a", "", "cluster", "eu-1"), "", true, ""},
		{"separated by a label some series have", labels.FromStrings("zone", "ext"), "", true, "zone"},
		{"relabelling that changes nothing", labels.EmptyLabels(), relabelKeep, true, ""},
		{"relabelling that changes the labels", labels.EmptyLabels(), relabelDrop, false, ""},
		{"relabelling with an external label", labels.FromStrings("cluster", "eu-1"), relabelKeep, false, ""},
	} {
		for _, msg := range []string{"prometheus.WriteRequest", "io.prometheus.write.v2.Request"} {
			t.Run(tc.name+"/"+msg, func(t *testing.T) {
				yml := "  - url: http://capture.invalid/write\n    name: q\n    send_exemplars: true\n    protobuf_message: " + msg + "\n" + tc.relabel
				shared, sc := sharingQueue(t, yml, tc.external, src, true)
				copied, cc := sharingQueue(t, yml, tc.external, src, false)
				shared.s.separateBy, copied.s.separateBy = tc.separate, tc.separate
				for ref := 1; ref < len(src); ref++ {
					e, _ := shared.series.get(chunks.HeadSeriesRef(ref))
					if got := testutil.SameLabelSet(e.lbls, src[ref]); got != tc.shared {
						t.Fatalf("series %d: shares the WAL's label set: %v, want %v", ref, got, tc.shared)
					}
					if e, _ := copied.series.get(chunks.HeadSeriesRef(ref)); testutil.SameLabelSet(e.lbls, src[ref]) {
						t.Fatalf("series %d: a queue with no WAL to share shares its label set", ref)
					}
				}
				got, want := sendAll(t, shared, sc, len(src)-1), sendAll(t, copied, cc, len(src)-1)
				if len(got) != len(want) {
					t.Fatalf("%d requests, want %d", len(got), len(want))
				}
				for i := range got {
					if !bytes.Equal(got[i], want[i]) {
						t.Errorf("request %d differs from the one of a queue with copies", i)
					}
				}
				var sent []labels.Labels
				for _, raw := range got {
					sent = append(sent, sentLabels(t, raw, msg != "prometheus.WriteRequest")...)
				}
				rcfg := loadConfig(t, "remote_write:\n"+yml).RemoteWriteConfigs[0].WriteRelabelConfigs
				var wantSent []labels.Labels
				for ref := 1; ref < len(src); ref++ {
					b := labels.NewBuilder(src[ref])
					tc.external.Range(func(l labels.Label) {
						if b.Get(l.Name) == "" {
							b.Set(l.Name, l.Value)
						}
					})
					if relabel.ProcessBuilder(b, rcfg...) {
						wantSent = append(wantSent, b.Labels())
					}
				}
				if len(sent) != len(wantSent) {
					t.Fatalf("sent %d series, want %d", len(sent), len(wantSent))
				}
				if tc.separate != "" {
					// Each request holds one value of the label, in order.
					slices.SortStableFunc(wantSent, func(a, b labels.Labels) int {
						return strings.Compare(a.Get(tc.separate), b.Get(tc.separate))
					})
					values := map[string]bool{}
					for _, ls := range wantSent {
						values[ls.Get(tc.separate)] = true
					}
					if len(got) != len(values) {
						t.Errorf("%d requests, want one per value of %s: %d", len(got), tc.separate, len(values))
					}
				}
				for i := range sent {
					if !labels.Equal(sent[i], wantSent[i]) {
						t.Errorf("sent %s, want %s", sent[i], wantSent[i])
					}
				}
			})
		}
	}
}

// A series the WAL no longer holds in memory (forgotten while the queue was
// behind) is cached as a copy, and sent with its external labels.
func TestSeriesGoneFromTheWALIsCopied(t *testing.T) {
	src := walLabels{labels.EmptyLabels(), labels.FromStrings("__name__", "up", "job", "a")}
	q, c := sharingQueue(t, "  - url: http://capture.invalid/write\n", labels.FromStrings("cluster", "eu-1"), src, true)
	q.local = walLabels{labels.EmptyLabels()} // forgotten since
	var enc record.Encoder
	var dec record.Decoder
	got, err := dec.Series(enc.Series([]record.RefSeries{{Ref: 1, Labels: src[1]}}, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	q.storeSeries(got, 2)
	if e, _ := q.series.get(1); !labels.Equal(e.lbls, src[1]) || testutil.SameLabelSet(e.lbls, src[1]) {
		t.Fatalf("cached %s (shared: %v), want a copy of %s", e.lbls, testutil.SameLabelSet(e.lbls, src[1]), src[1])
	}
	req := decodeV1(t, sendAll(t, q, c, 1)[0])
	want := labels.FromStrings("__name__", "up", "cluster", "eu-1", "job", "a")
	if sent := req.Timeseries[0].ToLabels(&labels.ScratchBuilder{}, nil); !labels.Equal(sent, want) {
		t.Fatalf("sent %s, want %s", sent, want)
	}
}
