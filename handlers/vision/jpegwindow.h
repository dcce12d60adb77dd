// A JPEG decode of one window of the image, with libjpeg's API (libjpeg-turbo's
// jpeg_crop_scanline and jpeg_skip_scanlines), which the TurboJPEG API lacks.
#ifndef TORCHD_JPEGWINDOW_H
#define TORCHD_JPEGWINDOW_H

#include <stddef.h>

// jw_result is jw_decode's outcome: rc 0 on success, -1 on a fatal error (msg says
// which); truncated is set when the data ended before the image did, which libjpeg
// only warns about.
typedef struct {
	int rc, truncated;
	char msg[200];
} jw_result;

// jw_decode decodes the JPEG in buf[0:n] with libjpeg's defaults (the ISLOW IDCT and
// fancy upsampling, as PIL), writing rows [y0, y1) and at least columns [x0, x1) into
// dst, which has the whole image's layout: w*h*c bytes, c being 1 (gray), 3 (RGB) or 4
// (CMYK). Other columns are not written; rows below the window may be. Rows above the
// window are skipped without their IDCT, and columns outside it (widened to iMCU
// boundaries) too; the entropy-coded data is still read to its end. Progressive JPEGs of more than 500
// scans are refused, as TurboJPEG's TJFLAG_LIMITSCANS does. It never exits the
// process: libjpeg's fatal errors return here.
jw_result jw_decode(const unsigned char *buf, size_t n, unsigned char *dst, int w, int h, int c,
		int x0, int x1, int y0, int y1);

#endif
