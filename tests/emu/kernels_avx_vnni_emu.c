/* src/kernels/kernels_avx_vnni.c compiled without -mavxvnni, its vpdpbusd
 * emulated (tests/emu/emu_avx512.h; LB_EMULATE_SIMD comes from
 * CMakeLists.txt), so the AVX-VNNI kernels run on CPUs without AVX-VNNI
 * (Zen 4, Zen 3, Skylake-X, Ice Lake). */
#include "kernels/kernels_avx_vnni.c"
