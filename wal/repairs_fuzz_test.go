package wal

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadRepairs reads arbitrary bytes as the repair record: an error or a
// value, never a panic; an accepted value survives a repair being recorded
// on top of it (the generation goes up by one, the cut is the new one).
func FuzzReadRepairs(f *testing.F) {
	dir := f.TempDir()
	if err := recordRepair(dir, 4, 1234); err != nil {
		f.Fatal(err)
	}
	if err := recordRepair(dir, 6, 0); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, RepairsFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, s := range []string{
		"", "{", "null", "[1]", `{"generation":"x"}`, `{"generation":1e30}`,
		`{"generation":1,"segment":-3,"offset":-1}`, `{"offset":9223372036854775807}`,
		`{"generation":9223372036854775807}`,
	} {
		f.Add([]byte(s))
	}
	dir = f.TempDir() // one per worker process: runs follow each other in it
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, RepairsFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := ReadRepairs(dir)
		if err != nil {
			return
		}
		// A position at the cut is never past it.
		if _, _, past := r.Cut(r.Segment, r.Offset); past {
			t.Fatalf("%+v: its own cut counts as past it", r)
		}
		if err := recordRepair(dir, 9, 77); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRepairs(dir)
		if err != nil {
			t.Fatalf("reading back after recordRepair: %v", err)
		}
		if want := (Repairs{Generation: r.Generation + 1, Segment: 9, Offset: 77}); got != want {
			t.Fatalf("after recordRepair on %+v: %+v, want %+v", r, got, want)
		}
	})
}
