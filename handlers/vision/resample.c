// The two passes of PIL's bilinear resize (resample.go), in C because Go compiles their
// inner loops to scalar code with bounds checks: at 640x480 the resize took half of the
// preprocessing. The arithmetic is resample.go's, integer for integer, so the output is
// still PIL's. The passes are built for any CPU and for SSE4.1 (horizontal) or AVX2
// (vertical), picked at run time. Callers check every index (resample.go); nothing here checks bounds.

#include <stdint.h>
#include <stdlib.h>

#include "resample.h"

#define PRECISION_BITS 22
#define HALF (1 << (PRECISION_BITS - 1))

static inline uint8_t clip8(int32_t v) {
  v >>= PRECISION_BITS;
  return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

static inline int32_t tap3(const uint8_t *s, const int32_t *k, int n, int ch) {
  int32_t v = HALF;
  for (int j = 0; j < n; j++) v += s[3 * j + ch] * k[j];
  return v;
}

static void horizontal3_any(uint8_t *trow, const uint8_t *srow, int sw, const int32_t *start,
                            const int32_t *n, const int32_t *k, int ksize, int nout) {
  (void)sw;
  for (int i = 0; i < nout; i++) {
    const int32_t *kk = k + (long)i * ksize;
    const uint8_t *s = srow + start[i] * 3;
    trow[3 * i] = clip8(tap3(s, kk, n[i], 0));
    trow[3 * i + 1] = clip8(tap3(s, kk, n[i], 1));
    trow[3 * i + 2] = clip8(tap3(s, kk, n[i], 2));
  }
}

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

// horizontal3_sse41 takes each tap's pixel as one vector of four int32 (R, G, B and the next
// pixel's R, whose lane is dropped): a multiply and an add per tap instead of three of each.
// A pixel whose last tap is the row's last pixel is done as above, so no load passes the row.
__attribute__((target("sse4.1"))) static void horizontal3_sse41(
    uint8_t *trow, const uint8_t *srow, int sw, const int32_t *start, const int32_t *n,
    const int32_t *k, int ksize, int nout) {
  for (int i = 0; i < nout; i++) {
    const int32_t *kk = k + (long)i * ksize;
    const int st = start[i], nn = n[i];
    const uint8_t *s = srow + st * 3;
    if (st + nn >= sw) {
      trow[3 * i] = clip8(tap3(s, kk, nn, 0));
      trow[3 * i + 1] = clip8(tap3(s, kk, nn, 1));
      trow[3 * i + 2] = clip8(tap3(s, kk, nn, 2));
      continue;
    }
    __m128i acc = _mm_set1_epi32(HALF);
    for (int j = 0; j < nn; j++) {
      int32_t v;
      memcpy(&v, s + 3 * j, 4);
      __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(v));
      acc = _mm_add_epi32(acc, _mm_mullo_epi32(px, _mm_set1_epi32(kk[j])));
    }
    // clip8: the shift, then saturation to int16 and to uint8 clamps to [0, 255].
    acc = _mm_srai_epi32(acc, PRECISION_BITS);
    __m128i p8 = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
    uint32_t out = (uint32_t)_mm_cvtsi128_si32(p8);
    trow[3 * i] = (uint8_t)out;
    trow[3 * i + 1] = (uint8_t)(out >> 8);
    trow[3 * i + 2] = (uint8_t)(out >> 16);
  }
}

// SPLIT cuts each 22-bit weight w into hi = w >> SPLIT and lo = w & (2^SPLIT - 1), both
// int16, so that pmaddwd can multiply two taps' bytes at once: sum(p*w) = (sum(p*hi) <<
// SPLIT) + sum(p*lo) is the same integer (no sum comes near 2^31), so the pixels are PIL's.
#define SPLIT 15

// hweights is a pass's weights laid out for horizontal3_avx2: output pixel i has ng[i]
// groups of four taps, group g at w[(i*gmax + g)*16]: hi of taps 4g, 4g+1 as int16 pairs
// four times (the low 128 bits), then of taps 4g+2, 4g+3 (the high), then the same for lo.
typedef struct {
  int16_t *w;
  int gmax;
} hweights;

static int hweights_make(hweights *hw, const int32_t *n, const int32_t *k, int ksize, int nout) {
  hw->gmax = (ksize + 3) / 4;
  hw->w = calloc((size_t)nout * hw->gmax * 32, sizeof(int16_t));
  if (!hw->w) return 0;
  for (int i = 0; i < nout; i++) {
    const int32_t *kk = k + (long)i * ksize;
    for (int j = 0; j < n[i]; j++) {
      int16_t *g = hw->w + ((long)i * hw->gmax + j / 4) * 32;
      int half = (j % 4) / 2, odd = j % 2;
      for (int r = 0; r < 4; r++) {
        g[half * 8 + r * 2 + odd] = (int16_t)(kk[j] >> SPLIT);
        g[16 + half * 8 + r * 2 + odd] = (int16_t)(kk[j] & ((1 << SPLIT) - 1));
      }
    }
  }
  return 1;
}

