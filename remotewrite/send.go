package remotewrite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/compression"
)

// shardBuffers are one shard's reusable buffers. Building and encoding a
// request then allocates nothing per sample: the grouping of items by
// series, the protobuf bytes and the snappy output all keep their capacity
// from one request to the next. A shard index is used by one goroutine at a
// time (sendChunk waits for every shard), so there is no locking.
type shardBuffers struct {
	items []item // this shard's part of the chunk being sent

	// The request being built (see encode.go): its items and metadata, its
	// series, its items' indices series by series, the journal's entries.
	reqItems []item
	reqMeta  []prompb.MetricMetadata
	index    map[chunks.HeadSeriesRef]int32
	series   []reqSeries
	slot     []int32 // series of each item
	next     []int32 // scratch of the counting sort
	order    []int32
	entries  []pendingEntry
	ts       prompb.TimeSeries // scratch for a series with histograms or exemplars

	proto []byte
	comp  compression.EncodeBuffer
	v2    *v2Buffers // Remote-Write 2.0, created on first use

	// external is the labels the encoders add to every series that lacks
	// them: the queue's external labels where its cache has none.
	external []labels.Label
}

func newShardBuffers() *shardBuffers {
	return &shardBuffers{index: map[chunks.HeadSeriesRef]int32{}, comp: compression.NewSyncEncodeBuffer()}
}

// newBuffers returns shard buffers that encode this queue's series, with
// its external labels where the cache has none (newShardBuffers adds none).
func (q *queue) newBuffers() *shardBuffers {
	b := newShardBuffers()
	if q.encodeExternal() {
		b.external = q.s.external
	}
	return b
}

// sendChunk spreads c over n shards by series ref (so that each series stays
// in order), sends every shard's part in requests of at most
// max_samples_per_send, and waits for all of them. Items that were in flight
// when the process last stopped (item.group() != 0) go first, each original
// request alone. ok is false when ctx ended before everything was
// acknowledged or dropped.
func (q *queue) sendChunk(ctx context.Context, c *chunk, n int) (ok, retried bool) {
	for len(q.shardBufs) < max(n, 1) {
		q.shardBufs = append(q.shardBufs, q.newBuffers())
	}
	if ok, retried = q.sendUncertain(ctx, c); !ok {
		return false, retried
	}
	bufs := q.shardBufs[:n]
	if n == 1 && c.inFlight == 0 {
		// One shard (the usual steady state) sends the round as it is,
		// without a copy; runShard may reorder it, which is fine: the round
		// is done with once sent, and read again if not.
		bufs[0].items = c.items
	} else {
		for _, it := range c.items {
			if it.group() != 0 {
				continue
			}
			b := bufs[uint64(it.ref)%uint64(n)]
			b.items = append(b.items, it)
		}
	}
	var (
		wg        sync.WaitGroup
		failed    atomic.Bool
		anyRetrid atomic.Bool
	)
	anyRetrid.Store(retried)
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
			ok, r := q.runShard(ctx, b, md, c.end, false)
			if !ok {
				failed.Store(true)
			}
			if r {
				anyRetrid.Store(true)
			}
		}()
	}
	wg.Wait()
	if n == 1 && c.inFlight == 0 {
		bufs[0].items = nil // c's, which c.reset clears
	} else {
		for _, b := range bufs {
			clear(b.items) // drop references to labels and histograms already sent
			b.items = b.items[:0]
		}
	}
	return !failed.Load(), anyRetrid.Load()
}

// sendUncertain sends the items of requests that were in flight at the last
// crash, one original request at a time, so that a receiver refusing one as
// already applied never takes items that were never sent down with it.
func (q *queue) sendUncertain(ctx context.Context, c *chunk) (ok, retried bool) {
	groups := map[uint64][]item{}
	var order []uint64
	for _, it := range c.items {
		g := it.group()
		if g == 0 {
			continue
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], it)
	}
	b := q.shardBufs[0]
	for _, g := range order {
		b.items = append(b.items[:0], groups[g]...)
		ok, r := q.runShard(ctx, b, nil, c.end, true)
		retried = retried || r
		clear(b.items)
		b.items = b.items[:0]
		if !ok {
			return false, retried
		}
	}
	return true, retried
}

