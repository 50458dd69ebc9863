/* The simulated device that gpumem replay runs on: an allocator given as C functions that hands out
 * address ranges up to a capacity and touches no memory, so a replay needs no GPU. */
#ifndef GPUMEM_TOOLS_SIMULATED_DEVICE_H
#define GPUMEM_TOOLS_SIMULATED_DEVICE_H

#include <gpumem/gpumem.h>

/* Virtual memory, as CUDA's: address ranges reserved without memory, memory mapped into them by the
 * unit (gpumem_allocator_create_vm's default unless given). Only what is mapped counts against the
 * capacity. */
#define SIM_DEVICE_MAP_UNIT ((uint64_t)32 << 20)

struct sim_device {
  uint64_t capacity, reserved, peak_reserved;
  uint64_t next; /* the lowest address not handed out yet */
  uint64_t unit; /* with virtual memory: the bytes mapped at a time; else 0 */
};

/* Sets up d with capacity bytes, over virtual memory mapped unit bytes at a time unless unit is 0,
 * and fns to create the allocator over it (gpumem_allocator_create_functions). */
void sim_device_init(struct sim_device* d, uint64_t capacity, uint64_t unit, gpumem_allocator_functions_t* fns);

#endif
