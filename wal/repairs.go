package wal

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/shoal-dev/shoal/internal/atomicfile"
)

// RepairsFile is the name, inside the WAL directory, of the record of the
// last repair. wlog's Repair keeps the records before the damage, deletes
// every later segment and starts writing again at the next segment number, so
// segment numbers past the damage are reused for new data. A reader that saved
// a position past the cut would skip new records; it compares its saved
// generation with this file's and moves such a position back to the cut.
// A position at or before the cut is still exact: the records before the
// damage are rewritten at the same offsets.
const RepairsFile = "repairs.json"

// Repairs is the content of RepairsFile.
type Repairs struct {
	// Generation counts the repairs of this WAL.
	Generation int `json:"generation"`
	// Segment is the segment the last repair cut: everything before it is
	// as it was, everything after it may be new.
	Segment int `json:"segment"`
	// Offset is where the damage began in Segment: the records of Segment
	// that end before Offset were kept at the same offsets; nothing else of
	// Segment remains (the rest is padding). A record written before Offset
	// existed (0) means the whole of Segment counts as cut.
	Offset int64 `json:"offset"`
}

// Cut reports whether a reader position (segment, offset; "every record
// ending at or before offset is done") lies past the last repair's cut, and
// if so, the position to move back to: the cut, before which every record
// is as it was.
func (r Repairs) Cut(segment int, offset int64) (newSegment int, newOffset int64, past bool) {
	if segment < r.Segment || (segment == r.Segment && offset <= r.Offset) {
		return segment, offset, false
	}
	return r.Segment, r.Offset, true
}

// ReadRepairs reads dir's repair record; a WAL never repaired has the zero value.
func ReadRepairs(dir string) (Repairs, error) {
	var r Repairs
	b, err := os.ReadFile(filepath.Join(dir, RepairsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(b, &r)
	return r, err
}

// recordRepair bumps the generation and names the cut (segment and the
// offset of the damage), atomically.
func recordRepair(dir string, segment int, offset int64) error {
	r, err := ReadRepairs(dir)
	if err != nil {
		r = Repairs{} // an unreadable record only means the count restarts
	}
	r.Generation++
	r.Segment = segment
	r.Offset = offset
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, RepairsFile), b)
}
