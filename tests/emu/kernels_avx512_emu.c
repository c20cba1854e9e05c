/* src/kernels/kernels_avx512.c compiled against the emulated intrinsics
 * (tests/emu/emu_avx512.h; LB_EMULATE_SIMD comes from CMakeLists.txt). A
 * separate file so that the kernel source's -mavx512* flags (a property of
 * that source file) do not apply to this build. */
#include "kernels/kernels_avx512.c"
