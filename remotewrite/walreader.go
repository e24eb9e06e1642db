package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"

	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// errNoSegments means the WAL directory holds no segment yet.
var errNoSegments = errors.New("WAL has no segments yet")

// walReader tails a tsdb/wlog directory from a given position. It is owned by
// one queue goroutine and is not safe for concurrent use.
//
// Unlike wlog.Watcher it never skips data: it starts at a saved position, and
// only records that end at or before that position are treated as already
// done (the caller still sees them, flagged not sendable, so that their series
// records are cached).
type walReader struct {
	dir    string
	logger *slog.Logger
	lrm    *wlog.LiveReaderMetrics

	// replayFn receives every record read only for its series and metadata:
	// checkpoint contents and segments before the start position. seg is the
	// segment (or checkpoint index) the record came from.
	replayFn func(rec []byte, seg int)
	// gcFn is called after the series of checkpoint cpIndex were re-read:
	// series last seen before cpIndex are gone from the WAL and can be dropped.
	gcFn func(cpIndex int)
	// skipFn is called when n segments were lost (deleted or unreadable)
	// before the reader got to them.
	skipFn func(n int)
	// errFn counts read and decode problems.
	errFn func()
	// live, when set, is the WAL writer's live segment (LocalWAL): whether
	// the writer has moved on is then a load, not a file system question.
	live func() int

	seg       int
	file      *wlog.Segment
	lr        *wlog.LiveReader
	sealed    bool  // a later segment exists: the next EOF is the end of seg
	skipUntil int64 // records of seg ending at or before this offset are done
	cpIndex   int   // index of the newest checkpoint whose series were read, -1 for none
	// fresh: the reader started without a saved position and is still in
	// its first segment. A truncation pass that chose its segments before
	// this queue existed may delete that segment; the queue then starts at
	// the oldest remaining one, which loses nothing it was promised.
	fresh bool
}

func newWALReader(dir string, logger *slog.Logger) *walReader {
	return &walReader{
		dir:      dir,
		logger:   logger,
		lrm:      wlog.NewLiveReaderMetrics(nil),
		cpIndex:  -1,
		replayFn: func([]byte, int) {},
		gcFn:     func(int) {},
		skipFn:   func(int) {},
		errFn:    func() {},
	}
}

// openAttempts bounds how often open starts over because a truncation pass
// changed the WAL under it. A pass runs about once a minute, so a second
// attempt practically always sees a settled WAL.
const openAttempts = 10

// testHookOpen, if set (tests only), is called inside open at the named
// stage: "checkpoint" once the newest checkpoint's series are read,
// "segments" once the segments are listed and before they are read.
var testHookOpen func(stage string)

// open prepares reading from start (or from the oldest data when found is
// false): it reads the series of the newest checkpoint and of every segment
// after it and before start. It returns the position reading really starts
// at, which differs from start when the WAL no longer has start's segment.
//
// A truncation pass may run meanwhile: it writes a new checkpoint, then
// deletes the segments (and the older checkpoint) it covers. A segment or a
// checkpoint that vanishes under the reader, or segments missing between
// the checkpoint read and the first segment, mean the view was torn; open
// then starts over, so that it never misses a series record that the new
// checkpoint holds.
func (r *walReader) open(ctx context.Context, start position, found bool) (position, error) {
	var err error
	for attempt := 1; ; attempt++ {
		var p position
		var torn bool
		p, torn, err = r.openOnce(ctx, start, found, attempt == openAttempts)
		if err != nil || !torn {
			return p, err
		}
		r.logger.Debug("WAL truncated while the remote-write queue was opening; reading series again", "attempt", attempt)
	}
}

