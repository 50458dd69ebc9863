// Must not compile: pool/ does not use driver/ (the pool's algorithm knows nothing of CUDA).
#include "driver/driver.hpp"
#include "pool/pool.hpp"
