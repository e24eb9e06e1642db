package wal

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/prometheus/tsdb/wlog"

	"github.com/shoal-dev/shoal/internal/promreg"
)

// errUnwritable is returned by Commit while the WAL cannot be written.
var errUnwritable = errors.New("wal: not writable since an earlier write failed; commit refused")

// reopenInterval is the least time between two attempts to reopen the WAL
// after a failed write; commits in between are refused at once.
const reopenInterval = time.Second

// A failed wlog write leaves the batch half in wlog's page buffer: a later
// write would flush it after whatever succeeded, and a record cut at a page
// boundary would be torn in the middle of the segment, which the next replay
// repairs by deleting every later segment. So after a failed write no
// commit reaches wlog until the WAL has been reopened: the old wlog is
// closed (which flushes the partial batch, possible once there is space),
// the segment is cut before a torn record exactly as Open repairs it
// (recorded for the remote-write readers), and writing goes on in a new
// segment. Everything committed before the failure stays as it was.

// writeFailedLocked enters the unwritable state after the write of a batch
// of n samples failed with err. commitMu must be held.
func (s *Storage) writeFailedLocked(err error, n int) {
	if s.writeErr == nil {
		s.writeErrSince = s.now()
		s.refusedSince = 0
		s.logger.Error("Writing to the WAL failed; refusing appends until it can be written again (is the disk full or read-only?). Data already in the WAL is kept",
			"dir", s.dir, "err", err)
	}
	s.writeErr = err
	s.lastReopen = s.now()
	s.refusedSince += n
	s.metrics.rejected.WithLabelValues(rejectUnwritable).Add(float64(n))
	s.unwritable.Store(true)
}

// refuseLocked counts a commit of n samples refused while unwritable and
// returns its error. commitMu must be held.
func (s *Storage) refuseLocked(n int) error {
	s.refusedSince += n
	s.metrics.rejected.WithLabelValues(rejectUnwritable).Add(float64(n))
	return fmt.Errorf("%w (%s): %w", errUnwritable, s.writeErrSince.Format(time.RFC3339), s.writeErr)
}

// tryReopen reopens the WAL after a failed write, at most once per
// reopenInterval. It skips its turn while a truncation pass runs (which
// holds truncMu, taken before commitMu everywhere).
func (s *Storage) tryReopen() {
	if !s.truncMu.TryLock() {
		return
	}
	defer s.truncMu.Unlock()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.closed || s.writeErr == nil {
		return
	}
	now := s.now()
	if now.Sub(s.lastReopen) < reopenInterval {
		return
	}
	s.lastReopen = now
	if err := s.reopenLocked(); err != nil {
		s.logger.Debug("The WAL is still not writable", "dir", s.dir, "err", err)
		return
	}
	s.metrics.reopens.Inc()
	s.logger.Info("The WAL is writable again; appends resume in a new segment",
		"dir", s.dir, "segment", s.curSeg, "unwritable_for", now.Sub(s.writeErrSince).Round(time.Millisecond),
		"samples_refused", s.refusedSince, "cause", s.writeErr)
	s.writeErr = nil
	s.unwritable.Store(false)
}

// reopenLocked closes the failed wlog, cuts a torn record of the failed
// batch away and opens a new segment. Both locks must be held.
func (s *Storage) reopenLocked() error {
	if s.wal != nil {
		// Flushes the rest of the failed batch; fails again while the disk
		// is still full, and can then be retried.
		if err := s.wal.Close(); err != nil {
			return fmt.Errorf("closing the segment of the failed write: %w", err)
		}
		s.wal = nil
	}
	_, last, err := wlog.Segments(s.dir)
	if err != nil {
		return fmt.Errorf("listing segments: %w", err)
	}
	var damage error
	for i := s.curSeg; i <= last && damage == nil; i++ {
		damage = checkSegment(s.dir, i)
	}
	// wlog registers its metrics before it creates the segment and keeps
	// them registered when that fails (no inode left): take them back, or
	// the next attempt would panic on a duplicate registration.
	wlogMetrics, _ := promreg.Register(s.reg) // an empty group cannot fail
	w, err := wlog.NewSize(s.logger, wlogMetrics.Registerer(), s.dir, s.opts.SegmentSize, s.opts.Compression)
	if err != nil {
		wlogMetrics.Unregister()
		return fmt.Errorf("opening a new segment: %w", err)
	}
	if damage != nil {
		var cerr *wlog.CorruptionErr
		if !errors.As(damage, &cerr) {
			_ = w.Close()
			wlogMetrics.Unregister()
			return damage
		}
		s.logger.Warn("Cutting the record torn by the failed write", "segment", cerr.Segment, "offset", cerr.Offset, "err", cerr.Err)
		if err := w.Repair(damage); err != nil {
			_ = w.Close()
			wlogMetrics.Unregister()
			return fmt.Errorf("cutting the torn record in segment %d: %w", cerr.Segment, err)
		}
		if err := recordRepair(s.dir, cerr.Segment, cerr.Offset); err != nil {
			_ = w.Close()
			wlogMetrics.Unregister()
			return fmt.Errorf("recording the cut of segment %d: %w", cerr.Segment, err)
		}
		s.metrics.corruptionsRepaired.Inc()
	}
	s.wal = w
	_, last, err = wlog.Segments(s.dir)
	if err != nil {
		return fmt.Errorf("listing segments: %w", err)
	}
	s.curSeg, s.curSegStart, s.curSegUsed, s.curSegBound = last, s.now(), false, 0
	s.liveSegment.Store(int64(last))
	return nil
}

// checkSegment reads segment i to its end and returns a *wlog.CorruptionErr
// at the first torn or corrupt record, or nil.
func checkSegment(dir string, i int) error {
	seg, err := wlog.OpenReadSegment(wlog.SegmentName(dir, i))
	if err != nil {
		return fmt.Errorf("open segment %d: %w", i, err)
	}
	defer seg.Close()
	r := wlog.NewReader(wlog.NewSegmentBufReader(seg))
	for r.Next() {
	}
	return r.Err()
}
