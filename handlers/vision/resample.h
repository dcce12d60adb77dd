// The resize's passes in C (resample.c); resample.go calls them.
#include <stdint.h>

// vis_horizontal is PIL's horizontal pass over source rows [r0, r1) of src (c = 1 or 3
// channels, rows sstride bytes apart) into tmp (rows tstride bytes apart), nout output
// pixels, output i reading n[i] pixels from start[i] with weights k[i*ksize:].
void vis_horizontal(uint8_t *tmp, int tstride, const uint8_t *src, int sstride, int r0, int r1,
                    int c, const int32_t *start, const int32_t *n, const int32_t *k, int ksize,
                    int nout);

// vis_vertical_args is one vertical pass: output row i sums n[i] rows of tmp from row
// start[i] - r0 with weights k[i*ksize:] into acc (tstride ints), then writes nx pixels of
// each of oc planes (plane floats apart) of dst at base + i*ow, through lut ([oc][256]).
typedef struct {
  float *dst;
  int base, ow, plane, nx, oc;
  const uint8_t *tmp;
  int tstride, r0, c;
  const int32_t *start, *n, *k;
  int ksize, rows;
  const float *lut;
  int32_t *acc;
} vis_vertical_args;

// vis_vertical runs the vertical pass, with AVX2 where the CPU has it.
void vis_vertical(vis_vertical_args a);