// runShard sends one shard's items in order. resend marks items that may
// already be at the receiver.
func (q *queue) runShard(ctx context.Context, b *shardBuffers, md []prompb.MetricMetadata, end position, resend bool) (ok, retried bool) {
	items := b.items
	sep := q.s.separateBy
	if sep != "" && !resend {
		// Group by the label's value; stable, so each series (which has one
		// value) keeps its order.
		slices.SortStableFunc(items, func(a, b item) int {
			return strings.Compare(q.labelValue(&a, sep), q.labelValue(&b, sep))
		})
	}
	for len(items) > 0 || len(md) > 0 {
		k := min(len(items), q.s.maxPerSend)
		switch {
		case resend:
			k = len(items) // one original request: never split what was one
		case sep != "" && k > 0:
			k = q.sameValueRun(items[:k], sep)
		}
		ok, r := q.send(ctx, b, items[:k], md, end, resend)
		items, md = items[k:], nil
		retried = retried || r
		if !ok {
			return false, retried
		}
	}
	return true, retried
}

// sameValueRun is how many leading items have the first item's value of label.
func (q *queue) sameValueRun(items []item, label string) int {
	v := q.labelValue(&items[0], label)
	for i := 1; i < len(items); i++ {
		if q.labelValue(&items[i], label) != v {
			return i
		}
	}
	return len(items)
}

// labelValue is the value of label in the labels it is sent with.
func (q *queue) labelValue(it *item, label string) string {
	if v := it.lbls.Get(label); v != "" || !q.encodeExternal() {
		return v
	}
	for _, l := range q.s.external {
		if l.Name == label {
			return l.Value
		}
	}
	return ""
}

// build prepares a Remote-Write 1.0 request of items (grouped by series:
// one TimeSeries per series per request) and md for encode.
func (b *shardBuffers) build(items []item, md []prompb.MetricMetadata) counts {
	cnt := b.group(items)
	cnt.metadata = len(md)
	b.reqItems, b.reqMeta = items, md
	return cnt
}

// encode marshals and compresses the request build prepared into b's reused
// buffers. The result is valid until the next encode on b.
func (b *shardBuffers) encode() ([]byte, error) {
	p, err := b.appendWriteRequest(b.proto[:0], b.reqItems, b.reqMeta)
	b.reqItems, b.reqMeta = nil, nil
	if err != nil {
		return nil, err
	}
	b.proto = p
	return compression.Encode(compression.Snappy, p, b.comp)
}

// Reasons of shoal_remotewrite_samples_dropped_total: what the receiver
// called bad data, or a request that could not be built.
const (
	dropBadRequest    = "bad_request"   // 400
	dropConflict      = "conflict"      // 409
	dropUnprocessable = "unprocessable" // 422
	dropTooLarge      = "too_large"     // 413 for a half of a request, or for one item
	dropEncode        = "encode_error"
)

// refusesAsPresent says whether a refusal for reason is how a receiver
// answers data it already has (out of order, duplicate): for a request that
// may have been applied before, it means delivered.
func refusesAsPresent(reason string) bool {
	return reason == dropBadRequest || reason == dropConflict || reason == dropUnprocessable
}

// send sends one request of items (and metadata) and settles it as the
// failure policy says (policy.go): retried until acknowledged, paused,
// dropped if the receiver calls it bad data, split in two once if it is too
// large (half marks a half: it is not split again). ok is false only when
// ctx ended first. resend marks a request that may already have been
// applied (in flight at the last crash): a refusal then means the receiver
// has it, and is counted as such rather than as failed.
func (q *queue) send(ctx context.Context, b *shardBuffers, items []item, md []prompb.MetricMetadata, end position, resend bool) (ok, retried bool) {
	return q.sendPart(ctx, b, items, md, end, resend, false)
}

