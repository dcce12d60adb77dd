package vision

import (
	"bytes"
	"encoding/binary"
)

// jpegOrientation returns the EXIF Orientation of a JPEG, which neither
// libjpeg-turbo's TurboJPEG API nor image/jpeg reports: 1 (upright) when it is
// absent or malformed. It walks the marker segments before the first scan and
// never fails; judging the rest of the file is the decoder's job.
func jpegOrientation(b []byte) int {
	i := 2 // past SOI
	for i+4 <= len(b) {
		if b[i] != 0xff {
			return 1
		}
		m := b[i+1]
		switch {
		case m == 0xff: // fill byte
			i++
			continue
		case m == 0x01 || m >= 0xd0 && m <= 0xd8: // markers without a length
			i += 2
			continue
		case m == 0xda || m == 0xd9: // start of scan, end of image
			return 1
		}
		n := int(binary.BigEndian.Uint16(b[i+2:]))
		if n < 2 || i+2+n > len(b) {
			return 1
		}
		// Only the first Exif segment counts, as in PIL.
		if seg := b[i+4 : i+2+n]; m == 0xe1 && bytes.HasPrefix(seg, []byte("Exif\x00\x00")) {
			return exifOrientation(seg[6:])
		}
		i += 2 + n
	}
	return 1
}

// exifOrientation reads tag 0x0112 from IFD0 of a TIFF structure, returning
// 1 if it is missing or out of range.
func exifOrientation(t []byte) int {
	if len(t) < 8 {
		return 1
	}
	var bo binary.ByteOrder
	switch string(t[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 1
	}
	if bo.Uint16(t[2:]) != 42 {
		return 1
	}
	ifd := int64(bo.Uint32(t[4:]))
	if ifd+2 > int64(len(t)) {
		return 1
	}
	n := int64(bo.Uint16(t[ifd:]))
	for e := ifd + 2; e+12 <= int64(len(t)) && n > 0; e, n = e+12, n-1 {
		if bo.Uint16(t[e:]) != 0x0112 {
			continue
		}
		var v uint32
		switch bo.Uint16(t[e+2:]) { // type
		case 3: // SHORT
			v = uint32(bo.Uint16(t[e+8:]))
		case 4: // LONG
			v = bo.Uint32(t[e+8:])
		default:
			return 1
		}
		if v < 1 || v > 8 {
			return 1
		}
		return int(v)
	}
	return 1
}
