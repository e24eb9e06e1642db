package remotewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/shoal-dev/shoal/internal/atomicfile"
	"github.com/shoal-dev/shoal/wal"
)

// The acknowledgement journal makes a restart exact. The progress file is
// written at most once a second (it costs an fsync and a rename); the
// journal records, between two progress writes, every request the queue sent
// ("intent", written before the request leaves) and every request whose fate
// is settled ("done": acknowledged or deliberately dropped). Each entry of an
// intent is a series ref and the highest timestamp the request carries for
// it. After a crash the queue re-reads the WAL from the saved position and
//
//   - skips every item at or below its series' highest timestamp in a done
//     request: the receiver has it (or judged it bad);
//   - sends the items of an intent without "done" (the request was in flight;
//     the receiver may or may not have applied it) alone, one request per
//     original request, never mixed with items that were never sent: a
//     receiver that refuses a re-sent batch as out of order then refuses only
//     what it already has, and no new sample is lost with it;
//   - sends everything else as usual.
//
// Records are appended with one write(2) each and not fsynced: like the WAL
// itself (see the wal package's fsync policy), they survive a process crash
// (SIGKILL, OOM kill, panic) but not necessarily a machine crash. The file is
// truncated each time the progress file moves: everything it recorded lies
// before the new position.
//
// Format: records of [4-byte little-endian payload length][4-byte CRC-32C of
// the payload][payload]. Payloads start with a type byte:
//
//	0 header: version, segment, offset, wal_repairs (uvarints): the
//	  position (and WAL repair generation) the journal starts at
//	1 intent: id, end segment, end offset (uvarints; the round's end), n,
//	  then n × (ref uvarint, exemplar byte, max timestamp varint)
//	2 done: id
//
// A torn or corrupt record ends the journal (a crash mid-append).
const (
	journalVersion = 1

	recHeader byte = 0
	recIntent byte = 1
	recDone   byte = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// wmKey names a series timeline in the journal: samples and histograms of a
// series share one (a receiver orders them together), exemplars have their own.
type wmKey struct {
	ref chunks.HeadSeriesRef
	ex  bool
}

// pendingReq is the part of an unsettled request that covers one series.
type pendingReq struct {
	id   uint64
	maxT int64
}

// recovery is what a journal says about the data after its base position.
type recovery struct {
	acked   map[wmKey]int64      // highest settled timestamp per series
	pending map[wmKey]pendingReq // in flight at the crash, not settled since
	end     position             // the furthest round end recorded
}

// classify says what to do with an item read during recovery: skip it
// (settled before the crash), send it alone in group id (maybe applied), or
// send it as new (group 0).
func (r *recovery) classify(ref chunks.HeadSeriesRef, ex bool, t int64) (skip bool, group uint64) {
	k := wmKey{ref, ex}
	if wm, ok := r.acked[k]; ok && t <= wm {
		return true, 0
	}
	if p, ok := r.pending[k]; ok && t <= p.maxT {
		return false, p.id
	}
	return false, 0
}

// journal is one queue's acknowledgement journal. Shards append concurrently.
type journal struct {
	path string
	// lastRepair is the WAL's last repair: a journal written in the
	// generation before it is still exact if everything it covers lies
	// before the cut (a torn tail: the queue never read past it).
	lastRepair wal.Repairs
	// carry is the whole records after the header that load found, written
	// again by open when it keeps them: without a torn tail, and under the
	// current repair generation.
	carry []byte

	mtx    sync.Mutex
	f      *os.File
	buf    []byte
	rec    []byte
	nextID uint64
}

func newJournal(path string) *journal { return &journal{path: path} }

// load reads the journal if it starts at base (and the WAL repair generation
// matches). It returns nil when there is nothing to recover.
func (j *journal) load(base position, repairs int) (*recovery, error) {
	b, err := os.ReadFile(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type intent struct {
		entries []pendingEntry
		end     position
	}
	var (
		intents = map[uint64]intent{}
		order   []uint64
		done    = map[uint64]bool{}
		first   = true
		stale   bool // written in the repair generation before the last
		all     = b
		hdrEnd  int
		valid   int // length of the whole records read
	)
	j.carry = nil
	for len(b) >= 8 {
		n := binary.LittleEndian.Uint32(b)
		sum := binary.LittleEndian.Uint32(b[4:])
		if uint64(len(b)-8) < uint64(n) {
			break // torn tail
		}
		p := b[8 : 8+n]
		b = b[8+n:]
		if crc32.Checksum(p, castagnoli) != sum || len(p) == 0 {
			break
		}
		d := decbuf{b: p[1:]}
		switch typ := p[0]; {
		case first && typ == recHeader:
			first = false
			v, seg, off, rep := d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
			if d.err != nil || v != journalVersion {
				return nil, fmt.Errorf("journal %s: bad header", j.path)
			}
			if (position{Segment: int(seg), Offset: int64(off)}) != base {
				return nil, nil // written for another position: obsolete
			}
			if int(rep) != repairs {
				if int(rep)+1 != repairs || j.lastRepair.Generation != repairs {
					return nil, nil
				}
				stale = true
			}
			hdrEnd = len(all) - len(b)
		case first:
			return nil, fmt.Errorf("journal %s: no header", j.path)
		case typ == recIntent:
			id := d.uvarint()
			end := position{Segment: int(d.uvarint()), Offset: int64(d.uvarint())}
			cnt := d.uvarint()
			if d.err != nil || cnt > uint64(len(p)) {
				return nil, fmt.Errorf("journal %s: bad intent record", j.path)
			}
			es := make([]pendingEntry, 0, cnt)
			for range cnt {
				e := pendingEntry{key: wmKey{ref: chunks.HeadSeriesRef(d.uvarint())}}
				e.key.ex = d.byte() == 1
				e.maxT = d.varint()
				es = append(es, e)
			}
			if d.err != nil {
				return nil, fmt.Errorf("journal %s: bad intent record", j.path)
			}
			intents[id] = intent{entries: es, end: end}
			order = append(order, id)
		case typ == recDone:
			id := d.uvarint()
			if d.err != nil {
				return nil, fmt.Errorf("journal %s: bad done record", j.path)
			}
			done[id] = true
		}
		valid = len(all) - len(b)
	}
	if first {
		return nil, nil
	}
	if stale {
		for _, in := range intents {
			if _, _, past := j.lastRepair.Cut(in.end.Segment, in.end.Offset); past {
				return nil, nil // covers data the repair may have replaced
			}
		}
	}
	r := &recovery{acked: map[wmKey]int64{}, pending: map[wmKey]pendingReq{}, end: base}
	for _, id := range order {
		in := intents[id]
		if r.end.less(in.end) {
			r.end = in.end
		}
		for _, e := range in.entries {
			if done[id] {
				if wm, ok := r.acked[e.key]; !ok || e.maxT > wm {
					r.acked[e.key] = e.maxT
				}
				continue
			}
			if p, ok := r.pending[e.key]; !ok || e.maxT > p.maxT {
				r.pending[e.key] = pendingReq{id: id, maxT: e.maxT}
			}
		}
	}
	if len(r.acked) == 0 && len(r.pending) == 0 {
		return nil, nil
	}
	j.carry = append([]byte(nil), all[hdrEnd:valid]...)
	return r, nil
}

// pendingEntry is one series timeline of an intent record and the highest
// timestamp the request carries for it.
type pendingEntry struct {
	key  wmKey
	maxT int64
}

// open starts appending. With keep the existing records stay (a recovery is
// in progress and still needs them); otherwise the journal starts afresh at base.
func (j *journal) open(base position, repairs int, keep bool, idBase uint64) error {
	j.mtx.Lock()
	defer j.mtx.Unlock()
	j.closeLocked()
	j.nextID = idBase
	if err := os.MkdirAll(filepath.Dir(j.path), 0o755); err != nil {
		return err
	}
	if keep {
		// Rewrite what load kept under a current header, dropping a torn
		// tail: records appended after one would never be read again.
		p := j.headerPayload(base, repairs)
		rec := appendFrame(nil, p)
		rec = append(rec, j.carry...)
		j.carry = nil
		if err := atomicfile.Write(j.path, rec); err != nil {
			return err
		}
		f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		j.f = f
		return nil
	}
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	j.f = f
	return j.headerLocked(base, repairs)
}

// reset drops every record and starts again at base: called after the
// progress file moved to base.
func (j *journal) reset(base position, repairs int) error {
	j.mtx.Lock()
	defer j.mtx.Unlock()
	if j.f == nil {
		return nil
	}
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	if _, err := j.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return j.headerLocked(base, repairs)
}

func (j *journal) headerLocked(base position, repairs int) error {
	return j.appendLocked(j.headerPayload(base, repairs))
}

func (j *journal) headerPayload(base position, repairs int) []byte {
	p := append(j.buf[:0], recHeader)
	p = binary.AppendUvarint(p, journalVersion)
	p = binary.AppendUvarint(p, uint64(base.Segment))
	p = binary.AppendUvarint(p, uint64(base.Offset))
	p = binary.AppendUvarint(p, uint64(repairs))
	j.buf = p
	return p
}

// intent records that a request carrying items is about to be sent, as part
// of a round ending at end, and returns its id.
func (j *journal) intent(items []item, end position) (uint64, error) {
	maxT := map[wmKey]int64{}
	for _, it := range items {
		k := wmKey{it.ref, it.kind == kindExemplar}
		if t, ok := maxT[k]; !ok || it.t > t {
			maxT[k] = it.t
		}
	}
	entries := make([]pendingEntry, 0, len(maxT))
	for k, t := range maxT {
		entries = append(entries, pendingEntry{key: k, maxT: t})
	}
	return j.intentEntries(entries, end)
}

// intentEntries is intent for a request whose timelines the caller has
// already summed up (shardBuffers.build does while grouping by series), so
// that the send path hashes each item once, not twice.
func (j *journal) intentEntries(entries []pendingEntry, end position) (uint64, error) {
	j.mtx.Lock()
	defer j.mtx.Unlock()
	if j.f == nil {
		return 0, nil
	}
	j.nextID++
	id := j.nextID
	p := append(j.buf[:0], recIntent)
	p = binary.AppendUvarint(p, id)
	p = binary.AppendUvarint(p, uint64(end.Segment))
	p = binary.AppendUvarint(p, uint64(end.Offset))
	p = binary.AppendUvarint(p, uint64(len(entries)))
	for _, e := range entries {
		p = binary.AppendUvarint(p, uint64(e.key.ref))
		ex := byte(0)
		if e.key.ex {
			ex = 1
		}
		p = append(p, ex)
		p = binary.AppendVarint(p, e.maxT)
	}
	j.buf = p
	return id, j.appendLocked(p)
}

// done records that request id is settled.
func (j *journal) done(id uint64) error {
	j.mtx.Lock()
	defer j.mtx.Unlock()
	if j.f == nil || id == 0 {
		return nil
	}
	p := append(j.buf[:0], recDone)
	p = binary.AppendUvarint(p, id)
	j.buf = p
	return j.appendLocked(p)
}

// appendLocked writes one framed record with a single write call, so that a
// crash leaves it whole or torn at the tail, never interleaved.
func (j *journal) appendLocked(p []byte) error {
	j.rec = appendFrame(j.rec[:0], p)
	_, err := j.f.Write(j.rec)
	return err
}

// appendFrame appends payload p, framed as a journal record, to dst.
func appendFrame(dst, p []byte) []byte {
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	n := len(dst)
	binary.LittleEndian.PutUint32(dst[n-8:], uint32(len(p)))
	binary.LittleEndian.PutUint32(dst[n-4:], crc32.Checksum(p, castagnoli))
	return append(dst, p...)
}

func (j *journal) close() {
	j.mtx.Lock()
	defer j.mtx.Unlock()
	j.closeLocked()
}

func (j *journal) closeLocked() {
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
}

// decbuf decodes varints, remembering the first error.
type decbuf struct {
	b   []byte
	err error
}

func (d *decbuf) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decbuf) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decbuf) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errors.New("short record")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}
