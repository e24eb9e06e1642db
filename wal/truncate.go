package wal

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// Truncate runs one truncation pass now: it forgets idle series, starts a
// new segment if the live one is older than RotateAfter, and deletes the
// segments no reader needs any more (or that are older than MaxAge) after
// writing a checkpoint of the series still alive. Run calls it every
// TruncateInterval; tests and shutdown may call it directly.
func (s *Storage) Truncate() error {
	s.truncMu.Lock()
	defer s.truncMu.Unlock()
	s.commitMu.Lock()
	closed, writeErr := s.closed, s.writeErr
	s.commitMu.Unlock()
	if closed {
		return ErrClosed
	}
	if writeErr != nil {
		// Rotation would flush the failed batch and a checkpoint needs
		// space too; the next commit reopens the WAL first.
		return fmt.Errorf("wal: not truncating while the WAL cannot be written: %w", writeErr)
	}
	err := s.truncate(s.now())
	if err != nil {
		s.metrics.truncationFailures.Inc()
	}
	return err
}

func (s *Storage) truncate(now time.Time) error {
	s.gc(now)

	s.commitMu.Lock()
	if s.curSegUsed && now.Sub(s.curSegStart) >= s.opts.RotateAfter {
		seg, err := s.wal.NextSegment()
		if err != nil {
			s.commitMu.Unlock()
			return fmt.Errorf("wal: start next segment: %w", err)
		}
		s.curSeg, s.curSegStart, s.curSegUsed, s.curSegBound = seg, now, false, 0
		s.liveSegment.Store(int64(seg))
	}
	live := s.curSeg
	s.commitMu.Unlock()

	first, _, err := wlog.Segments(s.dir)
	if err != nil {
		return fmt.Errorf("wal: list segments: %w", err)
	}
	if first < 0 {
		return nil
	}

	// The lowest segment to keep: what the slowest reader still needs, and
	// never the live segment.
	keepFrom := live
	pending, needed := 0, false
	if s.opts.PendingSegment != nil {
		pending, needed = s.opts.PendingSegment()
	}
	if needed && pending < keepFrom {
		keepFrom = max(pending, first)
	}
	// Past MaxAge or MaxSize, segments go even if a reader still needs them.
	wanted := keepFrom
	cutoff := now.Add(-s.opts.MaxAge).UnixMilli()
	for keepFrom < live && s.segmentMaxT(keepFrom) < cutoff {
		keepFrom++
	}
	byAge := keepFrom
	if s.opts.MaxSize > 0 {
		keepFrom = s.fitSize(keepFrom, live)
	}
	s.noteUnsent(needed, pending, first, live, wanted, byAge, keepFrom)
	if keepFrom <= first {
		return nil
	}

	to := keepFrom - 1
	start := time.Now()
	// Samples are dropped from the checkpoint (mint = MaxInt64): every
	// reader has passed them, or they are past MaxAge.
	stats, err := wlog.Checkpoint(s.logger, s.wal, first, to, s.keepFunc(to), math.MaxInt64, s.opts.StoreStartTimestamps, false)
	if err != nil {
		s.metrics.checkpointFailures.Inc()
		return fmt.Errorf("wal: checkpoint segments %d-%d: %w", first, to, err)
	}
	if err := s.wal.Truncate(keepFrom); err != nil {
		return fmt.Errorf("wal: delete segments before %d: %w", keepFrom, err)
	}
	if err := wlog.DeleteCheckpoints(s.dir, to); err != nil {
		return fmt.Errorf("wal: delete old checkpoints: %w", err)
	}
	for ref, seg := range s.deleted {
		if seg <= to {
			delete(s.deleted, ref)
		}
	}
	s.deleted = shrink(s.deleted, &s.deletedPeak)
	s.commitMu.Lock()
	for seg := range s.segMaxT {
		if seg < keepFrom {
			delete(s.segMaxT, seg)
		}
	}
	s.commitMu.Unlock()
	s.metrics.truncations.Inc()
	s.logger.Info("WAL truncated", "deleted_segments", fmt.Sprintf("%d-%d", first, to),
		"checkpoint_series", stats.TotalSeries-stats.DroppedSeries, "duration", time.Since(start))
	return nil
}

// gc forgets series idle for SeriesGCAge. Their refs go to s.deleted with
// the live segment: every record about them is in that segment or earlier,
// so the checkpoint must keep their series record until truncation is past it.
func (s *Storage) gc(now time.Time) {
	victims := s.series.gc(now.Add(-s.opts.SeriesGCAge).UnixMilli())
	if len(victims) == 0 {
		return
	}
	s.commitMu.Lock()
	for _, ms := range victims {
		if ms.logged {
			s.deleted[ms.ref] = s.curSeg
		}
	}
	s.commitMu.Unlock()
	s.deletedPeak = max(s.deletedPeak, len(s.deleted))
	s.numSeries.Add(-int64(len(victims)))
	s.metrics.seriesGC.Add(float64(len(victims)))
	s.logger.Debug("forgot idle series", "count", len(victims))
}

