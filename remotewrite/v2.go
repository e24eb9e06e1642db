package remotewrite

import (
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/util/compression"
)

// Remote-Write 2.0 (protobuf_message: io.prometheus.write.v2.Request): each
// request carries a symbols table, and each series its labels as symbol
// references and its metadata (type, help, unit from the WAL's metadata
// records). There are no separate metadata requests in 2.0, so the periodic
// metadata re-send does not run; metadata_config.send: false leaves the
// per-series metadata empty.
//
// The receiver reports what it wrote in the X-Prometheus-Remote-Write-Written-*
// headers. An acknowledged request with fewer samples, histograms or
// exemplars written than sent counts the difference as failed
// (shoal_remotewrite_samples_dropped_total{reason="not_written"}); a refused
// one (400) counts only what was not written. A 5xx is retried whole:
// receivers roll back on 5xx (Prometheus' does), so nothing of it was written.

// seriesMeta is the metadata of one series, for 2.0 requests.
type seriesMeta struct {
	typ        model.MetricType
	help, unit string
}

const dropNotWritten = "not_written"

func newSeriesMeta(md record.RefMetadata) *seriesMeta {
	return &seriesMeta{typ: record.ToMetricType(md.Type), help: md.Help, unit: md.Unit}
}

// v2Buffers are a shard's reusable 2.0 buffers.
type v2Buffers struct {
	req     writev2.Request
	symbols writev2.SymbolsTable
}

// buildV2 fills b.v2.req with items grouped by series (see group), reusing
// the series and their slices of the previous request.
func (b *shardBuffers) buildV2(items []item) counts {
	if b.v2 == nil {
		b.v2 = &v2Buffers{symbols: writev2.NewSymbolTable()}
	}
	v := b.v2
	v.symbols.Reset()
	cnt := b.group(items)
	all := v.req.Timeseries[:cap(v.req.Timeseries)]
	for len(all) < len(b.series) {
		all = append(all, writev2.TimeSeries{})
		all = all[:cap(all)]
	}
	all = all[:len(b.series)]
	for k, s := range b.series {
		idx := b.order[s.start : s.start+s.n]
		ts := &all[k]
		first := &items[idx[0]]
		refs := ts.LabelsRefs[:0]
		withExternal(first.lbls, b.external, func(l labels.Label) {
			refs = append(refs, v.symbols.Symbolize(l.Name), v.symbols.Symbolize(l.Value))
		})
		ts.LabelsRefs = refs
		ts.Samples = ts.Samples[:0]
		clear(ts.Histograms)
		ts.Histograms = ts.Histograms[:0]
		clear(ts.Exemplars)
		ts.Exemplars = ts.Exemplars[:0]
		ts.Metadata = writev2.Metadata{}
		if m := first.meta; m != nil {
			ts.Metadata = writev2.Metadata{
				Type:    writev2.FromMetadataType(m.typ),
				HelpRef: v.symbols.Symbolize(m.help),
				UnitRef: v.symbols.Symbolize(m.unit),
			}
		}
		for _, i := range idx {
			it := &items[i]
			switch it.kind {
			case kindSample:
				ts.Samples = append(ts.Samples, writev2.Sample{Value: it.v, Timestamp: it.t})
			case kindHistogram:
				ts.Histograms = append(ts.Histograms, writev2.FromIntHistogram(0, it.t, it.x.h))
			case kindFloatHistogram:
				ts.Histograms = append(ts.Histograms, writev2.FromFloatHistogram(0, it.t, it.x.fh))
			case kindExemplar:
				ts.Exemplars = append(ts.Exemplars, writev2.Exemplar{LabelsRefs: v.symbols.SymbolizeLabels(it.x.exLbls, nil), Value: it.v, Timestamp: it.t})
			}
		}
	}
	v.req.Timeseries = all
	v.req.Symbols = v.symbols.Symbols()
	return cnt
}

// encodeV2 marshals and compresses b.v2.req.
func (b *shardBuffers) encodeV2() ([]byte, error) {
	size := b.v2.req.Size()
	if cap(b.proto) < size {
		b.proto = make([]byte, size)
	}
	n, err := b.v2.req.MarshalToSizedBuffer(b.proto[:size])
	if err != nil {
		return nil, err
	}
	return compression.Encode(compression.Snappy, b.proto[size-n:size], b.comp)
}

// notWritten is what the receiver's written-* headers say it did not write
// of cnt (zero when it sent no such headers).
func notWritten(cnt counts, rs remote.WriteResponseStats) counts {
	if !rs.Confirmed {
		return counts{}
	}
	return counts{
		samples:    max(cnt.samples-rs.Samples, 0),
		histograms: max(cnt.histograms-rs.Histograms, 0),
		exemplars:  max(cnt.exemplars-rs.Exemplars, 0),
	}
}
