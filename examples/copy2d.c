/* A pitched 2D copy: a block of a host matrix into device memory and back.
 *
 * Each side of gpumem_copy2d() is a pointer with a pitch (the bytes from one row to the next)
 * and an offset in bytes (x) and rows (y); width is in bytes. Here a 100 x 50 block of floats at
 * (row 10, column 20) of a 1000 x 300 host matrix goes to the top left of a device buffer with
 * 512-byte rows, and comes back into a second host matrix. Needs a GPU: without one it says so
 * and returns 77. */
#include <gpumem/gpumem.h>
#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 300, COLS = 1000, BLOCK_ROWS = 50, BLOCK_COLS = 100, ROW0 = 10, COL0 = 20, DEVICE_PITCH = 512 };

int main(void) {
  void* device = NULL;
  gpumem_status_t st = gpumem_device_alloc(0, (size_t)DEVICE_PITCH * BLOCK_ROWS, &device);
  if (st == GPUMEM_ERROR_NO_DRIVER || st == GPUMEM_ERROR_NO_DEVICE) {
    printf("no GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  if (st != GPUMEM_SUCCESS) {
    fprintf(stderr, "gpumem_device_alloc: %s\n", gpumem_last_error_detail());
    return 1;
  }
  float* in = malloc(sizeof(float) * ROWS * COLS);
  float* out = calloc((size_t)ROWS * COLS, sizeof(float));
  for (int i = 0; i < ROWS * COLS; i++) in[i] = (float)i;

  gpumem_copy2d_t c = GPUMEM_COPY2D_INIT; /* host block -> device */
  c.src = in;
  c.src_pitch = sizeof(float) * COLS;
  c.src_x = sizeof(float) * COL0;
  c.src_y = ROW0;
  c.dst = device;
  c.dst_pitch = DEVICE_PITCH;
  c.width = sizeof(float) * BLOCK_COLS;
  c.height = BLOCK_ROWS;
  st = gpumem_copy2d(&c);

  gpumem_copy2d_t back = GPUMEM_COPY2D_INIT; /* device -> the same place in another host matrix */
  back.src = device;
  back.src_pitch = DEVICE_PITCH;
  back.dst = out;
  back.dst_pitch = sizeof(float) * COLS;
  back.dst_x = sizeof(float) * COL0;
  back.dst_y = ROW0;
  back.width = c.width;
  back.height = c.height;
  if (st == GPUMEM_SUCCESS) st = gpumem_copy2d(&back);
  if (st != GPUMEM_SUCCESS) fprintf(stderr, "gpumem_copy2d: %s\n", gpumem_last_error_detail());

  /* The block came back where it was, and nothing around it was written. */
  int wrong = 0;
  for (int r = 0; r < ROWS; r++)
    for (int col = 0; col < COLS; col++) {
      const int inside = r >= ROW0 && r < ROW0 + BLOCK_ROWS && col >= COL0 && col < COL0 + BLOCK_COLS;
      wrong += out[r * COLS + col] != (inside ? in[r * COLS + col] : 0.0f);
    }
  printf("copied a %d x %d block through device rows of %d bytes: %d wrong elements\n", BLOCK_ROWS, BLOCK_COLS,
         DEVICE_PITCH, wrong);
  gpumem_device_free(device);
  free(in);
  free(out);
  return st == GPUMEM_SUCCESS && wrong == 0 ? 0 : 1;
}
