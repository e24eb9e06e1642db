package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/tsdb/fileutil"

	"github.com/shoal-dev/shoal/internal/atomicfile"
	"github.com/shoal-dev/shoal/wal"
)

// Store keeps received backlogs under <storage.path>/handover:
//
//	incoming/<id>/   a transfer being received (removed at start: torn)
//	<id>/            a complete transfer: meta.json, wal/, remotewrite/
//	done/<id>        a delivered transfer, so that a late duplicate is not stored again
//
// A transfer is acknowledged only once <id>/ exists: every file and
// directory of it fsynced, then renamed into place and the parent fsynced.
type Store struct {
	dir string

	mu       sync.Mutex
	inFlight map[string]bool // ids being received
}

// Backlog is one stored transfer.
type Backlog struct {
	Header
	Received time.Time `json:"received"`
	// End is the position after the last record of the stored WAL:
	// the backlog is delivered once every queue has acknowledged it.
	End wal.Position `json:"end"`
	// Dir is where it is stored (not in meta.json).
	Dir string `json:"-"`
}

const metaFile = "meta.json"

// OpenStore opens (creating) the store in dir and drops transfers a crash
// cut off while they were received: they were never acknowledged.
func OpenStore(dir string) (*Store, error) {
	for _, d := range []string{dir, filepath.Join(dir, "incoming"), filepath.Join(dir, "done")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "incoming")); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "incoming"), 0o755); err != nil {
		return nil, err
	}
	return &Store{dir: dir, inFlight: map[string]bool{}}, nil
}

// Pending lists the stored, undelivered backlogs, oldest first.
func (s *Store) Pending() ([]Backlog, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []Backlog
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		b, err := readBacklog(filepath.Join(s.dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Backlog) int { return a.Received.Compare(b.Received) })
	return out, nil
}

func readBacklog(dir string) (Backlog, error) {
	var b Backlog
	raw, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return b, err
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return b, fmt.Errorf("%s: %w", filepath.Join(dir, metaFile), err)
	}
	b.Dir = dir
	return b, nil
}

// known reports whether id is stored or was delivered.
func (s *Store) known(id string) bool {
	for _, p := range []string{filepath.Join(s.dir, id), filepath.Join(s.dir, "done", id)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// ErrInProgress is a transfer whose id is being received right now.
var ErrInProgress = errors.New("handover: a transfer with this id is being received")

// receive reads one transfer from r. admit is asked with the header
// before anything is written; duplicate reports a transfer already stored
// or delivered (its body is read and checked, nothing is written).
func (s *Store) receive(r io.Reader, maxBytes int64, admit func(Header) error) (b Backlog, duplicate bool, err error) {
	sink := &dirSink{s: s, admit: admit}
	h, err := Decode(r, maxBytes, sink)
	if sink.id != "" {
		defer s.release(sink.id)
	}
	if sink.tmp != "" && (err != nil || sink.dup) {
		os.RemoveAll(sink.tmp)
	}
	if err != nil {
		return Backlog{Header: h}, false, err
	}
	if sink.dup {
		return Backlog{Header: h}, true, nil
	}
	b, err = s.commit(h, sink.tmp)
	if err != nil {
		os.RemoveAll(sink.tmp)
	}
	return b, false, err
}

func (s *Store) release(id string) {
	s.mu.Lock()
	delete(s.inFlight, id)
	s.mu.Unlock()
}

// commit makes a received transfer durable and visible: fsync of every
// directory, meta.json, then the rename into place.
func (s *Store) commit(h Header, tmp string) (Backlog, error) {
	end, err := walEnd(filepath.Join(tmp, "wal"))
	if err != nil {
		return Backlog{}, fmt.Errorf("reading the received WAL: %w", err)
	}
	b := Backlog{Header: h, Received: time.Now().UTC(), End: end}
	raw, err := json.Marshal(b)
	if err != nil {
		return Backlog{}, err
	}
	if err := atomicfile.Write(filepath.Join(tmp, metaFile), raw); err != nil {
		return Backlog{}, err
	}
	for _, d := range []string{filepath.Join(tmp, "wal"), filepath.Join(tmp, "remotewrite"), tmp} {
		if err := syncDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Backlog{}, err
		}
	}
	final := filepath.Join(s.dir, h.ID)
	if err := fileutil.Rename(tmp, final); err != nil {
		return Backlog{}, err
	}
	b.Dir = final
	return b, nil
}

// Delivered records that the backlog was sent and removes it.
func (s *Store) Delivered(id string) error {
	if !validID(id) {
		return fmt.Errorf("handover: bad transfer id %q", id)
	}
	if err := atomicfile.Write(filepath.Join(s.dir, "done", id), nil); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(s.dir, id))
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// dirSink writes a transfer's files into a temporary directory.
type dirSink struct {
	s     *Store
	admit func(Header) error
	id    string
	tmp   string
	dup   bool
	dirs  map[string]bool
}

func (d *dirSink) Begin(h Header) error {
	d.s.mu.Lock()
	if d.s.inFlight[h.ID] {
		d.s.mu.Unlock()
		return ErrInProgress
	}
	d.s.inFlight[h.ID] = true
	d.s.mu.Unlock()
	d.id = h.ID
	if d.s.known(h.ID) {
		d.dup = true
		return nil
	}
	if d.admit != nil {
		if err := d.admit(h); err != nil {
			return err
		}
	}
	d.tmp = filepath.Join(d.s.dir, "incoming", h.ID)
	if err := os.RemoveAll(d.tmp); err != nil {
		return err
	}
	d.dirs = map[string]bool{}
	return os.MkdirAll(d.tmp, 0o755)
}

func (d *dirSink) File(name string, size int64) (io.WriteCloser, error) {
	if d.dup {
		return nopCloser{io.Discard}, nil
	}
	p := filepath.Join(d.tmp, filepath.FromSlash(name))
	if dir := filepath.Dir(p); !d.dirs[dir] {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		d.dirs[dir] = true
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return &syncFile{f: f, dirs: d.dirs}, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// syncFile fsyncs on close; the directories it lives in are fsynced at
// commit (checkpoint directories here, the others in commit).
type syncFile struct {
	f    *os.File
	dirs map[string]bool
}

func (s *syncFile) Write(p []byte) (int, error) { return s.f.Write(p) }

func (s *syncFile) Close() error {
	err := s.f.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err == nil && filepath.Base(filepath.Dir(filepath.Dir(s.f.Name()))) == "wal" {
		err = syncDir(filepath.Dir(s.f.Name())) // a checkpoint directory
	}
	return err
}

// walEnd is the position after the last record of a received WAL.
func walEnd(dir string) (wal.Position, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return wal.Position{}, nil
	}
	return wal.LastRecordEnd(dir)
}
