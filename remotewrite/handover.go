package remotewrite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/prometheus/config"

	"github.com/shoal-dev/shoal/wal"
)

// Backlog hand-over support (package handover). A leaving node hands its
// WAL and progress files to a peer, which sends them with a Manager of its
// own over the copy (NewManager on the copy's directories): nothing here
// sends. What this file adds is the leaver's side of the bargain: once a
// peer has stored the backlog durably, the leaver's own progress must say
// "sent", or a StatefulSet replica that comes back with the same volume
// would send it a second time.

// QueueNames returns the queue name of every remote_write entry of cfg.
func QueueNames(cfg *config.Config) []string {
	if cfg == nil {
		return nil
	}
	out := make([]string, 0, len(cfg.RemoteWriteConfigs))
	for _, rw := range cfg.RemoteWriteConfigs {
		if rw != nil {
			out = append(out, QueueName(rw))
		}
	}
	return out
}

// MarkHandedOver records in progressDir that each named queue has
// everything before end settled: its progress file (written atomically)
// points at end and its acknowledgement journal is removed. walDir is the
// WAL end refers to (its repair generation is kept). Call it only while no
// Manager runs on progressDir.
func MarkHandedOver(walDir, progressDir string, names []string, end wal.Position) error {
	repairs, err := wal.ReadRepairs(walDir)
	if err != nil {
		return fmt.Errorf("reading the WAL repair record: %w", err)
	}
	for _, name := range names {
		path := filepath.Join(progressDir, name+".json")
		err := writeProgress(path, progressFile{
			Version:    progressVersion,
			Queue:      name,
			Segment:    end.Segment,
			Offset:     end.Offset,
			UpdatedAt:  time.Now().UTC(),
			WALRepairs: repairs.Generation,
		})
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if err := os.Remove(filepath.Join(progressDir, name+".acks")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
