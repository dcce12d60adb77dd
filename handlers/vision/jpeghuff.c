#include "jpeghuff.h"

#include <string.h>

#include <jerror.h>

// libjpeg's module interfaces are in jpegint.h, which is not installed. These are the two
// this decoder uses, as libjpeg 6b laid them out and libjpeg-turbo kept them through 3.x;
// the build refuses another library, and jh_install checks fields whose values it knows.
#if JPEG_LIB_VERSION != 62 || !defined(LIBJPEG_TURBO_VERSION_NUMBER) || \
		LIBJPEG_TURBO_VERSION_NUMBER < 2000000 || LIBJPEG_TURBO_VERSION_NUMBER >= 3200000 || \
		BITS_IN_JSAMPLE != 8
#error "jpeghuff.c declares libjpeg-turbo 2.x/3.x's jpeg_entropy_decoder and jpeg_marker_reader"
#endif

struct jh_entropy_decoder { // jpegint.h's struct jpeg_entropy_decoder
	void (*start_pass)(j_decompress_ptr);
	boolean (*decode_mcu)(j_decompress_ptr, JBLOCKROW *);
	boolean insufficient_data;
};

struct jh_marker_reader { // jpegint.h's struct jpeg_marker_reader
	void (*reset_marker_reader)(j_decompress_ptr);
	int (*read_markers)(j_decompress_ptr);
	jpeg_marker_parser_method read_restart_marker;
	boolean saw_SOI;
	boolean saw_SOF;
	int next_restart_num;
	unsigned int discarded_bytes;
};

// JH_LOOK bits of the stream index a table entry: every code that short, and with its
// extra bits too where they fit, decodes in one read.
#define JH_LOOK 11
#define JH_FAST (1 << 13)

// A table entry: the symbol (bits 0-7); the bits it takes (8-12): the code's length, or
// with JH_FAST the code's and its extra bits', the value then in bits 16-31; 0 bits for a
// code longer than JH_LOOK.
typedef struct {
	int32_t look[1 << JH_LOOK];
	int32_t maxcode[18]; // libjpeg's F.15 tables, for the longer codes
	int32_t valoffset[18];
	unsigned char huffval[256];
} jh_table;

typedef struct {
	uint64_t buf; // the next bits, from the top; zeros below them
	int bits;     // how many; below 0 when zeros past a marker were taken
	const JOCTET *p;
	size_t avail;
	int last_dc[MAX_COMPS_IN_SCAN];
	unsigned int restarts_to_go;
	int nblocks;
	const jh_table *dc[D_MAX_BLOCKS_IN_MCU], *ac[D_MAX_BLOCKS_IN_MCU];
	int ci[D_MAX_BLOCKS_IN_MCU], dc_needed[D_MAX_BLOCKS_IN_MCU], ac_needed[D_MAX_BLOCKS_IN_MCU];
	jh_table tables[2 * NUM_HUFF_TBLS];
	JCOEF scratch[DCTSIZE2];
} jh_state;

// The zigzag order, with 16 more entries for a run past the 64th coefficient in damaged
// data, as libjpeg's jpeg_natural_order.
static const int jh_natural[DCTSIZE2 + 16] = {
	0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
	63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
};

static inline int jh_extend(int v, int s) {
	return v < (1 << (s - 1)) ? v + (int)((~0u << s) + 1) : v;
}

// jh_build derives t from htbl, which libjpeg's start_pass has checked (counts, codes that
// fit their lengths, DC symbols of at most 15 bits); it says 0 where they are not so.
static int jh_build(jh_table *t, const JHUFF_TBL *htbl, int dc) {
	unsigned int code = 0;
	int p = 0;
	memset(t->look, 0, sizeof t->look);
	memcpy(t->huffval, htbl->huffval, sizeof t->huffval);
	for (int l = 1; l <= 16; l++) {
		int n = htbl->bits[l];
		if (p + n > 256) {
			return 0;
		}
		if (n == 0) {
			t->maxcode[l] = -1;
			t->valoffset[l] = 0;
		} else {
			t->valoffset[l] = p - (int32_t)code;
			t->maxcode[l] = (int32_t)(code + (unsigned int)n - 1);
		}
		for (int i = 0; i < n; i++, p++, code++) {
			int sym = htbl->huffval[p], s = sym & 15;
			if (code >= (1u << l) || (dc && sym > 15)) {
				return 0;
			}
			if (l > JH_LOOK) {
				continue;
			}
			if (dc) {
				s = sym;
			}
			int32_t e = sym | l << 8;
			for (unsigned int x = 0; x < 1u << (JH_LOOK - l); x++) {
				unsigned int idx = (code << (JH_LOOK - l)) | x;
				int32_t f = e;
				// A coefficient, or a DC difference, whose extra bits are in the index too.
				if ((dc || s != 0) && l + s <= JH_LOOK) {
					int v = 0;
					if (s) {
						v = jh_extend((int)((x >> (JH_LOOK - l - s)) & ((1u << s) - 1)), s);
					}
					f = (int32_t)((uint32_t)(uint16_t)(int16_t)v << 16) | (dc ? 0 : sym) | (l + s) << 8 | JH_FAST;
				}
				t->look[idx] = f;
			}
		}
		code <<= 1;
	}
	t->maxcode[17] = 0xFFFFF; // ends the search for a code in damaged data, as libjpeg
	t->valoffset[17] = 0;
	return 1;
}

