// Package bytestr reads and writes a tensor of byte strings in Triton's BYTES layout, which
// is torchd's string tensor (torch.Bytes) too: each element a 4-byte little-endian length,
// then its bytes. The protocols' codecs, the front-ends and the runtimes that take strings
// all read it through here.
package bytestr

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShort is an element whose length prefix is cut off.
var ErrShort = errors.New("a BYTES element is cut short")

// Each calls fn with each element in turn, a slice of data, and stops at fn's first error.
func Each(data []byte, fn func(i int, s []byte) error) error {
	for i := 0; len(data) > 0; i++ {
		if len(data) < 4 {
			return ErrShort
		}
		n := binary.LittleEndian.Uint32(data)
		if uint64(n) > uint64(len(data)-4) {
			return fmt.Errorf("a BYTES element's length %d runs past the data", n)
		}
		if err := fn(i, data[4:4+n:4+n]); err != nil {
			return err
		}
		data = data[4+n:]
	}
	return nil
}

// Split is data's elements, slices of data.
func Split(data []byte) ([][]byte, error) {
	var out [][]byte
	err := Each(data, func(_ int, s []byte) error {
		out = append(out, s)
		return nil
	})
	return out, err
}

// Count is how many elements data holds.
func Count(data []byte) (int64, error) {
	var n int64
	err := Each(data, func(int, []byte) error {
		n++
		return nil
	})
	return n, err
}

// Join lays strs out as Split reads them.
func Join(strs [][]byte) []byte {
	n := 0
	for _, s := range strs {
		n += 4 + len(s)
	}
	out := make([]byte, 0, n)
	for _, s := range strs {
		out = Append(out, s)
	}
	return out
}

// Append appends one element to b.
func Append(b, s []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
