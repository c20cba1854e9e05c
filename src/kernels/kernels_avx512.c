#include "kernels_internal.h"
void lb_kernels_fill_avx512(lb_kernel_table *kt) { (void)kt; }
void lb_kernels_fill_avx512_vnni(lb_kernel_table *kt) { (void)kt; }
