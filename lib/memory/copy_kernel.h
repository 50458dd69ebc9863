/* The arguments of gpumem's pitched copy kernel, shared by the device code and the host code that
 * launches it, so both see one layout. */
#ifndef GPUMEM_COPY_KERNEL_H
#define GPUMEM_COPY_KERNEL_H

#include <stdint.h>

/* rows = height x depth rows of width bytes; row r is row r % height of slice r / height. */
typedef struct gpumem_copy_rows_s {
  uint64_t dst;
  uint64_t src;
  uint64_t dst_pitch;
  uint64_t src_pitch;
  uint64_t dst_slice_pitch;
  uint64_t src_slice_pitch;
  uint64_t width;
  uint64_t height;
  uint64_t rows;
  uint32_t lanes_per_row; /* a power of two, at most a block: narrow rows share a warp */
  uint32_t pad;
} gpumem_copy_rows_t;

#endif /* GPUMEM_COPY_KERNEL_H */
