// A JPEG decode of one window of the image, with libjpeg's API (libjpeg-turbo's
// jpeg_crop_scanline and jpeg_skip_scanlines), which the TurboJPEG API lacks.
#ifndef TORCHD_JPEGWINDOW_H
#define TORCHD_JPEGWINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "resample.h"

// jw_result is jw_decode's outcome: rc 0 on success, -1 on a fatal error (msg says
// which); truncated is set when the data ended before the image did, which libjpeg
// only warns about; fast_huffman says that jpeghuff.c's decoder read the entropy-coded data.
typedef struct {
	int rc, truncated, fast_huffman;
	char msg[200];
} jw_result;

// jw_decode decodes the JPEG in buf[0:n] with libjpeg's defaults (the ISLOW IDCT and
// fancy upsampling, as PIL), writing rows [y0, y1) and at least columns [x0, x1) into
// dst, which has the whole image's layout: w*h*c bytes, c being 1 (gray), 3 (RGB) or 4
// (CMYK). Other columns are not written; the last row may be. Rows above and below the
// window are skipped without their IDCT (but for the last), and columns outside it
// (widened to iMCU boundaries) too; the entropy-coded data is still read to its end,
// but for what follows the window where it holds no marker before the EOI that ends
// the file (nothing there could fail the decode). Progressive JPEGs of more than 500
// scans are refused, as TurboJPEG's TJFLAG_LIMITSCANS does. It never exits the
// process: libjpeg's fatal errors return here.
jw_result jw_decode(const unsigned char *buf, size_t n, unsigned char *dst, int w, int h, int c,
		int x0, int x1, int y0, int y1);

// jw_decode_huff is jw_decode with libjpeg's own Huffman decoder where huff is 0, and
// jpeghuff.c's (jw_decode's) where it is 1: the tests compare the two.
jw_result jw_decode_huff(const unsigned char *buf, size_t n, unsigned char *dst, int w, int h, int c,
		int x0, int x1, int y0, int y1, int huff);

// jw_resize_args is the horizontal pass of the resize that jw_decode_resize runs on each
// decoded row whose upright row y is in [r0, r1), writing it to tmp + (y-r0)*tstride:
// vis_hpass_init's arguments, and row, the w*c bytes each row is decoded into. flip says
// that stored row s is upright row h-1-s (EXIF orientations 3 and 4), mirror that a row's
// pixel x is upright pixel w-1-x (2 and 3): a mirrored row is copied reversed into mrow
// (w*c bytes) before its pass.
typedef struct {
	unsigned char *row, *mrow;
	uint8_t *tmp;
	int tstride, r0, r1, flip, mirror;
	const int32_t *start, *n, *k;
	int ksize, nout, isa;
	int huff; // 1: jpeghuff.c's Huffman decoder, 0: libjpeg's (jw_decode_huff)
} jw_resize_args;

// jw_decode_resize is jw_decode into one row's buffer, each row the resize reads resized
// horizontally as soon as it is decoded, while it is in the cache: the image is never
// whole in memory. Stored rows [y0, y1) are decoded; they must hold the stored rows of
// upright rows [r0, r1), y0 a margin above them (the rows at a skip's edge may differ from
// a whole decode's).
jw_result jw_decode_resize(const unsigned char *buf, size_t n, int w, int h, int c, int x0, int x1,
		int y0, int y1, jw_resize_args a);

#endif