// jh_next_buffer has the source manager refill its buffer, once the bytes in hand are used up.
static void jh_next_buffer(j_decompress_ptr d, jh_state *h) {
	d->src->next_input_byte = h->p;
	d->src->bytes_in_buffer = 0;
	if (!(*d->src->fill_input_buffer)(d)) {
		ERREXIT(d, JERR_CANT_SUSPEND);
	}
	h->p = d->src->next_input_byte;
	h->avail = d->src->bytes_in_buffer;
}

// jh_fill loads bytes to at least 57 bits, as libjpeg's jpeg_fill_bit_buffer: stuffed
// zeros dropped, a run of 0xFF before a 0 taken as one 0xFF, and a marker left unread in
// cinfo->unread_marker, after which only zeros follow.
static __attribute__((noinline)) void jh_fill(j_decompress_ptr d, jh_state *h) {
	if (d->unread_marker != 0) {
		return;
	}
	while (h->bits <= 56) {
		if (h->avail >= 8) {
			uint64_t v;
			memcpy(&v, h->p, 8);
			v = __builtin_bswap64(v);
			uint64_t nv = ~v;
			if (((nv - 0x0101010101010101ull) & ~nv & 0x8080808080808080ull) == 0) {
				// No 0xFF among the next 8 bytes: take as many as fit.
				int n = (64 - h->bits) >> 3;
				h->buf |= (v >> (64 - 8 * n)) << (64 - h->bits - 8 * n);
				h->bits += 8 * n;
				h->p += n;
				h->avail -= (size_t)n;
				continue;
			}
		}
		if (h->avail == 0) {
			jh_next_buffer(d, h);
			continue;
		}
		int c = *h->p++;
		h->avail--;
		if (c == 0xFF) {
			do {
				if (h->avail == 0) {
					jh_next_buffer(d, h);
				}
				c = *h->p++;
				h->avail--;
			} while (c == 0xFF);
			if (c != 0) {
				d->unread_marker = c;
				return;
			}
			c = 0xFF;
		}
		h->buf |= (uint64_t)c << (56 - h->bits);
		h->bits += 8;
	}
}

static inline unsigned int jh_get(jh_state *h, int n) {
	unsigned int v = (unsigned int)(h->buf >> (64 - n));
	h->buf <<= n;
	h->bits -= n;
	return v;
}

// jh_symbol decodes one symbol from the next bits (at least 17 loaded, or zeros past a
// marker) by the table entry e, which did not hold all of it.
static __attribute__((noinline)) int jh_symbol(j_decompress_ptr d, jh_state *h, const jh_table *t, int32_t e) {
	int l = (e >> 8) & 31;
	if (l != 0) {
		jh_get(h, l);
		return e & 0xFF;
	}
	l = JH_LOOK + 1;
	int32_t code = (int32_t)(h->buf >> (64 - l));
	while (code > t->maxcode[l]) {
		l++;
		code = (int32_t)(h->buf >> (64 - l));
	}
	jh_get(h, l);
	if (l > 16) {
		WARNMS(d, JWRN_HUFF_BAD_CODE);
		return 0; // libjpeg's "fake a zero as the safest result"
	}
	return t->huffval[(code + t->valoffset[l]) & 0xFF];
}

// jh_process_restart is libjpeg's process_restart: the bits left are dropped, the RST
// marker read (or resynchronized to) by libjpeg's marker reader, the predictions reset.
static void jh_process_restart(j_decompress_ptr d, jh_state *h) {
	struct jh_marker_reader *m = (struct jh_marker_reader *)d->marker;
	if (h->bits > 0) {
		m->discarded_bytes += (unsigned int)h->bits / 8;
	}
	h->buf = 0;
	h->bits = 0;
	d->src->next_input_byte = h->p;
	d->src->bytes_in_buffer = h->avail;
	if (!(*m->read_restart_marker)(d)) {
		ERREXIT(d, JERR_CANT_SUSPEND);
	}
	h->p = d->src->next_input_byte;
	h->avail = d->src->bytes_in_buffer;
	for (int ci = 0; ci < d->comps_in_scan; ci++) {
		h->last_dc[ci] = 0;
	}
	h->restarts_to_go = d->restart_interval;
	if (d->unread_marker == 0) {
		((struct jh_entropy_decoder *)d->entropy)->insufficient_data = FALSE;
	}
}

