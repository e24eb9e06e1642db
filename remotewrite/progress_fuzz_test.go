package remotewrite

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzReadProgress reads arbitrary bytes as a progress file: an error, or a
// position that is valid and survives a write and a read unchanged.
func FuzzReadProgress(f *testing.F) {
	dir := f.TempDir()
	for i, pf := range []progressFile{
		{Version: progressVersion, Queue: "a1b2c3", URL: "http://rx:9090/api/v1/write", Segment: 7, Offset: 1 << 20, UpdatedAt: time.Date(2026, 11, 30, 12, 0, 0, 123, time.UTC), WALRepairs: 2},
		{Version: progressVersion, Queue: "q"},
	} {
		path := filepath.Join(dir, "seed"+string(rune('0'+i))+".json")
		if err := writeProgress(path, pf); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"", "{", "null", "[]", `{"version":2}`, `{"version":1,"segment":-1}`,
		`{"version":1,"offset":1e400}`, `{"version":1,"updated_at":"yesterday"}`,
		`{"version":1,"segment":3,"offset":9,"queue":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	// One directory per worker process: runs follow each other in it.
	path, out := filepath.Join(dir, "q.json"), filepath.Join(dir, "again.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		pf, found, err := readProgress(path)
		if err != nil {
			if found || pf != (progressFile{}) {
				t.Fatalf("error %v with a value %+v (found %v)", err, pf, found)
			}
			return
		}
		if !found || pf.Version != progressVersion || pf.Segment < 0 || pf.Offset < 0 {
			t.Fatalf("accepted an invalid progress file: %+v (found %v)", pf, found)
		}
		if err := writeProgress(out, pf); err != nil {
			t.Fatalf("writing back an accepted progress file %+v: %v", pf, err)
		}
		again, _, err := readProgress(out)
		if err != nil {
			t.Fatalf("reading back %+v: %v", pf, err)
		}
		if again.position() != pf.position() || again.WALRepairs != pf.WALRepairs || again.Queue != pf.Queue || !again.UpdatedAt.Equal(pf.UpdatedAt) {
			t.Fatalf("round trip: %+v, want %+v", again, pf)
		}
	})
}
