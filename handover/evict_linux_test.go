package handover

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// evictFromPageCache writes the backlog under root to disk and drops it
// from the page cache, so that a benchmark reads it from the disk as a
// replica whose WAL no longer fits its memory does.
func evictFromPageCache(b *testing.B, root string) {
	b.Helper()
	files, err := listBacklog(root)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range files {
		fh, err := os.Open(filepath.Join(root, filepath.FromSlash(f.name)))
		if err != nil {
			b.Fatal(err)
		}
		err = fh.Sync()
		if err == nil {
			err = unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		fh.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}
