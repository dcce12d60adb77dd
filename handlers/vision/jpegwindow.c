#include "jpegwindow.h"
#include "jpeghuff.h"

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

// The error manager returns to jw_decode instead of exiting, and notes the end of data.
typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	int eof;
	char msg[JMSG_LENGTH_MAX];
} jw_error;

static void jw_error_exit(j_common_ptr ci) {
	jw_error *e = (jw_error *)ci->err;
	(*ci->err->format_message)(ci, e->msg);
	longjmp(e->jump, 1);
}

static void jw_emit(j_common_ptr ci, int level) {
	jw_error *e = (jw_error *)ci->err;
	if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) {
		e->eof = 1;
	}
}

// A progressive JPEG's scans are read in jpeg_start_decompress; past 500 the image is
// refused, a CPU bomb the pixel limit does not catch.
static void jw_progress(j_common_ptr ci) {
	j_decompress_ptr d = (j_decompress_ptr)ci;
	if (d->progressive_mode && d->input_scan_number > 500) {
		jw_error *e = (jw_error *)ci->err;
		snprintf(e->msg, sizeof e->msg, "progressive JPEG image has more than 500 scans");
		longjmp(e->jump, 1);
	}
}

// cmyk_row turns pixels [x0, x1) of a CMYK row, as a JPEG stores it (Adobe's inverted
// values), into RGB in place, pixel x's 4 bytes becoming the 3 at 3x (a later pixel's bytes
// are never written before they are read): raster.go's cmykToRGB, PIL's formula.
static void cmyk_row(unsigned char *p, int x0, int x1) {
	for (int x = x0; x < x1; x++) {
		const unsigned char *s = p + (size_t)x * 4;
		int nk = s[3], v[3] = {255 - s[0], 255 - s[1], 255 - s[2]};
		unsigned char *d = p + (size_t)x * 3;
		for (int i = 0; i < 3; i++) {
			int t = v[i] * nk + 128;
			int o = nk - (((t >> 8) + t) >> 8);
			d[i] = (unsigned char)(o < 0 ? 0 : o > 255 ? 255 : o);
		}
	}
}

// mirror_row writes pixels [x0, x1) of row, c = 1 or 3 bytes each, reversed: pixel x to
// w-1-x of m.
static void mirror_row(unsigned char *m, const unsigned char *row, int w, int c, int x0, int x1) {
	if (c == 3) {
		for (int x = x0; x < x1; x++) {
			unsigned char *d = m + (size_t)(w - 1 - x) * 3;
			const unsigned char *s = row + (size_t)x * 3;
			d[0] = s[0];
			d[1] = s[1];
			d[2] = s[2];
		}
		return;
	}
	for (int x = x0; x < x1; x++) {
		m[w - 1 - x] = row[x];
	}
}

// rest_is_plain says whether the data libjpeg has not yet read holds no marker but the EOI
// that ends it (and, with a restart interval, RST markers): an entropy-coded rest whose
// decoding can only warn, never fail and never run out. Skipping it then leaves every
// outcome as reading it would, but for its Huffman decoding (a baseline photo's costliest
// step) and its IDCT. A marker already met, one to come, or bytes after the EOI keep the
// read.
static int rest_is_plain(j_decompress_ptr d) {
	if (d->unread_marker != 0 || jpeg_has_multiple_scans(d)) {
		return 0;
	}
	const unsigned char *q = d->src->next_input_byte, *end = q + d->src->bytes_in_buffer;
	while (q < end && (q = memchr(q, 0xFF, (size_t)(end - q))) != NULL) {
		while (q < end && *q == 0xFF) { // fill bytes, then what the 0xFF means
			q++;
		}
		if (q == end) {
			return 0;
		}
		if (*q == 0xD9) {
			return q == end - 1;
		}
		if (*q != 0x00 && !(d->restart_interval != 0 && *q >= 0xD0 && *q <= 0xD7)) {
			return 0;
		}
		q++;
	}
	return 0;
}

