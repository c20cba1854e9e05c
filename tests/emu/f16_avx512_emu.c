/* src/kernels/f16_avx512.c built with AVX2 flags for test_kernels_emu
 * (LB_EMULATE_SIMD from CMakeLists.txt gives its fill function the _emu
 * name). The file uses only AVX2/F16C intrinsics, so no emulation is
 * needed: this build differs from the library's only in having 16 ymm
 * registers instead of 32 (the compiler spills), which must not change a
 * bit of the results. */
#include "kernels/f16_avx512.c"
