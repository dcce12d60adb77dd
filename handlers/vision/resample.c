// The two passes of PIL's bilinear resize (resample.go), in C because Go compiles their
// inner loops to scalar code with bounds checks: at 640x480 the resize took half of the
// preprocessing. The arithmetic is resample.go's, integer for integer, so the output is
// still PIL's. The passes are built for any CPU and for SSE4.1 (horizontal) or AVX2
// (vertical), picked at run time. Callers check every index (resample.go); nothing here checks bounds.

#include <stdint.h>

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
#endif

void vis_horizontal(uint8_t *tmp, int tstride, const uint8_t *src, int sstride, int r0, int r1,
                    int c, const int32_t *start, const int32_t *n, const int32_t *k, int ksize,
                    int nout) {
  void (*h3)(uint8_t *, const uint8_t *, int, const int32_t *, const int32_t *, const int32_t *,
             int, int) = horizontal3_any;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.1")) h3 = horizontal3_sse41;
#endif
  for (int y = r0; y < r1; y++) {
    const uint8_t *srow = src + (long)y * sstride;
    uint8_t *trow = tmp + (long)(y - r0) * tstride;
    if (c == 3) {
      h3(trow, srow, sstride / 3, start, n, k, ksize, nout);
    } else {
      for (int i = 0; i < nout; i++) {
        const int32_t *kk = k + (long)i * ksize;
        const uint8_t *s = srow + start[i];
        int32_t s0 = HALF;
        for (int j = 0; j < n[i]; j++) s0 += s[j] * kk[j];
        trow[i] = clip8(s0);
      }
    }
  }
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
