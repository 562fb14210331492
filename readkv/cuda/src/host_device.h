// KVGATE_TILE_HD: a function of the tile reader that compiles for the host (so a CPU test proves
// it) and inlines into device code under nvcc.
#pragma once

#if defined(__CUDACC__)
#define KVGATE_TILE_HD __host__ __device__ __forceinline__
#else
#define KVGATE_TILE_HD inline
#endif
