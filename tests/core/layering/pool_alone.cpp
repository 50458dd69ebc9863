// Compiles: pool/ with the folders it uses, and no CUDA header on the include path.
#include "pool/pool.hpp"
