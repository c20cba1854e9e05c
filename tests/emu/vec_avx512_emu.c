/* src/kernels/vec_avx512.c compiled against the emulated intrinsics
 * (tests/emu/emu_avx512.h; LB_EMULATE_SIMD comes from CMakeLists.txt). */
#include "kernels/vec_avx512.c"
