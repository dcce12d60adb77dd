// A baseline Huffman decoder that takes the place of libjpeg's own (libjpeg-turbo 2.1's
// decode_mcu) in a decode begun by the libjpeg API: the same coefficients, state and
// warnings, each code and its extra bits read in one table look-up where they fit.
#ifndef TORCHD_JPEGHUFF_H
#define TORCHD_JPEGHUFF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

// jh_install replaces d's entropy decoder after jpeg_start_decompress, before any
// scanline is read, where the file is one sequential Huffman scan of 8-bit samples, and
// says whether it did (otherwise libjpeg's own decodes it). d's source must hold all the
// data (jpeg_mem_src). It keeps its state in d->client_data, which must be NULL, and in d's
// image pool.
int jh_install(j_decompress_ptr d);

#endif
