package sim

import (
	"bytes"
	"compress/lzw"
	"io"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// The members of the simulation run with memberlist's compression off
// and the network counts what it would have sent with it on. memberlist
// compresses every packet and every stream message with a fresh LZW
// writer, and the receiver decompresses with a fresh reader: at 600
// members that was a third of the simulation's CPU, half of it
// allocating and clearing the writers' tables. It decides which messages
// a packet carries before it compresses (by their uncompressed size), so
// turning compression off changes no message and no timing, only the
// bytes, which wireSize restores.

// lzwLitWidth and compressAlgo are memberlist's: LSB order, 8-bit
// literals, algorithm 0 (LZW) in the compress message.
const (
	lzwLitWidth  = 8
	compressAlgo = 0
	compressMsg  = 9 // memberlist's messageType of a compressed payload
)

// compressed mirrors memberlist's compress message: same field names and
// types, so the same codec encodes it to the same bytes.
type compressed struct {
	Algo uint8
	Buf  []byte
}

type compressor struct {
	lzw *lzw.Writer
	buf bytes.Buffer
	mp  codec.MsgpackHandle
}

var compressors = sync.Pool{New: func() any {
	c := &compressor{}
	c.lzw = lzw.NewWriter(&c.buf, lzw.LSB, lzwLitWidth).(*lzw.Writer)
	return c
}}

// wireSize is the size of msg as memberlist sends it with compression on:
// the type byte and the msgpack-encoded compress message around the LZW
// stream. A packet is sent compressed only when that is smaller; a stream
// message always is.
func wireSize(msg []byte, packet bool) int {
	c := compressors.Get().(*compressor)
	defer compressors.Put(c)
	c.buf.Reset()
	c.lzw.Reset(&c.buf, lzw.LSB, lzwLitWidth)
	if _, err := c.lzw.Write(msg); err != nil {
		return len(msg)
	}
	if err := c.lzw.Close(); err != nil {
		return len(msg)
	}
	var n countWriter
	if err := codec.NewEncoder(&n, &c.mp).Encode(&compressed{Algo: compressAlgo, Buf: c.buf.Bytes()}); err != nil {
		return len(msg)
	}
	size := 1 + int(n)
	if packet && size >= len(msg) {
		return len(msg)
	}
	return size
}

type countWriter int64

func (w *countWriter) Write(b []byte) (int, error) {
	*w += countWriter(len(b))
	return len(b), nil
}

var _ io.Writer = (*countWriter)(nil)
