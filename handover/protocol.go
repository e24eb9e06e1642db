package handover

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"strings"
)

// The transfer format. A transfer is one HTTP request body:
//
//	magic "SHOALHO" | version byte
//	frames: type byte | uvarint payload length | payload | CRC-32C of type and payload (4 bytes, big endian)
//	  'H' header (JSON Header), first and once
//	  'F' a file begins: uvarint size, then its relative path
//	  'D' the next bytes of the current file (at most maxChunk)
//	  'E' end (JSON endFrame): the number of files and bytes sent, then EOF
//
// A body that stops before its end frame, or whose frames disagree with
// each other, is a torn transfer and is refused as a whole: the receiver
// keeps nothing of it. Version is bumped on any incompatible change; a
// receiver refuses versions it does not speak, with VersionError.

const (
	magic = "SHOALHO"
	// Version is the transfer format this build speaks.
	Version byte = 1

	maxChunk = 1 << 20 // bytes of file data per 'D' frame
	// maxMeta bounds the header and end frames: the header's HandOff
	// grows with the holds in force and the peers each waits for.
	maxMeta = 4 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header describes a transfer.
type Header struct {
	// ID names the transfer; a receiver stores a transfer once however
	// often it is sent. 32 hexadecimal digits.
	ID string `json:"id"`
	// Node and Start (Unix milliseconds) name the life of the node whose
	// backlog this is: the one that left, not necessarily the sender (a
	// receiver that leaves in turn passes a carried backlog on).
	Node  string `json:"node"`
	Start int64  `json:"start"`
	// Seq is that node's last fence: the backlog holds every sample
	// appended before it.
	Seq uint64 `json:"seq"`
	// Files and Bytes announce the size, so that a receiver can refuse a
	// transfer it has no room for before reading it.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Samples counts the samples and histograms not yet sent (for
	// metrics and the status page only).
	Samples int64 `json:"samples"`
	// HandOff is the node's hand-off state when it left
	// (placement.Coordinator.LeavingState): the holds its queues were
	// behind and its fences not yet acknowledged. The receiver keeps the
	// holds on the queues that send the backlog. Absent from older
	// versions: the backlog is then sent without holds.
	HandOff json.RawMessage `json:"handoff,omitempty"`
}

type endFrame struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// VersionError is a transfer of a format version this build does not speak.
type VersionError struct{ Got byte }

func (e VersionError) Error() string {
	return fmt.Sprintf("handover: transfer format version %d, this node speaks %d", e.Got, Version)
}

// ErrTorn is a transfer that ended before its end frame.
var ErrTorn = errors.New("handover: torn transfer (the stream ended before its end frame)")

// Encoder writes one transfer.
type Encoder struct {
	w     io.Writer
	h     Header
	files int
	bytes int64
	buf   []byte
}

// NewEncoder writes the start of a transfer with header h to w.
func NewEncoder(w io.Writer, h Header) (*Encoder, error) {
	e := &Encoder{w: w, h: h}
	if _, err := io.WriteString(w, magic+string([]byte{Version})); err != nil {
		return nil, err
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return e, e.frame('H', b)
}

func (e *Encoder) frame(typ byte, payload []byte) error {
	e.buf = e.buf[:0]
	e.buf = append(e.buf, typ)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(payload)))
	if _, err := e.w.Write(e.buf); err != nil {
		return err
	}
	if _, err := e.w.Write(payload); err != nil {
		return err
	}
	crc := crc32.Update(crc32.Checksum([]byte{typ}, castagnoli), castagnoli, payload)
	_, err := e.w.Write(binary.BigEndian.AppendUint32(nil, crc))
	return err
}

// File sends size bytes read from r as the file at name (a relative,
// slash-separated path, see validPath).
func (e *Encoder) File(name string, size int64, r io.Reader) error {
	if err := validPath(name); err != nil {
		return err
	}
	p := binary.AppendUvarint(nil, uint64(size))
	if err := e.frame('F', append(p, name...)); err != nil {
		return err
	}
	chunk := make([]byte, maxChunk)
	for left := size; left > 0; {
		n, err := io.ReadFull(r, chunk[:min(left, maxChunk)])
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		if err := e.frame('D', chunk[:n]); err != nil {
			return err
		}
		left -= int64(n)
	}
	e.files++
	e.bytes += size
	return nil
}

// Close writes the end frame. The header's Files and Bytes must match what
// was sent, or the receiver refuses the transfer.
func (e *Encoder) Close() error {
	b, _ := json.Marshal(endFrame{Files: e.files, Bytes: e.bytes})
	return e.frame('E', b)
}

// Sink stores what Decode reads.
type Sink interface {
	// Begin is called once with the header, before any file; an error
	// ends the transfer.
	Begin(h Header) error
	// File opens the file at name (validated) for size bytes; Decode
	// closes it once they are written.
	File(name string, size int64) (io.WriteCloser, error)
}

// Decode reads one transfer from r into s, refusing one whose header
// announces more than maxBytes. It returns nil only for a complete, intact
// transfer that ends in its end frame and nothing after it.
func Decode(r io.Reader, maxBytes int64, s Sink) (Header, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	d := &decoder{r: br}
	h, err := d.start(maxBytes, s)
	if err != nil {
		return h, err
	}
	return h, d.files(h, s)
}

type decoder struct {
	r   *bufio.Reader
	buf []byte
}

