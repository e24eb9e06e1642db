package wal

import (
	"fmt"
	"time"

	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"
)

// Defaults for Options. A zero (or negative) field in Options means "use the
// default", except MaxSize, where zero means no limit and negative is an error.
const (
	// DefaultSegmentSize is the size at which a segment is closed and the next one started.
	DefaultSegmentSize = wlog.DefaultSegmentSize
	// DefaultCompression compresses records with snappy: cheap and about halves the WAL.
	DefaultCompression = compression.Snappy
	// DefaultTruncateInterval is how often Run truncates the WAL and forgets idle series.
	DefaultTruncateInterval = time.Minute
	// DefaultMaxAge is how long a segment is kept for a reader that has not read it yet.
	DefaultMaxAge = 24 * time.Hour
	// DefaultSeriesGCAge is how long a series may go without a sample before it is forgotten.
	DefaultSeriesGCAge = time.Hour
	// DefaultRotateAfter is how old the live segment may get before a truncation pass
	// closes it, so that a quiet WAL can still be truncated.
	DefaultRotateAfter = time.Hour
)

// pageSize is wlog's page size; segment sizes must be a multiple of it.
const pageSize = 32 * 1024

// Options configure a Storage. The zero value is valid and means DefaultOptions().
type Options struct {
	// SegmentSize is the maximum size of a segment file in bytes. It must be a
	// multiple of 32KiB. Default DefaultSegmentSize (128MiB).
	SegmentSize int

	// Compression of records: compression.None, compression.Snappy or
	// compression.Zstd. Default snappy.
	Compression compression.Type

	// TruncateInterval is how often Run calls Truncate. Default 1m.
	TruncateInterval time.Duration

	// MaxAge bounds how long data waits for a slow or absent reader: a segment
	// whose newest sample is older than MaxAge is deleted at the next truncation
	// even if PendingSegment says a reader still needs it (counted in
	// shoal_wal_segments_dropped_unsent_total). Samples older than MaxAge are
	// rejected on append with storage.ErrOutOfBounds. Default 24h.
	MaxAge time.Duration

	// MaxSize bounds the WAL's disk use while a reader is behind: when the
	// segments a reader still needs, the live one and the newest checkpoint
	// take more than MaxSize bytes, the oldest of them are deleted at the
	// next truncation even if unsent (counted like MaxAge's). Checked every
	// TruncateInterval, so the WAL can exceed it by what is written in
	// between. Zero: no size limit. It must be at least two segments.
	MaxSize int64

	// SeriesGCAge: a series that has had no committed sample for this long is
	// forgotten at the next truncation. A later sample for the same labels
	// creates it again under a new ref (and a new series record). Default 1h;
	// keep it well above the longest scrape interval.
	SeriesGCAge time.Duration

	// RotateAfter: a truncation pass closes the live segment and starts the
	// next one when the live segment holds records and was started at least
	// this long ago, so that a WAL that fills segments slowly can still be
	// truncated and aged out. Default 1h, and never more than MaxAge/2.
	RotateAfter time.Duration

	// StoreStartTimestamps writes samples and histograms in the record
	// versions that carry the start timestamp (st) given to Append
	// (record.SamplesV2 and friends). Off by default: the start timestamp is
	// then dropped, and records are readable by older Prometheus code.
	StoreStartTimestamps bool

	// OnCommit, if set, is called after every commit that wrote records to the
	// WAL (remote write uses it to wake up). It is called without locks held,
	// from the committing goroutine, so it must be quick and must not block.
	OnCommit func()

	// PendingSegment, if set, reports the lowest segment that some reader
	// still needs. Truncation never deletes that segment or any later one
	// unless it is older than MaxAge. ok=false means no reader needs anything
	// (e.g. no remote_write configured): every segment but the live one may go.
	// A nil PendingSegment behaves like ok=false.
	PendingSegment func() (segment int, ok bool)

	// OnReplay, if set, is called by Open before it replays segment k of n,
	// so that readiness can say how far the replay is.
	OnReplay func(k, n int)
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	return Options{
		SegmentSize:      DefaultSegmentSize,
		Compression:      DefaultCompression,
		TruncateInterval: DefaultTruncateInterval,
		MaxAge:           DefaultMaxAge,
		SeriesGCAge:      DefaultSeriesGCAge,
		RotateAfter:      DefaultRotateAfter,
	}
}

// withDefaults fills in defaults and validates the result.
func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.SegmentSize <= 0 {
		o.SegmentSize = d.SegmentSize
	}
	if o.SegmentSize%pageSize != 0 {
		return o, fmt.Errorf("wal: segment size %d is not a multiple of %d bytes", o.SegmentSize, pageSize)
	}
	switch o.Compression {
	case "":
		o.Compression = d.Compression
	case compression.None, compression.Snappy, compression.Zstd:
	default:
		return o, fmt.Errorf("wal: unknown compression %q (want %q, %q or %q)", o.Compression, compression.None, compression.Snappy, compression.Zstd)
	}
	if o.TruncateInterval <= 0 {
		o.TruncateInterval = d.TruncateInterval
	}
	if o.MaxAge <= 0 {
		o.MaxAge = d.MaxAge
	}
	if o.MaxSize < 0 {
		return o, fmt.Errorf("wal: max size %d is negative (0 means no size limit)", o.MaxSize)
	}
	if o.MaxSize > 0 && o.MaxSize < 2*int64(o.SegmentSize) {
		return o, fmt.Errorf("wal: max size %d bytes is less than two segments of %d bytes (lower the segment size or raise the max size)", o.MaxSize, o.SegmentSize)
	}
	if o.SeriesGCAge <= 0 {
		o.SeriesGCAge = d.SeriesGCAge
	}
	if o.RotateAfter <= 0 {
		o.RotateAfter = d.RotateAfter
	}
	if o.RotateAfter > o.MaxAge/2 {
		o.RotateAfter = o.MaxAge / 2
	}
	return o, nil
}
