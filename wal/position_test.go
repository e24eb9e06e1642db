package wal

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

func TestEndPositionCoversEveryCommit(t *testing.T) {
	dir := t.TempDir()
	w := openTest(t, dir, DefaultOptions(), nil)
	before, err := w.EndPosition()
	if err != nil {
		t.Fatal(err)
	}
	app := w.AppenderV2(context.Background())
	if _, err := app.Append(0, labels.FromStrings("__name__", "m"), 0, w.clock.Ms(), 1, nil, nil, storage.AOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	after, err := w.EndPosition()
	if err != nil {
		t.Fatal(err)
	}
	if !before.Less(after) || after.Less(before) {
		t.Fatalf("end did not move past the commit: %+v then %+v", before, after)
	}
	// The position is the segment file's length: a reader that stops there
	// has read the whole commit.
	fi, err := os.Stat(wlog.SegmentName(dir, after.Segment))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != after.Offset {
		t.Fatalf("end offset %d, segment file has %d bytes", after.Offset, fi.Size())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.EndPosition(); !errors.Is(err, ErrClosed) {
		t.Fatalf("EndPosition after Close: %v, want ErrClosed", err)
	}
}