// decode is jw_decode, and jw_decode_resize where hp is set: then each row goes to row, and
// rows [r0, r1) through hp into tmp.
static jw_result decode(const unsigned char *buf, size_t n, unsigned char *dst, int w, int h, int c,
		int x0, int x1, int y0, int y1, const vis_hpass *hp, const jw_resize_args *ra, int huff) {
	jw_result res;
	memset(&res, 0, sizeof res);
	struct jpeg_decompress_struct d;
	jw_error err;
	struct jpeg_progress_mgr progress;
	memset(&err, 0, sizeof err);
	memset(&progress, 0, sizeof progress);
	d.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = jw_error_exit;
	err.pub.emit_message = jw_emit;
	progress.progress_monitor = jw_progress;
	if (setjmp(err.jump)) {
		jpeg_destroy_decompress(&d);
		res.rc = -1;
		res.fast_huffman = 0;
		res.truncated = err.eof;
		snprintf(res.msg, sizeof res.msg, "%s", err.msg);
		return res;
	}
	d.client_data = NULL; // jpeg_create_decompress keeps it, and jh_install needs it unset
	jpeg_create_decompress(&d);
	d.progress = &progress;
	jpeg_mem_src(&d, buf, (unsigned long)n);
	jpeg_read_header(&d, TRUE);
	d.out_color_space = c == 1 ? JCS_GRAYSCALE : c == 4 ? JCS_CMYK : JCS_RGB;
	jpeg_start_decompress(&d);
	res.fast_huffman = huff && jh_install(&d);
	if ((int)d.output_width != w || (int)d.output_height != h || d.output_components != c ||
			x0 < 0 || x0 >= x1 || x1 > w || y0 < 0 || y0 >= y1 || y1 > h) {
		snprintf(err.msg, sizeof err.msg, "window [%d,%d)x[%d,%d) of a %dx%dx%d image decoded as %ux%ux%d",
			x0, x1, y0, y1, w, h, c, d.output_width, d.output_height, d.output_components);
		longjmp(err.jump, 1);
	}
	JDIMENSION xoff = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
	jpeg_crop_scanline(&d, &xoff, &width);
	if (y0 > 0) {
		jpeg_skip_scanlines(&d, (JDIMENSION)y0);
	}
	while (d.output_scanline < d.output_height) {
		JDIMENSION y = d.output_scanline;
		// The rows below the window are skipped but for the last, which is read:
		// jpeg_skip_scanlines to the end would not read their data, and a file truncated
		// or damaged there would pass for a whole one; where the rest is plain entropy-coded
		// data up to the EOI, nothing there can fail, and they are skipped to the end.
		if (y >= (JDIMENSION)y1 && y + 1 < d.output_height) {
			jpeg_skip_scanlines(&d, d.output_height - y - (rest_is_plain(&d) ? 0 : 1));
			continue;
		}
		JSAMPROW row = hp ? ra->row + (size_t)xoff * (size_t)c
				: dst + ((size_t)y * (size_t)w + xoff) * (size_t)c;
		jpeg_read_scanlines(&d, &row, 1);
		// The stored row y is upright row uy; mirrored, its pixel x is upright pixel w-1-x.
		int uy = hp && ra->flip ? h - 1 - (int)y : (int)y;
		if (hp && uy >= ra->r0 && uy < ra->r1) {
			const unsigned char *src = ra->row;
			int pc = c;
			if (c == 4) {
				cmyk_row(ra->row, (int)xoff, (int)(xoff + width));
				pc = 3;
			}
			if (ra->mirror) {
				mirror_row(ra->mrow, ra->row, w, pc, (int)xoff, (int)(xoff + width));
				src = ra->mrow;
			}
			vis_hpass_row(hp, ra->tmp + (size_t)(uy - ra->r0) * (size_t)ra->tstride, src);
		}
	}
	jpeg_finish_decompress(&d);
	res.truncated = err.eof;
	jpeg_destroy_decompress(&d);
	return res;
}

jw_result jw_decode(const unsigned char *buf, size_t n, unsigned char *dst, int w, int h, int c,
		int x0, int x1, int y0, int y1) {
	return decode(buf, n, dst, w, h, c, x0, x1, y0, y1, NULL, NULL, 1);
}

jw_result jw_decode_huff(const unsigned char *buf, size_t n, unsigned char *dst, int w, int h, int c,
		int x0, int x1, int y0, int y1, int huff) {
	return decode(buf, n, dst, w, h, c, x0, x1, y0, y1, NULL, NULL, huff);
}

jw_result jw_decode_resize(const unsigned char *buf, size_t n, int w, int h, int c, int x0, int x1,
		int y0, int y1, jw_resize_args a) {
	vis_hpass hp;
	// The stored rows that hold upright rows [r0, r1).
	int s0 = a.flip ? h - a.r1 : a.r0, s1 = a.flip ? h - a.r0 : a.r1;
	if (a.r1 <= a.r0 || a.r0 < 0 || a.r1 > h || s0 < y0 || s1 > y1 || (a.mirror && !a.mrow)) {
		jw_result res;
		memset(&res, 0, sizeof res);
		res.rc = -1;
		snprintf(res.msg, sizeof res.msg, "cannot resize rows [%d,%d) of a %dx%d image", a.r0, a.r1, w, h);
		return res;
	}
	// A CMYK row is RGB by its horizontal pass.
	vis_hpass_init(&hp, c == 4 ? 3 : c, w, a.start, a.n, a.k, a.ksize, a.nout, a.isa);
	jw_result res = decode(buf, n, NULL, w, h, c, x0, x1, y0, y1, &hp, &a, a.huff);
	vis_hpass_free(&hp);
	return res;
}