// sums_avx2 is one output pixel's sums over G groups of four taps: 16 source bytes (taps 4g
// to 4g+3 are the first 12) in both halves of a register, shuffled to int16 pairs (R of
// taps 4g and 4g+1, G of both, B of both; taps 4g+2 and 4g+3 in the high half), then one
// pmaddwd each for the weights' hi and lo parts.
static inline __attribute__((always_inline, target("avx2"))) void sums_avx2(
    const uint8_t *s, const int16_t *w, int G, __m256i shuf, __m256i *hi, __m256i *lo) {
  __m256i h = _mm256_setzero_si256(), l = _mm256_setzero_si256();
  for (int g = 0; g < G; g++) {
    __m256i px = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(s + 12 * g)));
    px = _mm256_shuffle_epi8(px, shuf);
    h = _mm256_add_epi32(h, _mm256_madd_epi16(px, _mm256_loadu_si256((const __m256i *)(w + 32 * g))));
    l = _mm256_add_epi32(l, _mm256_madd_epi16(px, _mm256_loadu_si256((const __m256i *)(w + 32 * g + 16))));
  }
  *hi = h;
  *lo = l;
}

// pixels_avx2 does output pixels i and i+1 with G groups each: their halves added
// pairwise (pixel i in the low 128 bits, i+1 in the high), rounded, clipped, and stored as
// 4 bytes each, the second overwriting the first's spare byte; last says that the second's
// spare byte would pass the row, which then gets its 3 bytes alone.
static inline __attribute__((always_inline, target("avx2"))) void pixels_avx2(
    uint8_t *t, const uint8_t *sa, const uint8_t *sb, const int16_t *wa, const int16_t *wb, int G,
    __m256i shuf, int last) {
  __m256i ha, la, hb, lb;
  sums_avx2(sa, wa, G, shuf, &ha, &la);
  sums_avx2(sb, wb, G, shuf, &hb, &lb);
  __m256i h = _mm256_add_epi32(_mm256_permute2x128_si256(ha, hb, 0x20), _mm256_permute2x128_si256(ha, hb, 0x31));
  __m256i l = _mm256_add_epi32(_mm256_permute2x128_si256(la, lb, 0x20), _mm256_permute2x128_si256(la, lb, 0x31));
  __m256i acc = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, SPLIT), l), _mm256_set1_epi32(HALF));
  acc = _mm256_srai_epi32(acc, PRECISION_BITS);
  // clip8: saturation to int16 and to uint8 clamps to [0, 255], in each half.
  __m256i p16 = _mm256_packs_epi32(acc, acc);
  __m256i p8 = _mm256_packus_epi16(p16, p16);
  uint32_t a = (uint32_t)_mm256_cvtsi256_si32(p8);
  uint32_t b = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(p8, 1));
  memcpy(t, &a, 4);
  if (last) {
    t[3] = (uint8_t)b;
    t[4] = (uint8_t)(b >> 8);
    t[5] = (uint8_t)(b >> 16);
  } else {
    memcpy(t + 3, &b, 4);
  }
}

// horizontal3_avx2 runs pixels_avx2 over the row, two output pixels at a time, every pixel
// with all gmax groups (the weights past n[i] are zero, so the taps past the last add
// nothing); G is gmax where a constant lets the compiler unroll the groups. A pixel whose
// loads would pass the row is done as in horizontal3_any.
static inline __attribute__((always_inline, target("avx2"))) void horizontal3_avx2_g(
    uint8_t *trow, const uint8_t *srow, int sw, const int32_t *start, const int32_t *n,
    const int32_t *k, int ksize, int nout, const hweights *hw, int G) {
  const __m256i shuf = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                        6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  // A pixel's last load reads bytes [12(G-1), 12(G-1)+16) past its first tap.
  const int stmax = sw - 4 * G - 2;
  int i = 0;
  for (; i + 1 < nout; i += 2) {
    if (start[i] > stmax || start[i + 1] > stmax) break;
    pixels_avx2(trow + 3 * i, srow + start[i] * 3, srow + start[i + 1] * 3, hw->w + (long)i * G * 32,
                hw->w + (long)(i + 1) * G * 32, G, shuf, i + 2 >= nout);
  }
  for (; i < nout; i++) {
    const int32_t *kk = k + (long)i * ksize;
    const uint8_t *s = srow + start[i] * 3;
    trow[3 * i] = clip8(tap3(s, kk, n[i], 0));
    trow[3 * i + 1] = clip8(tap3(s, kk, n[i], 1));
    trow[3 * i + 2] = clip8(tap3(s, kk, n[i], 2));
  }
}

__attribute__((target("avx2"))) static void horizontal3_avx2(
    uint8_t *trow, const uint8_t *srow, int sw, const int32_t *start, const int32_t *n,
    const int32_t *k, int ksize, int nout, const hweights *hw) {
  switch (hw->gmax) {
    case 1: horizontal3_avx2_g(trow, srow, sw, start, n, k, ksize, nout, hw, 1); break;
    case 2: horizontal3_avx2_g(trow, srow, sw, start, n, k, ksize, nout, hw, 2); break;
    case 3: horizontal3_avx2_g(trow, srow, sw, start, n, k, ksize, nout, hw, 3); break;
    case 4: horizontal3_avx2_g(trow, srow, sw, start, n, k, ksize, nout, hw, 4); break;
    default: horizontal3_avx2_g(trow, srow, sw, start, n, k, ksize, nout, hw, hw->gmax);
  }
}
#endif

