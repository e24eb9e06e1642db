package remotewrite

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/compression"
)

// shardBuffers are one shard's reusable buffers. Building and encoding a
// request then allocates nothing per sample: the TimeSeries slice, each
// series' label and sample slices, the protobuf bytes and the snappy output
// all keep their capacity from one request to the next. A shard index is used
// by one goroutine at a time (sendChunk waits for every shard), so there is no
// locking.
type shardBuffers struct {
	items []item // this shard's part of the chunk being sent
	req   prompb.WriteRequest
	index map[chunks.HeadSeriesRef]int
	proto []byte
	comp  compression.EncodeBuffer
}

func newShardBuffers() *shardBuffers {
	return &shardBuffers{index: map[chunks.HeadSeriesRef]int{}, comp: compression.NewSyncEncodeBuffer()}
}

// sendChunk spreads c over n shards by series ref (so that each series stays
// in order), sends every shard's part in requests of at most
// max_samples_per_send, and waits for all of them. ok is false when ctx ended
// before everything was acknowledged or dropped.
func (q *queue) sendChunk(ctx context.Context, c *chunk, n int) (ok, retried bool) {
	for len(q.shardBufs) < n {
		q.shardBufs = append(q.shardBufs, newShardBuffers())
	}
	bufs := q.shardBufs[:n]
	for _, it := range c.items {
		b := bufs[uint64(it.ref)%uint64(n)]
		b.items = append(b.items, it)
	}
	var (
		wg        sync.WaitGroup
		failed    atomic.Bool
		anyRetrid atomic.Bool
	)
	for i, b := range bufs {
		var md []prompb.MetricMetadata
		if i == 0 {
			md = c.metadata
		}
		if len(b.items) == 0 && len(md) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, r := q.runShard(ctx, b, md)
			if !ok {
				failed.Store(true)
			}
			if r {
				anyRetrid.Store(true)
			}
		}()
	}
	wg.Wait()
	for _, b := range bufs {
		clear(b.items) // drop references to labels and histograms already sent
		b.items = b.items[:0]
	}
	return !failed.Load(), anyRetrid.Load()
}

// runShard sends one shard's items in order.
func (q *queue) runShard(ctx context.Context, b *shardBuffers, md []prompb.MetricMetadata) (ok, retried bool) {
	items := b.items
	for len(items) > 0 || len(md) > 0 {
		k := min(len(items), q.s.maxPerSend)
		cnt := b.build(items[:k], md)
		items, md = items[k:], nil
		ok, r := q.sendRequest(ctx, b, cnt)
		retried = retried || r
		if !ok {
			return false, retried
		}
	}
	return true, retried
}

// build fills b.req with items grouped by series (one TimeSeries per series
// per request), reusing the slices of the previous request.
func (b *shardBuffers) build(items []item, md []prompb.MetricMetadata) counts {
	b.req.Metadata = md
	cnt := counts{metadata: len(md)}
	clear(b.index)
	all := b.req.Timeseries[:cap(b.req.Timeseries)]
	used := 0
	for _, it := range items {
		i, ok := b.index[it.ref]
		if !ok {
			i = used
			used++
			b.index[it.ref] = i
			if i == len(all) {
				all = append(all, prompb.TimeSeries{})
				all = all[:cap(all)]
			}
			ts := &all[i]
			ts.Labels = prompb.FromLabels(it.lbls, ts.Labels[:0])
			ts.Samples = ts.Samples[:0]
			ts.Histograms = ts.Histograms[:0]
			ts.Exemplars = ts.Exemplars[:0]
		}
		ts := &all[i]
		switch it.kind {
		case kindSample:
			ts.Samples = append(ts.Samples, prompb.Sample{Value: it.v, Timestamp: it.t})
			cnt.samples++
		case kindHistogram:
			ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(it.t, it.h))
			cnt.histograms++
		case kindFloatHistogram:
			ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(it.t, it.fh))
			cnt.histograms++
		case kindExemplar:
			ts.Exemplars = append(ts.Exemplars, prompb.Exemplar{Labels: prompb.FromLabels(it.exLbls, nil), Value: it.v, Timestamp: it.t})
			cnt.exemplars++
		}
		if it.kind != kindExemplar {
			cnt.maxT = max(cnt.maxT, it.t)
		}
	}
	b.req.Timeseries = all[:used]
	return cnt
}

