package vision

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// exifJPEG returns SOI, an APP1 Exif segment whose IFD0 holds one entry, and
// EOI. typ is the TIFF field type (3 SHORT, 4 LONG).
func exifJPEG(bo binary.ByteOrder, typ uint16, orientation uint32) []byte {
	var tiff bytes.Buffer
	if bo == binary.BigEndian {
		tiff.WriteString("MM")
	} else {
		tiff.WriteString("II")
	}
	binary.Write(&tiff, bo, uint16(42))
	binary.Write(&tiff, bo, uint32(8)) // IFD0 offset
	binary.Write(&tiff, bo, uint16(1)) // one entry
	binary.Write(&tiff, bo, uint16(0x0112))
	binary.Write(&tiff, bo, typ)
	binary.Write(&tiff, bo, uint32(1))
	if typ == 3 {
		binary.Write(&tiff, bo, uint16(orientation))
		binary.Write(&tiff, bo, uint16(0))
	} else {
		binary.Write(&tiff, bo, orientation)
	}
	seg := append([]byte("Exif\x00\x00"), tiff.Bytes()...)
	b := []byte{0xff, 0xd8, 0xff, 0xe1}
	b = binary.BigEndian.AppendUint16(b, uint16(len(seg)+2))
	b = append(b, seg...)
	return append(b, 0xff, 0xd9)
}

func TestJPEGOrientation(t *testing.T) {
	app0 := []byte{0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 'J', 'F'}
	withApp0 := append(append([]byte{}, app0...), exifJPEG(binary.LittleEndian, 3, 6)[2:]...)
	twoExif := append(exifJPEG(binary.LittleEndian, 3, 8), exifJPEG(binary.LittleEndian, 3, 3)[2:]...)
	truncated := exifJPEG(binary.BigEndian, 3, 6)
	tests := []struct {
		name string
		b    []byte
		want int
	}{
		{"little-endian SHORT", exifJPEG(binary.LittleEndian, 3, 6), 6},
		{"big-endian SHORT", exifJPEG(binary.BigEndian, 3, 8), 8},
		{"LONG", exifJPEG(binary.BigEndian, 4, 3), 3},
		{"after APP0", withApp0, 6},
		{"first Exif wins", twoExif, 8},
		{"fill bytes before marker", append([]byte{0xff, 0xd8, 0xff}, exifJPEG(binary.LittleEndian, 3, 5)[2:]...), 5},
		{"out of range", exifJPEG(binary.LittleEndian, 3, 9), 1},
		{"zero", exifJPEG(binary.LittleEndian, 3, 0), 1},
		{"wrong type", exifJPEG(binary.LittleEndian, 7, 6), 1},
		{"truncated segment", truncated[:len(truncated)-8], 1},
		{"no Exif", []byte{0xff, 0xd8, 0xff, 0xd9}, 1},
		{"SOI only", []byte{0xff, 0xd8}, 1},
	}
	for _, tt := range tests {
		if got := jpegOrientation(tt.b); got != tt.want {
			t.Errorf("%s: orientation %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestExifOrientationMalformed(t *testing.T) {
	// Offsets pointing anywhere must not panic.
	for _, tiff := range [][]byte{
		nil,
		[]byte("II*\x00"),
		[]byte("II*\x00\xff\xff\xff\xff"),
		[]byte("MM\x00*\x00\x00\x00\x08\xff\xff"),
		[]byte("II*\x00\x08\x00\x00\x00\x05\x00\x12\x01\x03\x00"),
		[]byte("XX*\x00\x08\x00\x00\x00"),
	} {
		if got := exifOrientation(tiff); got != 1 {
			t.Errorf("exifOrientation(%q) = %d, want 1", tiff, got)
		}
	}
}
