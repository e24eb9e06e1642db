package receiver

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// appendCounters are the receiver's own ingestion counters. They see every
// Append the write handler makes, so they can tell which rejections happened
// while appending (the TSDB head metrics also include rejections found only at
// commit, when two requests raced on the same series).
type appendCounters struct {
	accepted    atomic.Uint64 // Append succeeded and the transaction committed
	histograms  atomic.Uint64 // of accepted, histogram samples
	rolledBack  atomic.Uint64 // Append succeeded but the transaction was rolled back
	outOfOrder  atomic.Uint64
	outOfBounds atomic.Uint64
	tooOld      atomic.Uint64
	duplicate   atomic.Uint64
	invalid     atomic.Uint64 // every other Append error (bad histogram, bad labels, ...)
}

// count classifies one Append error.
func (c *appendCounters) count(err error) {
	switch {
	case errors.Is(err, storage.ErrOutOfOrderSample):
		c.outOfOrder.Add(1)
	case errors.Is(err, storage.ErrOutOfBounds):
		c.outOfBounds.Add(1)
	case errors.Is(err, storage.ErrTooOldSample):
		c.tooOld.Add(1)
	case errors.Is(err, storage.ErrDuplicateSampleForTimestamp):
		c.duplicate.Add(1)
	default:
		c.invalid.Add(1)
	}
}

// countingAppendable hands out appenders that count what the write handler
// appends. The counters are only touched on Commit/Rollback and on errors, so
// the hot path costs two integer increments per sample.
type countingAppendable struct {
	next storage.AppendableV2
	c    *appendCounters
}

func (a countingAppendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	app := a.next.AppenderV2(ctx)
	ex, _ := app.(storage.ExemplarAppenderV2)
	return &countingAppender{AppenderV2: app, ex: ex, c: a.c}
}

type countingAppender struct {
	storage.AppenderV2
	ex storage.ExemplarAppenderV2 // nil if the wrapped appender has no exemplar support

	c          *appendCounters
	pending    uint64
	pendingHis uint64
}

var _ storage.ExemplarAppenderV2 = (*countingAppender)(nil)

func (a *countingAppender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AOptions) (storage.SeriesRef, error) {
	ref, err := a.AppenderV2.Append(ref, ls, st, t, v, h, fh, opts)
	// A partial error only concerns exemplars: the sample itself went in.
	if err != nil && !errors.Is(err, (*storage.AppendPartialError)(nil)) {
		a.c.count(err)
		return ref, err
	}
	a.pending++
	if h != nil || fh != nil {
		a.pendingHis++
	}
	return ref, err
}

func (a *countingAppender) AppendExemplars(ref storage.SeriesRef, ls labels.Labels, es []exemplar.Exemplar) (storage.SeriesRef, error) {
	if a.ex == nil {
		return ref, nil
	}
	return a.ex.AppendExemplars(ref, ls, es)
}

func (a *countingAppender) Commit() error {
	err := a.AppenderV2.Commit()
	if err != nil {
		// A failed commit rolls back, as documented on storage.AppenderTransaction.
		a.c.rolledBack.Add(a.pending)
	} else {
		a.c.accepted.Add(a.pending)
		a.c.histograms.Add(a.pendingHis)
	}
	a.pending, a.pendingHis = 0, 0
	return err
}

func (a *countingAppender) Rollback() error {
	err := a.AppenderV2.Rollback()
	a.c.rolledBack.Add(a.pending)
	a.pending, a.pendingHis = 0, 0
	return err
}