// encode marshals and compresses b.req into b's reused buffers. The result
// is valid until the next encode on b.
func (b *shardBuffers) encode() ([]byte, error) {
	size := b.req.Size()
	if cap(b.proto) < size {
		b.proto = make([]byte, size)
	}
	n, err := b.req.MarshalToSizedBuffer(b.proto[:size])
	if err != nil {
		return nil, err
	}
	return compression.Encode(compression.Snappy, b.proto[size-n:size], b.comp)
}

// sendRequest sends one request, retrying recoverable errors (5xx, network
// errors, 429 when retry_on_http_429 is set) with exponential backoff until
// it succeeds or ctx ends. Other errors drop the request and count it as
// failed. ok is false only when ctx ended first.
func (q *queue) sendRequest(ctx context.Context, b *shardBuffers, cnt counts) (ok, retried bool) {
	raw, err := b.encode()
	if err != nil {
		q.countFailed(cnt)
		q.logger.Error("Cannot encode remote-write request; dropping it", "err", err)
		return true, false
	}
	backoff := q.s.minBackoff
	for attempt := 0; ; attempt++ {
		q.m.samplesTotal.Add(float64(cnt.samples))
		q.m.histogramsTotal.Add(float64(cnt.histograms))
		q.m.exemplarsTotal.Add(float64(cnt.exemplars))
		q.m.metadataTotal.Add(float64(cnt.metadata))
		q.m.bytesTotal.Add(float64(len(raw)))

		info := &responseInfo{}
		begin := time.Now()
		_, err := q.client.Store(context.WithValue(ctx, responseInfoKey{}, info), raw, attempt)
		q.m.sentBatchDuration.Observe(time.Since(begin).Seconds())
		if err == nil {
			if cnt.samples+cnt.histograms > 0 {
				q.m.highestSent.set(float64(cnt.maxT) / 1000)
			}
			return true, retried
		}
		if ctx.Err() != nil {
			return false, retried
		}
		var rerr remote.RecoverableError
		if !errors.As(err, &rerr) {
			q.countFailed(cnt)
			first, _, _ := strings.Cut(err.Error(), "\n")
			q.logger.Error("Remote write rejected a batch; dropping it",
				"status", info.status, "error", first,
				"samples", cnt.samples, "histograms", cnt.histograms, "exemplars", cnt.exemplars)
			return true, retried
		}
		retried = true
		q.m.samplesRetried.Add(float64(cnt.samples))
		q.m.histogramsRetried.Add(float64(cnt.histograms))
		q.m.exemplarsRetried.Add(float64(cnt.exemplars))
		q.m.metadataRetried.Add(float64(cnt.metadata))

		sleep := backoff
		if info.retryAfter > 0 {
			sleep = info.retryAfter
		}
		first, _, _ := strings.Cut(err.Error(), "\n")
		q.logger.Warn("Failed to send batch, retrying", "status", info.status, "err", first, "attempt", attempt+1, "backoff", sleep)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, retried
		case <-t.C:
		}
		backoff = min(max(sleep, q.s.minBackoff)*2, q.s.maxBackoff)
	}
}

func (q *queue) countFailed(cnt counts) {
	q.m.samplesFailed.Add(float64(cnt.samples))
	q.m.histogramsFailed.Add(float64(cnt.histograms))
	q.m.exemplarsFailed.Add(float64(cnt.exemplars))
	q.m.metadataFailed.Add(float64(cnt.metadata))
}

// responseInfo carries what the write client does not expose (the status
// code and Retry-After) from the transport back to sendRequest, through the
// request context.
type responseInfo struct {
	status     int
	retryAfter time.Duration
}

type responseInfoKey struct{}

// responseInfoTransport records status and Retry-After of each response.
type responseInfoTransport struct {
	next http.RoundTripper
}

func (t responseInfoTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if info, ok := req.Context().Value(responseInfoKey{}).(*responseInfo); ok {
		info.status = resp.StatusCode
		info.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return resp, nil
}

// parseRetryAfter understands both forms of the header: delay-seconds and an
// HTTP date. It returns 0 for anything else or a date in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
