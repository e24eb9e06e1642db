package remotewrite

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// A request's items are grouped by series (one TimeSeries per series per
// request) once, in group; both the Remote-Write 1.0 encoder below and the
// journal entries use the grouping.
//
// The 1.0 encoder writes the protobuf wire format of prometheus.WriteRequest
// straight from the items and the cached labels. In steady state each series
// has one sample per request, so converting its labels to []prompb.Label and
// letting the generated code walk them twice (Size, then Marshal) cost more
// than the sample itself. Series with histograms or exemplars, rare, go
// through the generated code.

// reqSeries is one series of the request being built.
type reqSeries struct {
	ref          chunks.HeadSeriesRef
	start, n     int32 // its items are order[start:start+n]
	data, ex     bool  // it has samples or histograms; exemplars
	plain        bool  // samples only: the hand-written encoder writes it
	maxT, maxTEx int64 // highest timestamp of data; of exemplars
}

// group fills b.series, b.order and b.entries for items and returns what
// the request carries. b.order lists item indices series by series, each
// series' items in their original order.
func (b *shardBuffers) group(items []item) counts {
	var cnt counts
	clear(b.index)
	b.series = b.series[:0]
	b.slot = b.slot[:0]
	for _, it := range items {
		i, ok := b.index[it.ref]
		if !ok {
			i = int32(len(b.series))
			b.index[it.ref] = i
			b.series = append(b.series, reqSeries{ref: it.ref, plain: true})
		}
		b.slot = append(b.slot, i)
		s := &b.series[i]
		s.n++
		switch it.kind {
		case kindExemplar:
			if !s.ex || it.t > s.maxTEx {
				s.maxTEx = it.t
			}
			s.ex, s.plain = true, false
			cnt.exemplars++
			continue
		case kindSample:
			cnt.samples++
		default:
			cnt.histograms++
			s.plain = false
		}
		if !s.data || it.t > s.maxT {
			s.maxT = it.t
		}
		s.data = true
		cnt.maxT = max(cnt.maxT, it.t)
	}
	// Counting sort of the item indices by series, stable.
	var pos int32
	for i := range b.series {
		b.series[i].start = pos
		pos += b.series[i].n
	}
	b.order = b.order[:0]
	if len(b.series) == len(items) {
		// One item per series, the steady state: already in order.
		for i := range items {
			b.order = append(b.order, int32(i))
		}
	} else {
		b.order = append(b.order, make([]int32, len(items))...)
		next := b.next[:0]
		for i := range b.series {
			next = append(next, b.series[i].start)
		}
		for i, s := range b.slot {
			b.order[next[s]] = int32(i)
			next[s]++
		}
		b.next = next
	}
	b.entries = b.entries[:0]
	for _, s := range b.series {
		if s.data {
			b.entries = append(b.entries, pendingEntry{key: wmKey{ref: s.ref}, maxT: s.maxT})
		}
		if s.ex {
			b.entries = append(b.entries, pendingEntry{key: wmKey{ref: s.ref, ex: true}, maxT: s.maxTEx})
		}
	}
	return cnt
}

// Field tags (field number << 3 | wire type) of prometheus.WriteRequest and
// the messages in it.
const (
	tagWriteRequestTimeseries = 1<<3 | 2
	tagWriteRequestMetadata   = 3<<3 | 2
	tagTimeSeriesLabels       = 1<<3 | 2
	tagTimeSeriesSamples      = 2<<3 | 2
	tagLabelName              = 1<<3 | 2
	tagLabelValue             = 2<<3 | 2
	tagSampleValue            = 1<<3 | 1 // fixed64
	tagSampleTimestamp        = 2<<3 | 0 // varint
)

// withExternal calls f for every label of lbls and every label of ext whose
// name lbls lacks, in name order: the labels a series is sent with, where
// ext, its queue's external labels (sorted), were not added when it was
// cached. The series' own label wins, as in Prometheus.
func withExternal(lbls labels.Labels, ext []labels.Label, f func(labels.Label)) {
	if len(ext) == 0 {
		lbls.Range(f)
		return
	}
	j := 0
	lbls.Range(func(l labels.Label) {
		for j < len(ext) && ext[j].Name < l.Name {
			f(ext[j])
			j++
		}
		if j < len(ext) && ext[j].Name == l.Name {
			j++
		}
		f(l)
	})
	for ; j < len(ext); j++ {
		f(ext[j])
	}
}

// nonEmpty is lbls as a slice, without labels of empty value (which a
// series does not carry).
func nonEmpty(lbls labels.Labels) []labels.Label {
	var out []labels.Label
	lbls.Range(func(l labels.Label) {
		if l.Value != "" {
			out = append(out, l)
		}
	})
	return out
}

// uvarintLen is the length of x as a protobuf varint.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// seriesSizeSlot is the room appendWriteRequest leaves for a series' size.
const seriesSizeSlot = 2

// putSize writes the size of dst[at+slot:] as a varint at dst[at:], where
// slot bytes were left for it, moving the body when it needs more or less.
func putSize(dst []byte, at, slot int) []byte {
	body := at + slot
	size := len(dst) - body
	if shift := uvarintLen(uint64(size)) - slot; shift > 0 {
		dst = append(dst, make([]byte, shift)...)
		copy(dst[body+shift:], dst[body:len(dst)-shift])
	} else if shift < 0 {
		copy(dst[body+shift:], dst[body:])
		dst = dst[:len(dst)+shift]
	}
	binary.PutUvarint(dst[at:], uint64(size))
	return dst
}

