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
// a position in a reused segment would skip new records; it compares its
// saved generation with this file's and re-reads from Segment instead.
const RepairsFile = "repairs.json"

// Repairs is the content of RepairsFile.
type Repairs struct {
	// Generation counts the repairs of this WAL.
	Generation int `json:"generation"`
	// Segment is the segment the last repair cut: everything before it is
	// as it was, everything from it on may be new.
	Segment int `json:"segment"`
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

// recordRepair bumps the generation and names the cut segment, atomically.
func recordRepair(dir string, segment int) error {
	r, err := ReadRepairs(dir)
	if err != nil {
		r = Repairs{} // an unreadable record only means the count restarts
	}
	r.Generation++
	r.Segment = segment
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, RepairsFile), b)
}