// openOnce is one attempt of open. torn reports that a truncation pass
// changed the WAL during the attempt and it must be repeated; last says
// this is the final attempt, which then goes on with what it could read.
func (r *walReader) openOnce(ctx context.Context, start position, found, last bool) (_ position, torn bool, _ error) {
	r.closeSegment()
	r.cpIndex = -1
	cpErr := r.loadCheckpoint(ctx, false)
	if cpErr != nil && errors.Is(cpErr, fs.ErrNotExist) && !last {
		return position{}, true, nil // deleted by a newer pass while being read
	}
	if testHookOpen != nil {
		testHookOpen("checkpoint")
	}
	// List after reading the checkpoint: a pass writes its checkpoint
	// before it deletes segments, so a gap between the two shows here.
	first, lastSeg, err := wlog.Segments(r.dir)
	if err != nil {
		return position{}, false, fmt.Errorf("list WAL segments in %s: %w", r.dir, err)
	}
	if lastSeg < 0 {
		return position{}, false, errNoSegments
	}
	if cpErr != nil {
		r.errFn()
		r.logger.Warn("Could not read WAL checkpoint; series defined only there will be unknown", "err", cpErr)
	}
	if cpErr == nil && first > r.cpIndex+1 && !last {
		if _, idx, err := wlog.LastCheckpoint(r.dir); err == nil && idx > r.cpIndex {
			return position{}, true, nil // a newer checkpoint covers the gap
		}
	}
	// Segments covered by the checkpoint are about to be deleted (or could
	// be): their series that still matter are in the checkpoint.
	from := max(first, r.cpIndex+1)
	switch {
	case !found:
		// A new queue starts at the oldest data that no truncation pass
		// has already decided to delete.
		start = position{Segment: min(from, lastSeg)}
		r.fresh = true
	case start.Segment < first:
		r.logger.Warn("Saved remote-write position is in a segment the WAL already deleted; starting at the first segment, data in between is lost",
			"saved_segment", start.Segment, "first_segment", first)
		r.skipFn(first - start.Segment)
		start = position{Segment: first}
	case start.Segment > lastSeg:
		r.logger.Warn("Saved remote-write position is beyond the end of the WAL (was the WAL removed or repaired?); starting at the first segment",
			"saved_segment", start.Segment, "last_segment", lastSeg)
		start = position{Segment: first}
	}
	if testHookOpen != nil {
		testHookOpen("segments")
	}
	if start.Segment <= r.cpIndex {
		// Starting inside segments the checkpoint covers (a limit is
		// deleting them): their samples may refer to series the
		// checkpoint dropped, defined in the segments before.
		from = first
	}
	for s := from; s < start.Segment; s++ {
		if err := ctx.Err(); err != nil {
			return position{}, false, err
		}
		if err := r.replaySegment(ctx, r.dir, s, s); err != nil {
			if errors.Is(err, fs.ErrNotExist) && !last {
				return position{}, true, nil // deleted by a pass that checkpointed it
			}
			r.errFn()
			r.logger.Warn("Error reading series from WAL segment; series defined after the error are unknown", "segment", s, "err", err)
		}
	}
	r.closeSegment()
	r.seg = start.Segment
	r.skipUntil = start.Offset
	r.sealed = false
	return start, false, nil
}

