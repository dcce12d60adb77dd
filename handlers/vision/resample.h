// The resize's passes in C (resample.c); resample.go calls them.
#include <stdint.h>

// vis_hpass is PIL's horizontal pass over rows of sw pixels of c = 1 or 3 channels to nout
// output pixels, output i reading n[i] pixels from start[i] with weights k[i*ksize:]; isa
// picks the code: -1 the best the CPU runs, else at most 0 (any CPU), 1 (SSE4.1) or 2
// (AVX2). vis_hpass_free frees what vis_hpass_init made (the weights in AVX2's layout;
// without the memory for them, init picks SSE4.1). It keeps the pointers it is given: init, rows and free
// run in one call from Go.
typedef struct {
  int c, sw, ksize, nout, isa;
  const int32_t *start, *n, *k;
  int16_t *w;
  int gmax;
} vis_hpass;

void vis_hpass_init(vis_hpass *h, int c, int sw, const int32_t *start, const int32_t *n,
                   const int32_t *k, int ksize, int nout, int isa);
void vis_hpass_row(const vis_hpass *h, uint8_t *trow, const uint8_t *srow);
void vis_hpass_free(vis_hpass *h);

// vis_horizontal runs the horizontal pass over source rows [r0, r1) of src (rows sstride
// bytes apart) into tmp (rows tstride bytes apart).
void vis_horizontal(uint8_t *tmp, int tstride, const uint8_t *src, int sstride, int r0, int r1,
                    int c, const int32_t *start, const int32_t *n, const int32_t *k, int ksize,
                    int nout, int isa);

// vis_isa returns the code vis_hpass runs for isa on this CPU.
int vis_isa(int isa);

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
