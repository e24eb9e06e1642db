package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesAndLeavesNoTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file: %v", len(entries), entries)
	}
	if err := Write(filepath.Join(dir, "missing", "x"), []byte("x")); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

// ReadJSON tells a missing file (not found, no error) from a damaged one
// (an error naming it), and reads back what Write wrote.
func TestReadJSONTellsMissingFromDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	var v struct{ N int }
	if found, err := ReadJSON(path, &v); found || err != nil {
		t.Fatalf("missing file: found %v, err %v", found, err)
	}
	if err := Write(path, []byte(`{"N": 7}`)); err != nil {
		t.Fatal(err)
	}
	if found, err := ReadJSON(path, &v); !found || err != nil || v.N != 7 {
		t.Fatalf("found %v, err %v, read %+v", found, err, v)
	}
	if err := Write(path, []byte(`{"N": `)); err != nil {
		t.Fatal(err)
	}
	if found, err := ReadJSON(path, &v); found || err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("damaged file: found %v, err %v", found, err)
	}
}