// JH_REFILL tops the bit buffer up when it holds under 32 bits: from the next 8 bytes
// where they hold no 0xFF (most of the time), else by jh_fill's byte loop. Before a marker
// (or zeros past one) it holds at least 57 bits after, more than a code and its extra bits.
#define JH_REFILL()                                                                       \
	do {                                                                              \
		if (bits < 32) {                                                          \
			uint64_t v_;                                                      \
			if (avail >= 8 && d->unread_marker == 0 && (memcpy(&v_, p, 8), v_ = __builtin_bswap64(v_), \
					(((~v_ - 0x0101010101010101ull) & v_ & 0x8080808080808080ull) == 0))) { \
				int n_ = (64 - bits) >> 3;                                \
				buf |= (v_ >> (64 - 8 * n_)) << (64 - bits - 8 * n_);     \
				bits += 8 * n_;                                           \
				p += n_;                                                  \
				avail -= (size_t)n_;                                      \
			} else {                                                          \
				JH_SAVE();                                                \
				jh_fill(d, h);                                            \
				JH_LOAD();                                                \
			}                                                                 \
		}                                                                         \
	} while (0)
#define JH_SAVE() (h->buf = buf, h->bits = bits, h->p = p, h->avail = avail)
#define JH_LOAD() (buf = h->buf, bits = h->bits, p = h->p, avail = h->avail)
#define JH_DROP(n) (buf <<= (n), bits -= (n))

// jh_decode_mcu is libjpeg's decode_mcu for a baseline scan: the same coefficients, the
// same state after it, the same warnings, from a wider table read. The bit buffer lives in
// locals: stores into the blocks would otherwise reload it from h each time.
static boolean jh_decode_mcu(j_decompress_ptr d, JBLOCKROW *MCU_data) {
	jh_state *h = (jh_state *)d->client_data;
	struct jh_entropy_decoder *ent = (struct jh_entropy_decoder *)d->entropy;
	h->p = d->src->next_input_byte;
	h->avail = d->src->bytes_in_buffer;
	if (d->restart_interval && h->restarts_to_go == 0) {
		jh_process_restart(d, h);
	}
	// Past the data's end the MCU stays zero, as libjpeg leaves it: uniform gray.
	if (!ent->insufficient_data) {
		uint64_t buf;
		int bits;
		const JOCTET *p;
		size_t avail;
		JH_LOAD();
		for (int b = 0; b < h->nblocks; b++) {
			JCOEF *dcblk = MCU_data && h->dc_needed[b] ? MCU_data[b][0] : h->scratch;
			JCOEF *blk = MCU_data && h->ac_needed[b] ? MCU_data[b][0] : h->scratch;
			const jh_table *t = h->dc[b];
			JH_REFILL();
			int32_t e = t->look[buf >> (64 - JH_LOOK)];
			int diff;
			if (e & JH_FAST) {
				JH_DROP((e >> 8) & 31);
				diff = e >> 16;
			} else {
				JH_SAVE();
				int s = jh_symbol(d, h, t, e);
				diff = 0;
				if (s) {
					if (h->bits < 16) {
						jh_fill(d, h);
					}
					diff = jh_extend((int)jh_get(h, s), s);
				}
				JH_LOAD();
			}
			int ci = h->ci[b];
			h->last_dc[ci] = (int)((unsigned int)h->last_dc[ci] + (unsigned int)diff);
			dcblk[0] = (JCOEF)h->last_dc[ci];

			t = h->ac[b];
			for (int k = 1; k < DCTSIZE2; k++) {
				JH_REFILL();
				e = t->look[buf >> (64 - JH_LOOK)];
				if (e & JH_FAST) {
					JH_DROP((e >> 8) & 31);
					k += (e >> 4) & 15;
					blk[jh_natural[k]] = (JCOEF)(e >> 16);
					continue;
				}
				int rs, l = (e >> 8) & 31;
				if (l != 0) {
					JH_DROP(l);
					rs = e & 0xFF;
				} else {
					JH_SAVE();
					rs = jh_symbol(d, h, t, e);
					JH_LOAD();
				}
				int r = rs >> 4, s = rs & 15;
				if (s) {
					k += r;
					// bits >= 32 before the code (or zeros past a marker): its at most
					// 17 bits leave the at most 15 extra bits loaded.
					unsigned int v = (unsigned int)(buf >> (64 - s));
					JH_DROP(s);
					blk[jh_natural[k]] = (JCOEF)jh_extend((int)v, s);
				} else {
					if (r != 15) {
						break;
					}
					k += 15;
				}
			}
		}
		JH_SAVE();
		// Zeros past a marker were taken: libjpeg warns once a segment, and decodes
		// nothing more in it.
		if (h->bits < 0) {
			if (!ent->insufficient_data) {
				WARNMS(d, JWRN_HIT_MARKER);
				ent->insufficient_data = TRUE;
			}
			h->bits = 0;
			h->buf = 0;
		}
	}
	if (d->restart_interval) {
		h->restarts_to_go--;
	}
	d->src->next_input_byte = h->p;
	d->src->bytes_in_buffer = h->avail;
	return TRUE;
}

