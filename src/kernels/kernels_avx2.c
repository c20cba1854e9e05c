/* placeholder, filled below */
#include "kernels_internal.h"
void lb_kernels_fill_avx2(lb_kernel_table *kt) { (void)kt; }
void lb_quantize_q8_0_avx2(const float *x, void *y, int64_t n) { lb_quantize_row_q8_0_ref(x, y, n); }
void lb_quantize_q8_1_avx2(const float *x, void *y, int64_t n) { lb_quantize_row_q8_1_ref(x, y, n); }
void lb_quantize_q8_K_avx2(const float *x, void *y, int64_t n) { lb_quantize_row_q8_K_ref(x, y, n); }
