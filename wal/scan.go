package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/prometheus/tsdb/wlog"
)

// Scan reads the records of the segments in dir from position from up to
// and including segment to (to < 0: the last one) and calls fn with each
// record that ends after from and the position just after it. It reads a
// closed WAL or a copy of one (the backlog hand-over reads the range a
// leaving node has not sent); records of a WAL still written to may be
// missed at its end. fn must not keep rec.
func Scan(dir string, from Position, to int, fn func(rec []byte, end Position) error) error {
	first, last, err := wlog.Segments(dir)
	if err != nil {
		return fmt.Errorf("wal: list segments in %s: %w", dir, err)
	}
	if last < 0 {
		return nil
	}
	if to < 0 || to > last {
		to = last
	}
	lrm := wlog.NewLiveReaderMetrics(nil)
	for s := max(first, from.Segment); s <= to; s++ {
		if err := scanSegment(dir, s, from, lrm, fn); err != nil {
			return err
		}
	}
	return nil
}

func scanSegment(dir string, s int, from Position, lrm *wlog.LiveReaderMetrics, fn func([]byte, Position) error) error {
	sf, err := wlog.OpenReadSegment(wlog.SegmentName(dir, s))
	if err != nil {
		return err
	}
	defer sf.Close()
	lr := wlog.NewLiveReader(slog.New(slog.DiscardHandler), lrm, sf)
	for lr.Next() {
		end := Position{Segment: s, Offset: lr.Offset()}
		if !from.Less(end) {
			continue
		}
		if err := fn(lr.Record(), end); err != nil {
			return err
		}
	}
	if err := lr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("wal: segment %d: %w", s, err)
	}
	return nil
}

// LastRecordEnd returns the position just after the last record in dir's
// segments, scanning from the last segment backwards until one holds a
// record; the start of the first segment when none does.
func LastRecordEnd(dir string) (Position, error) {
	first, last, err := wlog.Segments(dir)
	if err != nil {
		return Position{}, fmt.Errorf("wal: list segments in %s: %w", dir, err)
	}
	if last < 0 {
		return Position{}, nil
	}
	lrm := wlog.NewLiveReaderMetrics(nil)
	for s := last; s >= first; s-- {
		var end Position
		found := false
		err := scanSegment(dir, s, Position{Segment: s}, lrm, func(_ []byte, e Position) error {
			end, found = e, true
			return nil
		})
		if err != nil {
			return Position{}, err
		}
		if found {
			return end, nil
		}
	}
	return Position{Segment: first}, nil
}
