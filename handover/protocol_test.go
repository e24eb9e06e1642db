package handover

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/wal"
)

func jsonDecode(b []byte, v any) error { return json.Unmarshal(b, v) }

func TestTransferIsStoredDurablyWithItsEndAndAnnounced(t *testing.T) {
	src := t.TempDir()
	writeBacklog(t, src, 2000)
	body := encodeDir(t, src, testID)
	cl := newFakeCluster("receiver")
	s := newTestService(t, cl, Options{})
	code, a := post(t, s, body)
	if code != http.StatusOK || a.Status != "stored" || a.ID != testID {
		t.Fatalf("answer %d %+v, want 200 stored", code, a)
	}
	pend, err := s.store.Pending()
	if err != nil || len(pend) != 1 {
		t.Fatalf("pending %v %v, want one backlog", pend, err)
	}
	b := pend[0]
	want, err := wal.LastRecordEnd(filepath.Join(src, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	if b.End != want || b.Node != "leaver" || b.Seq != 3 {
		t.Errorf("stored backlog %+v, want end %v of leaver up to fence 3", b, want)
	}
	files, _ := listBacklog(src)
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(b.Dir, filepath.FromSlash(f.name)))
		if err != nil {
			t.Fatal(err)
		}
		orig, _ := os.ReadFile(filepath.Join(src, filepath.FromSlash(f.name)))
		if !bytes.Equal(got, orig) {
			t.Errorf("%s differs after the transfer", f.name)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(s.opts.Dir, "incoming")); len(ents) != 0 {
		t.Errorf("incoming/ keeps %d entries after the commit", len(ents))
	}
	key := cluster.CarryKey("leaver", msTime(1000))
	if cs := cl.Self().Carried; len(cs) != 1 || cs[0].Of != key || cs[0].Seq != 3 {
		t.Errorf("announced carries %v, want the leaver's backlog up to fence 3", cs)
	}
}

func TestTornTransferIsRejectedAndLeavesNothing(t *testing.T) {
	src := t.TempDir()
	writeBacklog(t, src, 2000)
	body := encodeDir(t, src, testID)
	s := newTestService(t, newFakeCluster("receiver"), Options{})
	for _, cut := range []int{0, 5, 8, 30, len(body) / 3, len(body) / 2, len(body) - 5, len(body) - 1} {
		code, a := post(t, s, body[:cut])
		if code != http.StatusBadRequest || a.Status != "error" {
			t.Errorf("cut at %d of %d: answer %d %+v, want 400", cut, len(body), code, a)
		}
		if cut > 8 && a.Reason != ReasonTorn {
			t.Errorf("cut at %d: reason %q, want %q", cut, a.Reason, ReasonTorn)
		}
		if pend, _ := s.store.Pending(); len(pend) != 0 {
			t.Fatalf("cut at %d: %d backlogs stored from a torn transfer", cut, len(pend))
		}
		if ents, _ := os.ReadDir(filepath.Join(s.opts.Dir, "incoming")); len(ents) != 0 {
			t.Fatalf("cut at %d: incoming/ keeps %d entries", cut, len(ents))
		}
	}
	// A flipped byte anywhere after the magic fails a checksum or a frame.
	bad := bytes.Clone(body)
	bad[len(bad)/2] ^= 0x40
	if code, _ := post(t, s, bad); code != http.StatusBadRequest {
		t.Errorf("corrupted transfer answered %d, want 400", code)
	}
	// Extra bytes after the end frame: not the transfer that was meant.
	if code, _ := post(t, s, append(bytes.Clone(body), 0)); code != http.StatusBadRequest {
		t.Errorf("transfer with trailing data answered %d, want 400", code)
	}
	if code, a := post(t, s, body); code != http.StatusOK || a.Status != "stored" {
		t.Fatalf("the intact transfer after the torn ones: %d %+v", code, a)
	}
}

func TestDuplicateTransferIsStoredOnce(t *testing.T) {
	src := t.TempDir()
	writeBacklog(t, src, 500)
	body := encodeDir(t, src, testID)
	s := newTestService(t, newFakeCluster("receiver"), Options{})
	if code, a := post(t, s, body); code != http.StatusOK || a.Status != "stored" {
		t.Fatalf("first: %d %+v", code, a)
	}
	if code, a := post(t, s, body); code != http.StatusOK || a.Status != "duplicate" {
		t.Fatalf("second: %d %+v, want 200 duplicate", code, a)
	}
	if pend, _ := s.store.Pending(); len(pend) != 1 {
		t.Fatalf("%d backlogs stored, want 1", len(pend))
	}
	// Delivered and removed: a late duplicate is still recognised.
	if err := s.store.Delivered(testID); err != nil {
		t.Fatal(err)
	}
	if code, a := post(t, s, body); code != http.StatusOK || a.Status != "duplicate" {
		t.Fatalf("after delivery: %d %+v, want 200 duplicate", code, a)
	}
	if pend, _ := s.store.Pending(); len(pend) != 0 {
		t.Fatalf("a delivered backlog was stored again")
	}
	// A duplicate that is torn is still refused.
	if code, _ := post(t, s, body[:len(body)-3]); code != http.StatusBadRequest {
		t.Errorf("torn duplicate answered %d, want 400", code)
	}
}

func TestVersionMismatchIsRefusedByName(t *testing.T) {
	src := t.TempDir()
	writeBacklog(t, src, 10)
	body := encodeDir(t, src, testID)
	body[len(magic)] = Version + 1
	_, err := Decode(bytes.NewReader(body), 1<<30, discard{})
	var ve VersionError
	if !errors.As(err, &ve) || ve.Got != Version+1 {
		t.Fatalf("Decode: %v, want a VersionError for %d", err, Version+1)
	}
	s := newTestService(t, newFakeCluster("receiver"), Options{})
	code, a := post(t, s, body)
	if code != http.StatusBadRequest || a.Reason != ReasonVersion {
		t.Fatalf("answer %d %+v, want 400 with reason %q", code, a, ReasonVersion)
	}
}

func TestTransferOverTheLimitIsRefusedBeforeReading(t *testing.T) {
	src := t.TempDir()
	writeBacklog(t, src, 2000)
	body := encodeDir(t, src, testID)
	s := newTestService(t, newFakeCluster("receiver"), Options{MaxBytes: 1000})
	code, a := post(t, s, body)
	if code != http.StatusRequestEntityTooLarge || a.Reason != ReasonTooLarge {
		t.Fatalf("answer %d %+v, want 413 too_large", code, a)
	}
}

func TestReceiverRestartDropsUnacknowledgedIncoming(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "handover")
	if err := os.MkdirAll(filepath.Join(dir, "incoming", testID, "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newTestService(t, newFakeCluster("receiver"), Options{Dir: dir})
	if ents, _ := os.ReadDir(filepath.Join(dir, "incoming")); len(ents) != 0 {
		t.Fatalf("a transfer cut off by a crash survived the restart")
	}
	if pend, _ := s.store.Pending(); len(pend) != 0 {
		t.Fatalf("a transfer cut off by a crash is pending")
	}
}

func TestPathsOutsideTheBacklogAreRefused(t *testing.T) {
	for _, p := range []string{"../x", "/etc/passwd", "wal/../../x", "wal", "other/x", "wal/./x", "wal/.hidden", "wal/a/b/c", "remotewrite/a b", ""} {
		if validPath(p) == nil {
			t.Errorf("validPath(%q) accepted", p)
		}
	}
	for _, p := range []string{"wal/00000001", "wal/checkpoint.00000002/00000000", "remotewrite/rcv.json", "remotewrite/rcv.acks", "wal/repairs.json"} {
		if err := validPath(p); err != nil {
			t.Errorf("validPath(%q): %v", p, err)
		}
	}
}

type discard struct{}

func (discard) Begin(Header) error { return nil }
func (discard) File(string, int64) (io.WriteCloser, error) {
	return nopCloser{io.Discard}, nil
}

// FuzzDecode: no input makes the decoder panic, and what it accepts adds
// up to what its header announced.
func FuzzDecode(f *testing.F) {
	src := f.TempDir()
	writeBacklog(f, src, 50)
	body := encodeDir(f, src, testID)
	f.Add(body)
	f.Add(body[:len(body)/2])
	f.Add([]byte(magic + "\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &countingSink{}
		h, err := Decode(bytes.NewReader(b), 1<<20, c)
		if err != nil {
			return
		}
		if c.files != h.Files || c.bytes != h.Bytes {
			t.Fatalf("accepted %d files of %d bytes, header says %d and %d", c.files, c.bytes, h.Files, h.Bytes)
		}
	})
}

type countingSink struct {
	files int
	bytes int64
}

func (c *countingSink) Begin(Header) error { return nil }
func (c *countingSink) File(name string, size int64) (io.WriteCloser, error) {
	if validPath(name) != nil {
		panic("invalid path passed to the sink: " + name)
	}
	c.files++
	return nopCloser{writerFunc(func(p []byte) (int, error) { c.bytes += int64(len(p)); return len(p), nil })}, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A receiver restarted with a backlog on disk reports it as carried and
// pending at once, before any gossip, so that placement holds its queues
// (placement.Backlogs.Carried) until the backlog is delivered.
func TestRestartedReceiverReportsStoredBacklogBeforeGossip(t *testing.T) {
	src := t.TempDir()
	writeBacklog(t, src, 50)
	dir := filepath.Join(t.TempDir(), "handover")
	first := newTestService(t, newFakeCluster("receiver"), Options{Dir: dir})
	if code, a := post(t, first, encodeDir(t, src, testID)); code != http.StatusOK {
		t.Fatalf("answer %d %+v", code, a)
	}
	again := newTestService(t, newFakeCluster("receiver"), Options{Dir: dir})
	tr := again.Tracker()
	carried := tr.Carried()
	if len(carried) != 1 || carried[0].Node != "leaver" || !carried[0].Start.Equal(msTime(1000)) || carried[0].Seq != 3 {
		t.Fatalf("carried after restart %+v, want the leaver's backlog up to fence 3", carried)
	}
	if !tr.Pending("leaver", msTime(1000), 3, true) {
		t.Fatal("a stored backlog is not pending before the first gossip")
	}
	if err := again.store.Delivered(testID); err != nil {
		t.Fatal(err)
	}
	if err := again.announce(); err != nil {
		t.Fatal(err)
	}
	tr.refresh(true) // the withdrawal gossiped
	if len(tr.Carried()) != 0 || tr.Pending("leaver", msTime(1000), 3, true) {
		t.Fatal("a delivered backlog is still carried or pending")
	}
}