func (q *queue) sendPart(ctx context.Context, b *shardBuffers, items []item, md []prompb.MetricMetadata, end position, resend, half bool) (ok, retried bool) {
	var (
		cnt counts
		raw []byte
		err error
	)
	if q.s.v2 {
		cnt = b.buildV2(items)
		raw, err = b.encodeV2()
	} else {
		cnt = b.build(items, md)
		raw, err = b.encode()
	}
	if err != nil {
		q.drop(cnt, dropEncode)
		q.logger.Error("Cannot encode remote-write request; dropping it", "err", err)
		return true, false
	}
	var id uint64
	if len(items) > 0 {
		if id, err = q.journal.intentEntries(b.entries, end); err != nil {
			q.journalErr(err)
		}
	}
	settle := func() {
		if err := q.journal.done(id); err != nil {
			q.journalErr(err)
		}
	}
	backoff := q.s.minBackoff
	maybeApplied := resend // an earlier attempt may have reached the receiver
	for attempt := 0; ; attempt++ {
		q.m.samplesTotal.Add(float64(cnt.samples))
		q.m.histogramsTotal.Add(float64(cnt.histograms))
		q.m.exemplarsTotal.Add(float64(cnt.exemplars))
		q.m.metadataTotal.Add(float64(cnt.metadata))
		q.m.bytesTotal.Add(float64(len(raw)))

		info := &responseInfo{}
		begin := time.Now()
		rs, err := q.client.Store(context.WithValue(ctx, responseInfoKey{}, info), raw, attempt)
		q.m.sentBatchDuration.Observe(time.Since(begin).Seconds())
		if err == nil {
			settle()
			if nw := notWritten(cnt, rs); q.s.v2 && nw.samples+nw.histograms+nw.exemplars > 0 {
				q.drop(nw, dropNotWritten)
				q.logger.Warn("Remote write acknowledged a request but did not write all of it",
					"samples_not_written", nw.samples, "histograms_not_written", nw.histograms, "exemplars_not_written", nw.exemplars)
			}
			if cnt.samples+cnt.histograms > 0 {
				q.m.highestSent.set(float64(cnt.maxT) / 1000)
			}
			if resend {
				q.m.resent.WithLabelValues(resendDelivered).Add(float64(cnt.samples + cnt.histograms))
			}
			q.recovered(attempt)
			return true, retried
		}
		if ctx.Err() != nil {
			return false, retried
		}
		first, _, _ := strings.Cut(err.Error(), "\n")
		act, reason := classifyFailure(info.status, q.opts.FailurePolicy)
		if info.status == 0 && info.noAnswer != "" {
			reason = info.noAnswer
		}
		switch {
		case act == actSplit && len(items) > 1 && !half:
			// Not applied (too large): send the halves, each on its own, in
			// order. The original is settled only after both: until then a
			// crash must leave its unsent items in flight, not acknowledged.
			q.logger.Warn("Remote write refused a request as too large; splitting it", "status", info.status, "items", len(items))
			h := len(items) / 2
			ok, r := q.sendPart(ctx, b, items[:h], md, end, resend, true)
			if !ok {
				return false, true
			}
			ok, r2 := q.sendPart(ctx, b, items[h:], nil, end, resend, true)
			if ok {
				settle()
			}
			return ok, retried || r || r2
		case act == actDrop || act == actSplit:
			settle()
			if maybeApplied && refusesAsPresent(reason) {
				// The receiver refuses what it already has (out of order or
				// duplicate): nothing new was in this request.
				q.m.resent.WithLabelValues(resendRefused).Add(float64(cnt.samples + cnt.histograms))
				q.logger.Warn("Remote write refused a re-sent request that may have been applied before the last stop; treating it as delivered",
					"status", info.status, "error", first, "samples", cnt.samples, "histograms", cnt.histograms)
				return true, retried
			}
			if q.s.v2 && rs.Confirmed {
				cnt = notWritten(cnt, rs) // a 2.0 receiver wrote the rest
			}
			q.drop(cnt, reason)
			q.logger.Error("Remote write refused a batch as bad data; dropping it",
				"status", info.status, "reason", reason, "error", first,
				"samples", cnt.samples, "histograms", cnt.histograms, "exemplars", cnt.exemplars)
			return true, retried
		}
		if info.status == 0 {
			maybeApplied = true // the request may have arrived before the connection broke
		}
		retried = true
		q.m.samplesRetried.Add(float64(cnt.samples))
		q.m.histogramsRetried.Add(float64(cnt.histograms))
		q.m.exemplarsRetried.Add(float64(cnt.exemplars))
		q.m.metadataRetried.Add(float64(cnt.metadata))
		if act == actPause {
			q.m.retries.WithLabelValues(strconv.Itoa(info.status)).Inc()
			if !q.pause(ctx, reason, info.status, first) {
				return false, retried
			}
			continue
		}
		q.m.retries.WithLabelValues(reason).Inc()

		sleep := backoff
		if info.retryAfter > 0 {
			sleep = info.retryAfter
		}
		q.failing(info.status, first, sleep)
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

// failing logs the first failure of a run; later retries only count.
func (q *queue) failing(status int, msg string, sleep time.Duration) {
	if q.failRun.Add(1) == 1 {
		q.logger.Warn("Remote write failed; retrying with backoff until it succeeds (further failures are counted in shoal_remotewrite_retries_total, not logged)",
			"status", status, "err", msg, "backoff", sleep)
	}
}

// recovered logs the end of a run of failures.
func (q *queue) recovered(attempt int) {
	if attempt == 0 && q.failRun.Load() == 0 {
		return
	}
	if n := q.failRun.Swap(0); n > 0 {
		q.logger.Info("Remote write succeeds again", "failed_attempts", n)
	}
}

func (q *queue) journalErr(err error) {
	q.m.pwErrs.Inc()
	if q.journalFailed.CompareAndSwap(false, true) {
		q.logger.Error("Cannot write the acknowledgement journal; a crash now may re-send acknowledged samples", "err", err)
	}
}

// drop counts a request the receiver called bad data.
func (q *queue) drop(cnt counts, reason string) {
	q.countFailed(cnt)
	q.m.sendDropped.WithLabelValues(reason).Add(float64(cnt.samples + cnt.histograms))
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
	noAnswer   string // why no answer came: one of the retryNo* reasons
}

// Reasons of shoal_remotewrite_retries_total when no HTTP answer came.
const (
	retryNoAnswerNetwork = "network" // connection refused, reset, closed
	retryNoAnswerTimeout = "timeout" // no answer within remote_timeout
	retryNoAnswerTLS     = "tls"     // handshake or certificate failure
)

// noAnswerReason tells a timeout and a TLS failure from other network errors.
func noAnswerReason(err error) string {
	var (
		ne   net.Error
		cve  *tls.CertificateVerificationError
		rhe  tls.RecordHeaderError
		alrt tls.AlertError
		uae  x509.UnknownAuthorityError
		hne  x509.HostnameError
		cie  x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return retryNoAnswerTimeout
	case errors.As(err, &cve) || errors.As(err, &rhe) || errors.As(err, &alrt) ||
		errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie):
		return retryNoAnswerTLS
	}
	return retryNoAnswerNetwork
}

type responseInfoKey struct{}

// responseInfoTransport records status and Retry-After of each response.
type responseInfoTransport struct {
	next http.RoundTripper
}

func (t responseInfoTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	info, ok := req.Context().Value(responseInfoKey{}).(*responseInfo)
	if err != nil {
		if ok {
			info.noAnswer = noAnswerReason(err)
		}
		return resp, err
	}
	if ok {
		info.status = resp.StatusCode
		info.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return resp, nil
}

// maxRetryAfter bounds the wait a Retry-After header can impose: a receiver
// asking for a day (or a value that overflows) would otherwise stall the
// queue that long after it has recovered.
const maxRetryAfter = 5 * time.Minute

// parseRetryAfter understands both forms of the header: delay-seconds and an
// HTTP date, at most maxRetryAfter. It returns 0 for anything else or a
// date in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	s, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err == nil && s < 0:
		return 0
	case err == nil && s > int64(maxRetryAfter/time.Second),
		errors.Is(err, strconv.ErrRange) && s > 0: // more digits than int64 holds
		return maxRetryAfter
	case err == nil:
		return time.Duration(s) * time.Second
	case errors.Is(err, strconv.ErrRange):
		return 0 // hugely negative
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}