// appendLabels appends lbls and the external labels ext it lacks as
// repeated prometheus.Label fields. It merges as withExternal does, written
// out: a second closure per label cost 14% of a request's CPU.
func appendLabels(dst []byte, lbls labels.Labels, ext []labels.Label) []byte {
	j := 0
	lbls.Range(func(l labels.Label) {
		for j < len(ext) && ext[j].Name <= l.Name {
			if ext[j].Name != l.Name {
				dst = appendLabel(dst, ext[j])
			}
			j++
		}
		dst = appendLabel(dst, l)
	})
	for ; j < len(ext); j++ {
		dst = appendLabel(dst, ext[j])
	}
	return dst
}

// appendLabel appends l as a prometheus.Label field.
func appendLabel(dst []byte, l labels.Label) []byte {
	if m := len(l.Name) + len(l.Value) + 4; m < 128 {
		// The usual label: every length fits in one byte.
		dst = append(dst, tagTimeSeriesLabels, byte(m), tagLabelName, byte(len(l.Name)))
		dst = append(dst, l.Name...)
		dst = append(dst, tagLabelValue, byte(len(l.Value)))
		return append(dst, l.Value...)
	}
	m := 1 + uvarintLen(uint64(len(l.Name))) + len(l.Name) + 1 + uvarintLen(uint64(len(l.Value))) + len(l.Value)
	dst = append(dst, tagTimeSeriesLabels)
	dst = binary.AppendUvarint(dst, uint64(m))
	dst = append(dst, tagLabelName)
	dst = binary.AppendUvarint(dst, uint64(len(l.Name)))
	dst = append(dst, l.Name...)
	dst = append(dst, tagLabelValue)
	dst = binary.AppendUvarint(dst, uint64(len(l.Value)))
	return append(dst, l.Value...)
}

// sampleSize is the size of a prometheus.Sample message. As the generated
// code does, zero fields are left out (a value of +0 only: -0 is kept).
func sampleSize(v float64, t int64) int {
	n := 0
	if math.Float64bits(v) != 0 {
		n += 9
	}
	if t != 0 {
		n += 1 + uvarintLen(uint64(t))
	}
	return n
}

func appendSample(dst []byte, v float64, t int64) []byte {
	n := sampleSize(v, t)
	dst = append(dst, tagTimeSeriesSamples)
	dst = binary.AppendUvarint(dst, uint64(n))
	if math.Float64bits(v) != 0 {
		dst = append(dst, tagSampleValue)
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
	}
	if t != 0 {
		dst = append(dst, tagSampleTimestamp)
		dst = binary.AppendUvarint(dst, uint64(t))
	}
	return dst
}

// appendWriteRequest appends items (grouped by group) and md to dst as a
// prometheus.WriteRequest.
func (b *shardBuffers) appendWriteRequest(dst []byte, items []item, md []prompb.MetricMetadata) ([]byte, error) {
	for _, s := range b.series {
		idx := b.order[s.start : s.start+s.n]
		first := &items[idx[0]]
		if !s.plain {
			var err error
			if dst, err = b.appendGenerated(dst, items, idx); err != nil {
				return nil, err
			}
			continue
		}
		// One pass over the labels: the series' size goes in front of its
		// body once the body is written, into a 2-byte slot that fits every
		// series below 16 KiB; others move their body.
		dst = append(dst, tagWriteRequestTimeseries, 0, 0)
		at := len(dst) - seriesSizeSlot
		dst = appendLabels(dst, first.lbls, b.external)
		for _, i := range idx {
			dst = appendSample(dst, items[i].v, items[i].t)
		}
		dst = putSize(dst, at, seriesSizeSlot)
	}
	for i := range md {
		var err error
		if dst, err = appendMessage(dst, tagWriteRequestMetadata, &md[i]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// appendGenerated appends one series with histograms or exemplars, built as
// a prompb.TimeSeries in b.ts (reused) and written by the generated code.
func (b *shardBuffers) appendGenerated(dst []byte, items []item, idx []int32) ([]byte, error) {
	ts := &b.ts
	first := &items[idx[0]]
	ts.Labels = ts.Labels[:0]
	withExternal(first.lbls, b.external, func(l labels.Label) {
		ts.Labels = append(ts.Labels, prompb.Label{Name: l.Name, Value: l.Value})
	})
	ts.Samples = ts.Samples[:0]
	ts.Histograms = ts.Histograms[:0]
	ts.Exemplars = ts.Exemplars[:0]
	for _, i := range idx {
		addToTimeSeries(ts, &items[i])
	}
	dst, err := appendMessage(dst, tagWriteRequestTimeseries, ts)
	clear(ts.Histograms) // let the histograms' spans and buckets be collected
	clear(ts.Exemplars)
	return dst, err
}

// generatedMessage is what gogo-protobuf generates for every message.
type generatedMessage interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// appendMessage appends m as a length-delimited field with tag.
func appendMessage(dst []byte, tag byte, m generatedMessage) ([]byte, error) {
	n := m.Size()
	dst = append(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = append(dst, make([]byte, n)...)
	if _, err := m.MarshalToSizedBuffer(dst[len(dst)-n:]); err != nil {
		return nil, err
	}
	return dst, nil
}

// addToTimeSeries appends one item to ts in the generated types' form.
func addToTimeSeries(ts *prompb.TimeSeries, it *item) {
	switch it.kind {
	case kindSample:
		ts.Samples = append(ts.Samples, prompb.Sample{Value: it.v, Timestamp: it.t})
	case kindHistogram:
		ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(it.t, it.x.h))
	case kindFloatHistogram:
		ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(it.t, it.x.fh))
	case kindExemplar:
		ts.Exemplars = append(ts.Exemplars, prompb.Exemplar{Labels: prompb.FromLabels(it.x.exLbls, nil), Value: it.v, Timestamp: it.t})
	}
}