int jh_install(j_decompress_ptr d) {
	struct jh_entropy_decoder *ent = (struct jh_entropy_decoder *)d->entropy;
	struct jh_marker_reader *m = (struct jh_marker_reader *)d->marker;
	// A single baseline (or extended sequential) Huffman scan, not yet begun; the fields
	// checked hold what libjpeg's layout puts there at this point.
	if (d->progressive_mode || d->arith_code || jpeg_has_multiple_scans(d) || d->data_precision != 8 ||
			d->comps_in_scan < 1 || d->comps_in_scan > MAX_COMPS_IN_SCAN ||
			d->blocks_in_MCU < 1 || d->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU ||
			d->input_iMCU_row != 0 || d->client_data != NULL ||
			ent == NULL || ent->decode_mcu == NULL || ent->start_pass == NULL || ent->insufficient_data != FALSE ||
			m == NULL || m->read_restart_marker == NULL || m->saw_SOI != TRUE || m->saw_SOF != TRUE ||
			m->next_restart_num != 0) {
		return 0;
	}
	// libjpeg's decode_mcu_fast, which it runs on an MCU far enough from the end of the data
	// and where there are no restart markers, reads ahead past a 0xFF that is not a stuffed
	// 0xFF00 (a marker, or fill bytes) as zeros, then falls back to its byte-by-byte reader
	// for that MCU, over coefficients already stored: damaged data then decodes to what only
	// that sequence of readers gives. Such a file is left to libjpeg: where the scan has no
	// restart interval, the data may hold no marker but the EOI that ends the file.
	if (d->restart_interval == 0) {
		const JOCTET *q = d->src->next_input_byte, *end = q + d->src->bytes_in_buffer;
		while (q < end && (q = memchr(q, 0xFF, (size_t)(end - q))) != NULL) {
			if (q + 1 < end && q[1] == 0x00) {
				q += 2;
				continue;
			}
			if (q + 2 == end && q[1] == 0xD9) {
				break;
			}
			return 0;
		}
	}
	jh_state *h = (jh_state *)(*d->mem->alloc_large)((j_common_ptr)d, JPOOL_IMAGE, sizeof(jh_state));
	memset(h->last_dc, 0, sizeof h->last_dc);
	h->buf = 0;
	h->bits = 0;
	h->restarts_to_go = d->restart_interval;
	h->nblocks = d->blocks_in_MCU;
	const jh_table *built[2 * NUM_HUFF_TBLS] = {0};
	for (int b = 0; b < d->blocks_in_MCU; b++) {
		int ci = d->MCU_membership[b];
		if (ci < 0 || ci >= d->comps_in_scan) {
			return 0;
		}
		jpeg_component_info *comp = d->cur_comp_info[ci];
		int tn[2] = {comp->dc_tbl_no, comp->ac_tbl_no};
		for (int ac = 0; ac < 2; ac++) {
			if (tn[ac] < 0 || tn[ac] >= NUM_HUFF_TBLS) {
				return 0;
			}
			int i = ac * NUM_HUFF_TBLS + tn[ac];
			if (!built[i]) {
				JHUFF_TBL *ht = ac ? d->ac_huff_tbl_ptrs[tn[ac]] : d->dc_huff_tbl_ptrs[tn[ac]];
				if (ht == NULL || !jh_build(&h->tables[i], ht, !ac)) {
					return 0;
				}
				built[i] = &h->tables[i];
			}
		}
		h->dc[b] = built[tn[0]];
		h->ac[b] = built[NUM_HUFF_TBLS + tn[1]];
		h->ci[b] = ci;
		h->dc_needed[b] = comp->component_needed;
		h->ac_needed[b] = comp->component_needed && comp->DCT_scaled_size > 1;
	}
	d->client_data = h;
	ent->decode_mcu = jh_decode_mcu;
	return 1;
}