static int isa_level(int want) {
  int have = 0;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.1")) have = 1;
  if (have && __builtin_cpu_supports("avx2")) have = 2;
#endif
  return want < 0 || want > have ? have : want;
}

int vis_isa(int want) { return isa_level(want); }

void vis_hpass_init(vis_hpass *h, int c, int sw, const int32_t *start, const int32_t *n,
                   const int32_t *k, int ksize, int nout, int isa) {
  h->c = c;
  h->sw = sw;
  h->start = start;
  h->n = n;
  h->k = k;
  h->ksize = ksize;
  h->nout = nout;
  h->isa = c == 3 ? isa_level(isa) : 0;
  h->w = 0;
  h->gmax = 0;
#if defined(__x86_64__)
  if (h->isa == 2) {
    hweights hw;
    if (hweights_make(&hw, n, k, ksize, nout)) {
      h->w = hw.w;
      h->gmax = hw.gmax;
    } else {
      h->isa = 1;  // out of memory for the weights: SSE4.1 needs none
    }
  }
#endif
}

void vis_hpass_free(vis_hpass *h) {
  free(h->w);
  h->w = 0;
}

void vis_hpass_row(const vis_hpass *h, uint8_t *trow, const uint8_t *srow) {
  if (h->c == 3) {
#if defined(__x86_64__)
    if (h->isa == 2) {
      hweights hw = {h->w, h->gmax};
      horizontal3_avx2(trow, srow, h->sw, h->start, h->n, h->k, h->ksize, h->nout, &hw);
      return;
    }
    if (h->isa == 1) {
      horizontal3_sse41(trow, srow, h->sw, h->start, h->n, h->k, h->ksize, h->nout);
      return;
    }
#endif
    horizontal3_any(trow, srow, h->sw, h->start, h->n, h->k, h->ksize, h->nout);
    return;
  }
  for (int i = 0; i < h->nout; i++) {
    const int32_t *kk = h->k + (long)i * h->ksize;
    const uint8_t *s = srow + h->start[i];
    int32_t s0 = HALF;
    for (int j = 0; j < h->n[i]; j++) s0 += s[j] * kk[j];
    trow[i] = clip8(s0);
  }
}

void vis_horizontal(uint8_t *tmp, int tstride, const uint8_t *src, int sstride, int r0, int r1,
                    int c, const int32_t *start, const int32_t *n, const int32_t *k, int ksize,
                    int nout, int isa) {
  vis_hpass h;
  vis_hpass_init(&h, c, sstride / c, start, n, k, ksize, nout, isa);
  for (int y = r0; y < r1; y++) {
    vis_hpass_row(&h, tmp + (long)(y - r0) * tstride, src + (long)y * sstride);
  }
  vis_hpass_free(&h);
}

// vertical is the body of both builds: each output row's taps summed over the whole row in
// acc (a loop the compiler vectorizes), then clipped and normalized through lut into dst.
static inline __attribute__((always_inline)) void vertical(const vis_vertical_args *a) {
  int32_t *acc = a->acc;
  const int len = a->tstride;
  for (int i = 0; i < a->rows; i++) {
    for (int x = 0; x < len; x++) acc[x] = HALF;
    const int32_t *kk = a->k + (long)i * a->ksize;
    const uint8_t *base = a->tmp + (long)(a->start[i] - a->r0) * a->tstride;
    for (int j = 0; j < a->n[i]; j++) {
      const uint8_t *s = base + (long)j * a->tstride;
      const int32_t w = kk[j];
      for (int x = 0; x < len; x++) acc[x] += s[x] * w;
    }
    for (int x = 0; x < len; x++) acc[x] = clip8(acc[x]);
    float *d = a->dst + a->base + (long)i * a->ow;
    const int plane = a->plane, nx = a->nx;
    if (a->c == 3) {
      const float *l0 = a->lut, *l1 = a->lut + 256, *l2 = a->lut + 512;
      for (int x = 0; x < nx; x++) {
        d[x] = l0[acc[3 * x]];
        d[plane + x] = l1[acc[3 * x + 1]];
        d[2 * plane + x] = l2[acc[3 * x + 2]];
      }
    } else {
      for (int ch = 0; ch < a->oc; ch++) {
        const float *l = a->lut + 256 * ch;
        float *dc = d + (long)ch * plane;
        for (int x = 0; x < nx; x++) dc[x] = l[acc[x]];
      }
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static void vertical_avx2(const vis_vertical_args *a) { vertical(a); }
#endif
static void vertical_any(const vis_vertical_args *a) { vertical(a); }

// The arguments come by value: they hold pointers to Go memory, which cgo lets C have only
// as arguments.
void vis_vertical(vis_vertical_args a) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    vertical_avx2(&a);
    return;
  }
#endif
  vertical_any(&a);
}