// replaySegment feeds every record of one complete segment to replayFn.
func (r *walReader) replaySegment(ctx context.Context, dir string, idx, seg int) error {
	sf, err := wlog.OpenReadSegment(wlog.SegmentName(dir, idx))
	if err != nil {
		return err
	}
	defer sf.Close()
	lr := wlog.NewLiveReader(r.logger, r.lrm, sf)
	for lr.Next() {
		r.replayFn(lr.Record(), seg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := lr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// loadCheckpoint reads the series of the newest checkpoint if it is newer
// than the last one read. With gc set, it only does so once the reader is
// past the checkpoint's segments, and then lets the caller forget series the
// checkpoint no longer holds.
func (r *walReader) loadCheckpoint(ctx context.Context, gc bool) error {
	dir, idx, err := wlog.LastCheckpoint(r.dir)
	if errors.Is(err, record.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if idx <= r.cpIndex {
		return nil
	}
	// Series of segments we have not read yet may be missing from the
	// checkpoint while still referenced there: wait until we are past it.
	if gc && idx >= r.seg {
		return nil
	}
	first, last, err := wlog.Segments(dir)
	if err != nil {
		return fmt.Errorf("list checkpoint %s: %w", dir, err)
	}
	for s := first; s >= 0 && s <= last; s++ {
		if err := r.replaySegment(ctx, dir, s, idx); err != nil {
			return fmt.Errorf("read checkpoint %s: %w", dir, err)
		}
	}
	r.cpIndex = idx
	if gc {
		r.gcFn(idx)
	}
	return nil
}

// pos returns the position after the last record returned by next.
func (r *walReader) pos() position {
	off := r.skipUntil
	if r.lr != nil && r.lr.Offset() > off {
		off = r.lr.Offset()
	}
	return position{Segment: r.seg, Offset: off}
}

func (r *walReader) closeSegment() {
	if r.file != nil {
		r.file.Close()
	}
	r.file, r.lr = nil, nil
}

// advance moves to the start of segment s.
func (r *walReader) advance(ctx context.Context, s int) {
	r.closeSegment()
	r.seg, r.skipUntil, r.sealed = s, 0, false
	r.fresh = false
	if err := r.loadCheckpoint(ctx, true); err != nil {
		r.logger.Debug("Could not read new WAL checkpoint for series garbage collection", "err", err)
	}
}

func (r *walReader) openCurrent(ctx context.Context) error {
	first, last, err := wlog.Segments(r.dir)
	if err != nil {
		return fmt.Errorf("list WAL segments in %s: %w", r.dir, err)
	}
	if last < 0 {
		return errNoSegments
	}
	if r.seg < first {
		if r.fresh {
			r.logger.Debug("The segment a new queue started at was truncated; starting at the oldest remaining one",
				"from_segment", r.seg, "first_segment", first)
		} else {
			r.logger.Warn("WAL segments were deleted before remote write read them; data in them is lost",
				"from_segment", r.seg, "first_segment", first)
			r.skipFn(first - r.seg)
		}
		r.fresh = false
		r.seg, r.skipUntil, r.sealed = first, 0, false
		// The checkpoint holds the series of what was deleted.
		if err := r.loadCheckpoint(ctx, false); err != nil {
			r.errFn()
			r.logger.Warn("Could not read WAL checkpoint", "err", err)
		}
	}
	if r.seg > last {
		return fmt.Errorf("WAL segment %d does not exist yet (last is %d)", r.seg, last)
	}
	sf, err := wlog.OpenReadSegment(wlog.SegmentName(r.dir, r.seg))
	if err != nil {
		return err
	}
	r.file = sf
	r.lr = wlog.NewLiveReader(r.logger, r.lrm, sf)
	return nil
}

// next returns the next record and the segment it is in. sendable is false
// for records at or before the start position, which were sent before. A nil
// record with a nil error means the reader is at the end of the WAL for now.
func (r *walReader) next(ctx context.Context) (rec []byte, seg int, sendable bool, err error) {
	for {
		if r.lr == nil {
			if err := r.openCurrent(ctx); err != nil {
				return nil, 0, false, err
			}
		}
		if r.lr.Next() {
			return r.lr.Record(), r.seg, r.lr.Offset() > r.skipUntil, nil
		}
		lerr := r.lr.Err()
		if lerr != nil && !errors.Is(lerr, io.EOF) {
			r.errFn()
			if moved, serr := r.movedOn(); serr == nil && moved {
				// A complete segment is corrupt from here on: what follows is
				// unreadable for anyone. Move on rather than stall forever.
				r.logger.Error("Corrupt WAL segment; skipping the rest of it", "segment", r.seg, "offset", r.pos().Offset, "err", lerr)
				r.skipFn(1)
				r.advance(ctx, r.seg+1)
				continue
			}
			// The live segment: possibly a record caught mid-write. Re-read
			// from the start later, skipping what was already handled.
			p := r.pos()
			r.closeSegment()
			r.skipUntil = p.Offset
			return nil, 0, false, fmt.Errorf("read WAL segment %d at offset %d: %w", p.Segment, p.Offset, lerr)
		}
		if r.sealed {
			r.advance(ctx, r.seg+1)
			continue
		}
		moved, serr := r.movedOn()
		if serr != nil {
			return nil, 0, false, serr
		}
		if moved {
			// The writer has moved on, so seg is complete; read it to its end
			// once more (it may have grown since our EOF) and then advance.
			r.sealed = true
			continue
		}
		return nil, 0, false, nil
	}
}

func (r *walReader) close() { r.closeSegment() }

// movedOn reports whether the writer has started a segment after seg, which
// a queue asks on every commit it catches up with: the live segment when
// the WAL is in this process (a truncation pass that deleted seg under the
// reader is past it too). Otherwise, wlog numbering segments consecutively,
// whether segment seg+1 exists, unless a truncation pass deleted seg and
// what follows under the reader (seg is gone too: the listing says where
// the WAL starts). Listing the directory every time cost 6% of the CPU.
func (r *walReader) movedOn() (bool, error) {
	if r.live != nil {
		return r.live() > r.seg, nil
	}
	for _, s := range []int{r.seg + 1, r.seg} {
		_, err := os.Stat(wlog.SegmentName(r.dir, s))
		switch {
		case err == nil:
			return s > r.seg, nil
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("look for WAL segment %d in %s: %w", s, r.dir, err)
		}
	}
	_, last, err := wlog.Segments(r.dir)
	if err != nil {
		return false, fmt.Errorf("list WAL segments in %s: %w", r.dir, err)
	}
	return last > r.seg, nil
}