// keepFunc decides which series records a checkpoint up to segment to keeps.
func (s *Storage) keepFunc(to int) func(chunks.HeadSeriesRef) bool {
	maxRef := chunks.HeadSeriesRef(s.maxLoggedRef.Load())
	return func(ref chunks.HeadSeriesRef) bool {
		if s.series.getByRef(ref) != nil {
			return true // alive
		}
		if seg, ok := s.deleted[ref]; ok && seg > to {
			return true // forgotten, but a kept segment may still refer to it
		}
		// The highest ref ever written stays, so that after a restart new
		// refs start above every ref a reader may have seen.
		return ref == maxRef
	}
}

// segmentMaxT is the newest sample timestamp in segment i: tracked on write
// and replay, else the file's modification time.
func (s *Storage) segmentMaxT(i int) int64 {
	s.commitMu.Lock()
	t, ok := s.segMaxT[i]
	s.commitMu.Unlock()
	if ok {
		return t
	}
	fi, err := os.Stat(wlog.SegmentName(s.dir, i))
	if err != nil {
		return math.MaxInt64 // unknown: keep it
	}
	return fi.ModTime().UnixMilli()
}

// fitSize returns the lowest segment to keep, from keepFrom on, so that the
// segments from it to live and the newest checkpoint fit in MaxSize. The
// live segment always stays.
func (s *Storage) fitSize(keepFrom, live int) int {
	sizes := make([]int64, live-keepFrom+1)
	var total int64
	for i := range sizes {
		if fi, err := os.Stat(wlog.SegmentName(s.dir, keepFrom+i)); err == nil {
			sizes[i] = fi.Size()
			total += sizes[i]
		}
	}
	if cp, _, err := wlog.LastCheckpoint(s.dir); err == nil {
		total += dirBytes(cp)
	}
	for i := 0; keepFrom < live && total > s.opts.MaxSize; i++ {
		total -= sizes[i]
		keepFrom++
	}
	return keepFrom
}

// dirBytes is the size of the files in dir (0 on error).
func dirBytes(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}

// noteUnsent counts and logs the segments a pass deletes although a reader
// still needs them (pending up to keepFrom-1): byAge of them were past
// MaxAge, the rest over MaxSize (wanted is where the pass would start
// without the limits). A warning opens an episode; later passes of the
// same episode log at debug level, and the episode ends, with one info
// line, once every reader has reached the live segment.
func (s *Storage) noteUnsent(needed bool, pending, first, live, wanted, byAge, keepFrom int) {
	from := max(pending, first)
	n := keepFrom - from
	if !needed || n <= 0 {
		if s.unsent.active && (!needed || pending >= live) {
			s.logger.Info("remote write caught up; WAL limits no longer drop data",
				"segments_dropped", s.unsent.segments, "bytes_dropped", s.unsent.bytes, "since", s.unsent.since)
			s.unsent = unsentEpisode{}
		}
		return
	}
	var bytes int64
	for i := from; i < keepFrom; i++ {
		if fi, err := os.Stat(wlog.SegmentName(s.dir, i)); err == nil {
			bytes += fi.Size()
		}
	}
	s.metrics.droppedUnsent.Add(float64(n))
	s.metrics.droppedUnsentBytes.Add(float64(bytes))
	reason := "max_age"
	switch {
	case byAge <= wanted:
		reason = "max_size"
	case keepFrom > byAge:
		reason = "max_age and max_size"
	}
	args := []any{"segments", n, "first", from, "last", keepFrom - 1, "bytes", bytes, "reason", reason,
		"max_age", s.opts.MaxAge, "max_size", s.opts.MaxSize}
	if s.unsent.active {
		s.logger.Debug("deleting more unsent WAL segments", args...)
	} else {
		s.logger.Warn("deleting WAL segments a reader has not sent, to stay within the WAL's limits (--storage.wal.max-age, --storage.wal.max-size); "+
			"further deletions are logged at debug level until the reader catches up", args...)
		s.unsent = unsentEpisode{active: true, since: s.now()}
	}
	s.unsent.segments += n
	s.unsent.bytes += bytes
}

// unsentEpisode is a stretch of truncation passes that delete unsent data.
type unsentEpisode struct {
	active   bool
	since    time.Time
	segments int
	bytes    int64
}