func (d *decoder) start(maxBytes int64, s Sink) (Header, error) {
	var h Header
	var pre [len(magic) + 1]byte
	if _, err := io.ReadFull(d.r, pre[:]); err != nil {
		return h, torn(err)
	}
	if string(pre[:len(magic)]) != magic {
		return h, errors.New("handover: not a transfer (bad magic)")
	}
	if v := pre[len(magic)]; v != Version {
		return h, VersionError{Got: v}
	}
	typ, p, err := d.frame()
	if err != nil {
		return h, err
	}
	if typ != 'H' {
		return h, fmt.Errorf("handover: first frame is %q, want the header", typ)
	}
	if err := json.Unmarshal(p, &h); err != nil {
		return h, fmt.Errorf("handover: bad header: %w", err)
	}
	if err := h.validate(maxBytes); err != nil {
		return h, err
	}
	return h, s.Begin(h)
}

func (h Header) validate(maxBytes int64) error {
	if !validID(h.ID) {
		return fmt.Errorf("handover: bad transfer id %q", h.ID)
	}
	if h.Node == "" || len(h.Node) > 256 {
		return errors.New("handover: header names no node")
	}
	if h.Files < 0 || h.Bytes < 0 || h.Files > 1<<20 {
		return errors.New("handover: negative or absurd sizes in header")
	}
	if h.Bytes > maxBytes {
		return &TooLargeError{Bytes: h.Bytes, Max: maxBytes}
	}
	return nil
}

// TooLargeError is a transfer larger than the receiver accepts.
type TooLargeError struct{ Bytes, Max int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("handover: transfer of %d bytes exceeds the %d bytes accepted", e.Bytes, e.Max)
}

func (d *decoder) files(h Header, s Sink) error {
	var files int
	var total int64
	for {
		typ, p, err := d.frame()
		if err != nil {
			return err
		}
		switch typ {
		case 'F':
			size, n := binary.Uvarint(p)
			if n <= 0 || size > uint64(h.Bytes-total) {
				return errors.New("handover: file larger than the header announced")
			}
			name := string(p[n:])
			if err := validPath(name); err != nil {
				return err
			}
			if files++; files > h.Files {
				return errors.New("handover: more files than the header announced")
			}
			if err := d.file(s, name, int64(size)); err != nil {
				return err
			}
			total += int64(size)
		case 'E':
			var e endFrame
			if err := json.Unmarshal(p, &e); err != nil {
				return fmt.Errorf("handover: bad end frame: %w", err)
			}
			if e.Files != files || e.Bytes != total || files != h.Files || total != h.Bytes {
				return fmt.Errorf("handover: end frame says %d files and %d bytes, received %d and %d, header announced %d and %d",
					e.Files, e.Bytes, files, total, h.Files, h.Bytes)
			}
			if _, err := d.r.ReadByte(); err != io.EOF {
				return errors.New("handover: data after the end frame")
			}
			return nil
		default:
			return fmt.Errorf("handover: unexpected frame %q", typ)
		}
	}
}

func (d *decoder) file(s Sink, name string, size int64) error {
	w, err := s.File(name, size)
	if err != nil {
		return err
	}
	for left := size; left > 0; {
		typ, p, err := d.frame()
		if err != nil {
			w.Close()
			return err
		}
		if typ != 'D' || int64(len(p)) > left || len(p) == 0 {
			w.Close()
			return fmt.Errorf("handover: %s: expected %d more data bytes, got frame %q of %d", name, left, typ, len(p))
		}
		if _, err := w.Write(p); err != nil {
			w.Close()
			return err
		}
		left -= int64(len(p))
	}
	return w.Close()
}

// frame reads one frame and checks its CRC.
func (d *decoder) frame() (byte, []byte, error) {
	typ, err := d.r.ReadByte()
	if err != nil {
		return 0, nil, torn(err)
	}
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		return 0, nil, torn(err)
	}
	limit := uint64(maxMeta)
	if typ == 'D' {
		limit = maxChunk
	}
	if n > limit {
		return 0, nil, fmt.Errorf("handover: frame %q of %d bytes exceeds %d", typ, n, limit)
	}
	if uint64(cap(d.buf)) < n+4 {
		d.buf = make([]byte, n+4)
	}
	b := d.buf[:n+4]
	if _, err := io.ReadFull(d.r, b); err != nil {
		return 0, nil, torn(err)
	}
	p := b[:n]
	want := binary.BigEndian.Uint32(b[n:])
	if crc32.Update(crc32.Checksum([]byte{typ}, castagnoli), castagnoli, p) != want {
		return 0, nil, fmt.Errorf("handover: frame %q fails its checksum", typ)
	}
	return typ, p, nil
}

func torn(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrTorn
	}
	return err
}

func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validPath accepts what a backlog consists of: files under wal/ (segments,
// a checkpoint directory, the repair record) and remotewrite/ (progress
// files and journals), as clean relative paths of plain names.
func validPath(p string) error {
	bad := func(why string) error { return fmt.Errorf("handover: file path %q %s", p, why) }
	if len(p) == 0 || len(p) > 255 {
		return bad("is empty or too long")
	}
	if path.Clean(p) != p || path.IsAbs(p) {
		return bad("is not a clean relative path")
	}
	parts := strings.Split(p, "/")
	if len(parts) < 2 || len(parts) > 3 || (parts[0] != "wal" && parts[0] != "remotewrite") {
		return bad("is not under wal/ or remotewrite/")
	}
	for _, part := range parts {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, ".") {
			return bad("has an empty or dot name")
		}
		for _, c := range part {
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
				return bad("has a character outside [A-Za-z0-9._-]")
			}
		}
	}
	return nil
}
