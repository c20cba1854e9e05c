/*
 * emu_amx.c — AMX-TILE / AMX-INT8 emulation state and instructions for
 * emu_avx512.h (tests only). Semantics: Intel SDM Vol. 2 (LDTILECFG,
 * TILELOADD, TILESTORED, TILEZERO, TILERELEASE, TDPBSSD/TDPBSUD/TDPBUSD/
 * TDPBUUD) and the Intrinsics Guide pseudo-code; palette 1 only (8 tiles of
 * at most 16 rows x 64 bytes, as on Sapphire Rapids).
 *
 * The tile configuration and the tile registers are per thread, as on
 * hardware (XSAVE state): a thread that never loaded a configuration, or
 * released it, faults on any tile instruction. Faults (#GP/#UD on hardware)
 * print the reason and abort. Checks are at least as strict as the
 * hardware's: a tile whose rows/colsb are zero in the configuration is
 * "not configured" and using it faults.
 */
#include "emu_avx512.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

enum { EMU_TILES = 8, EMU_ROWS = 16, EMU_COLSB = 64 };

typedef struct {
    int configured; /* TILES_CONFIGURED */
    uint8_t palette, start_row;
    uint16_t colsb[EMU_TILES];
    uint8_t rows[EMU_TILES];
    uint8_t t[EMU_TILES][EMU_ROWS][EMU_COLSB];
} emu_amx;

static _Thread_local emu_amx g_amx;
static long g_n_loadconfig, g_n_release; /* updated atomically */

