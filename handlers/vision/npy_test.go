package vision

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// readNpy reads a little-endian float32, C-order .npy file, the only kind
// models/vision_ref.py writes.
func readNpy(path string) (data []float32, shape []int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.HasPrefix(b, []byte("\x93NUMPY")) || len(b) < 10 {
		return nil, nil, fmt.Errorf("%s: not a .npy file", path)
	}
	var hlen, off int
	switch b[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		hlen, off = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return nil, nil, fmt.Errorf("%s: .npy version %d", path, b[6])
	}
	if off+hlen > len(b) {
		return nil, nil, fmt.Errorf("%s: truncated header", path)
	}
	hdr := string(b[off : off+hlen])
	if !strings.Contains(hdr, "'descr': '<f4'") || !strings.Contains(hdr, "'fortran_order': False") {
		return nil, nil, fmt.Errorf("%s: want <f4 C-order, header %s", path, hdr)
	}
	m := regexp.MustCompile(`'shape': \(([0-9, ]*)\)`).FindStringSubmatch(hdr)
	if m == nil {
		return nil, nil, fmt.Errorf("%s: no shape in header %s", path, hdr)
	}
	n := 1
	for _, f := range strings.Split(m[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := strconv.Atoi(f)
		if err != nil {
			return nil, nil, err
		}
		shape = append(shape, d)
		n *= d
	}
	body := b[off+hlen:]
	if len(body) != 4*n {
		return nil, nil, fmt.Errorf("%s: %d data bytes for shape %v", path, len(body), shape)
	}
	data = make([]float32, n)
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
	}
	return data, shape, nil
}
