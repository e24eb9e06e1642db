package wal

import "fmt"

// Position is a place in the WAL: a segment number and a byte offset in it.
// Every record written before a Position ends at or before it.
type Position struct {
	Segment int
	Offset  int64
}

// Less reports whether p comes before o.
func (p Position) Less(o Position) bool {
	return p.Segment < o.Segment || (p.Segment == o.Segment && p.Offset < o.Offset)
}

// EndPosition returns the position just after the last record written so
// far: a record appended later starts at or after it. Hand-off uses it to
// name "everything committed before now" to the remote-write queues.
func (s *Storage) EndPosition() (Position, error) {
	// Commits hold commitMu while they write, so the end is not mid-commit.
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.closed {
		return Position{}, ErrClosed
	}
	if s.wal == nil {
		return Position{}, fmt.Errorf("wal: end position: %w", s.writeErr)
	}
	seg, off, err := s.wal.LastSegmentAndOffset()
	if err != nil {
		return Position{}, fmt.Errorf("wal: end position: %w", err)
	}
	return Position{Segment: seg, Offset: int64(off)}, nil
}
