package remotewrite

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-dev/shoal/internal/atomicfile"
)

// progressVersion is the format version written into every progress file.
const progressVersion = 1

// position is a place in the WAL: a segment number and a byte offset inside
// it. A position means "every record that ends at or before Offset in Segment,
// and every record of an earlier segment, is done".
type position struct {
	Segment int
	Offset  int64
}

func (p position) less(o position) bool {
	return p.Segment < o.Segment || (p.Segment == o.Segment && p.Offset < o.Offset)
}

// progressFile is the JSON document stored in <progressDir>/<queue>.json.
type progressFile struct {
	Version int    `json:"version"`
	Queue   string `json:"queue"`
	// URL is informational (password redacted); the queue name is the identity.
	URL       string    `json:"url"`
	Segment   int       `json:"segment"`
	Offset    int64     `json:"offset"`
	UpdatedAt time.Time `json:"updated_at"`
	// WALRepairs is the WAL's repair generation (wal.Repairs) the position
	// refers to; a later repair may have reused the segment numbers.
	WALRepairs int `json:"wal_repairs"`
}

// readProgress loads a progress file. found is false (with no error) when the
// file does not exist.
func readProgress(path string) (pf progressFile, found bool, err error) {
	found, err = atomicfile.ReadJSON(path, &pf)
	if err != nil {
		return progressFile{}, false, fmt.Errorf("parse progress file: %w", err)
	}
	if !found {
		return progressFile{}, false, nil
	}
	if pf.Version != progressVersion {
		return progressFile{}, false, fmt.Errorf("progress file %s: unsupported version %d", path, pf.Version)
	}
	if pf.Segment < 0 || pf.Offset < 0 {
		return progressFile{}, false, fmt.Errorf("progress file %s: negative position %d/%d", path, pf.Segment, pf.Offset)
	}
	return pf, true, nil
}

func (pf progressFile) position() position { return position{Segment: pf.Segment, Offset: pf.Offset} }

// writeProgress replaces the progress file atomically: write a temp file in
// the same directory, fsync it, rename it over the old one, fsync the
// directory. A crash leaves either the old or the new content, never a mix.
func writeProgress(path string, pf progressFile) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(pf, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	return atomicfile.Write(path, b)
}