void lb_emu_fault(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("emu_avx512: fault (the hardware would trap): ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static void zero_all(emu_amx *s) { memset(s->t, 0, sizeof s->t); }

void lb_emu_tile_loadconfig(const void *mem) {
    const uint8_t *c = mem;
    emu_amx *s = &g_amx;
    __atomic_add_fetch(&g_n_loadconfig, 1, __ATOMIC_RELAXED);
    if (c[0] == 0) { /* palette 0: INIT state for TILECFG and TILEDATA */
        memset(s, 0, sizeof *s);
        return;
    }
    if (c[0] != 1) lb_emu_fault("#GP: LDTILECFG palette %u (only 1 exists)", c[0]);
    for (int i = 2; i < 16; i++)
        if (c[i]) lb_emu_fault("#GP: LDTILECFG reserved byte %d = %u", i, c[i]);
    for (int i = 32; i < 48; i++)
        if (c[i]) lb_emu_fault("#GP: LDTILECFG reserved byte %d = %u (colsb of tile >= 8)", i, c[i]);
    for (int i = 56; i < 64; i++)
        if (c[i]) lb_emu_fault("#GP: LDTILECFG reserved byte %d = %u (rows of tile >= 8)", i, c[i]);
    uint16_t colsb[EMU_TILES];
    uint8_t rows[EMU_TILES];
    for (int n = 0; n < EMU_TILES; n++) {
        colsb[n] = (uint16_t)(c[16 + 2 * n] | (c[17 + 2 * n] << 8));
        rows[n] = c[48 + n];
        if (colsb[n] > EMU_COLSB || rows[n] > EMU_ROWS)
            lb_emu_fault("#GP: LDTILECFG tile %d: %u rows x %u bytes exceeds 16 x 64", n, rows[n],
                         colsb[n]);
        if ((colsb[n] == 0) != (rows[n] == 0))
            lb_emu_fault("#GP: LDTILECFG tile %d: rows %u, colsb %u (both or neither zero)", n,
                         rows[n], colsb[n]);
    }
    s->configured = 1;
    s->palette = 1;
    s->start_row = c[1];
    memcpy(s->colsb, colsb, sizeof colsb);
    memcpy(s->rows, rows, sizeof rows);
    zero_all(s);
}

void lb_emu_tile_storeconfig(void *mem) {
    uint8_t *c = mem;
    const emu_amx *s = &g_amx;
    memset(c, 0, 64);
    if (!s->configured) return;
    c[0] = s->palette;
    c[1] = s->start_row;
    for (int n = 0; n < EMU_TILES; n++) {
        c[16 + 2 * n] = (uint8_t)(s->colsb[n] & 0xFF);
        c[17 + 2 * n] = (uint8_t)(s->colsb[n] >> 8);
        c[48 + n] = s->rows[n];
    }
}

void lb_emu_tile_release(void) {
    __atomic_add_fetch(&g_n_release, 1, __ATOMIC_RELAXED);
    memset(&g_amx, 0, sizeof g_amx);
}

int lb_emu_tile_configured(void) { return g_amx.configured; }

void lb_emu_tile_counts(long *n_loadconfig, long *n_release) {
    *n_loadconfig = __atomic_load_n(&g_n_loadconfig, __ATOMIC_RELAXED);
    *n_release = __atomic_load_n(&g_n_release, __ATOMIC_RELAXED);
}

/* The calling thread's state, checked for an instruction using tile t. */
static emu_amx *use_tile(const char *insn, int t) {
    emu_amx *s = &g_amx;
    if (!s->configured)
        lb_emu_fault("#UD: %s with no tile configuration in this thread (_tile_loadconfig "
                     "missing, or after _tile_release)", insn);
    if (t < 0 || t >= EMU_TILES) lb_emu_fault("#UD: %s: tile %d does not exist", insn, t);
    if (s->rows[t] == 0) lb_emu_fault("#UD: %s: tile %d is not configured", insn, t);
    return s;
}

void lb_emu_tile_loadd(int dst, const void *base, long long stride) {
    emu_amx *s = use_tile("TILELOADD", dst);
    const int rows = s->rows[dst], colsb = s->colsb[dst];
    int start = s->start_row;
    if (start == 0) memset(s->t[dst], 0, sizeof s->t[dst]);
    for (; start < rows; start++) {
        const uint8_t *p = (const uint8_t *)base + (long long)start * stride;
        memcpy(s->t[dst][start], p, (size_t)colsb);
        memset(s->t[dst][start] + colsb, 0, (size_t)(EMU_COLSB - colsb));
    }
    for (int r = rows; r < EMU_ROWS; r++) memset(s->t[dst][r], 0, EMU_COLSB);
    s->start_row = 0;
}

void lb_emu_tile_stored(int src, void *base, long long stride) {
    emu_amx *s = use_tile("TILESTORED", src);
    for (int r = s->start_row; r < s->rows[src]; r++)
        memcpy((uint8_t *)base + (long long)r * stride, s->t[src][r], s->colsb[src]);
    s->start_row = 0;
}

void lb_emu_tile_zero(int dst) {
    emu_amx *s = use_tile("TILEZERO", dst);
    memset(s->t[dst], 0, sizeof s->t[dst]);
}

void lb_emu_tile_dpb(int dst, int src1, int src2, int a_signed, int b_signed) {
    static const char *const names[2][2] = {{"TDPBUUD", "TDPBUSD"}, {"TDPBSUD", "TDPBSSD"}};
    const char *insn = names[a_signed != 0][b_signed != 0];
    emu_amx *s = use_tile(insn, dst);
    use_tile(insn, src1);
    use_tile(insn, src2);
    if (dst == src1 || dst == src2 || src1 == src2)
        lb_emu_fault("#UD: %s tmm%d, tmm%d, tmm%d: registers must differ", insn, dst, src1, src2);
    const int m_rows = s->rows[dst], n_cols = s->colsb[dst] / 4, k_dw = s->colsb[src1] / 4;
    if (s->colsb[dst] % 4 || s->colsb[src1] % 4 || s->colsb[src2] % 4)
        lb_emu_fault("#UD: %s: colsb not a multiple of 4 (%u, %u, %u)", insn, s->colsb[dst],
                     s->colsb[src1], s->colsb[src2]);
    if (s->rows[src1] != m_rows)
        lb_emu_fault("#UD: %s: dst rows %d != src1 rows %u", insn, m_rows, s->rows[src1]);
    if (s->rows[src2] != k_dw)
        lb_emu_fault("#UD: %s: src1 colsb/4 %d != src2 rows %u", insn, k_dw, s->rows[src2]);
    if (s->colsb[src2] != s->colsb[dst])
        lb_emu_fault("#UD: %s: dst colsb %u != src2 colsb %u", insn, s->colsb[dst],
                     s->colsb[src2]);
    uint8_t(*C)[EMU_COLSB] = s->t[dst];
    const uint8_t(*A)[EMU_COLSB] = (const uint8_t(*)[EMU_COLSB])s->t[src1];
    const uint8_t(*B)[EMU_COLSB] = (const uint8_t(*)[EMU_COLSB])s->t[src2];
    for (int m = 0; m < m_rows; m++) {
        uint32_t tmp[EMU_COLSB / 4];
        memcpy(tmp, C[m], sizeof tmp);
        for (int k = 0; k < k_dw; k++)
            for (int n = 0; n < n_cols; n++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t x = A[m][4 * k + i], y = B[k][4 * n + i];
                    const int32_t xv = a_signed ? (int32_t)(int8_t)x : (int32_t)x;
                    const int32_t yv = b_signed ? (int32_t)(int8_t)y : (int32_t)y;
                    tmp[n] += (uint32_t)(xv * yv); /* |product| <= 2^16: no overflow */
                }
        memcpy(C[m], tmp, (size_t)n_cols * 4); /* write_row_and_zero */
        memset(C[m] + 4 * n_cols, 0, (size_t)(EMU_COLSB - 4 * n_cols));
    }
    for (int m = m_rows; m < EMU_ROWS; m++) memset(C[m], 0, EMU_COLSB); /* zero_upper_rows */
    s->start_row = 0;
}
