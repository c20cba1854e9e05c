/*
 * cli.h — shared pieces of the lowbit command-line tool: the command table,
 * argument helpers, error printing and the TTY progress line.
 * Only tools/ prints; the library reports through lb_status/lb_last_error.
 */
#ifndef LB_CLI_H
#define LB_CLI_H

#include "lowbit/core.h"

#include <stdbool.h>
#include <stdio.h>

/* Every subcommand: int cmd_NAME(int argc, char **argv), argv[0] = NAME.
 * Returns the process exit code (0 ok, 1 failure, 2 usage error). */
#define LB_CMD(name, summary) int cmd_##name(int argc, char **argv);
#include "commands.h"
#undef LB_CMD

/* Global flags shared by commands. */
typedef struct cli_global {
    bool quiet; /* --quiet: no progress, no info logs   */
    bool json;  /* --json: machine-readable output      */
    int verbose;
} cli_global;
extern cli_global g_cli;

/* Print "lowbit NAME: <lb_last_error()>" to stderr and return 1. */
int cli_fail(const char *cmd, lb_status st);
/* Print a usage error and return 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parse helpers: return false (after printing) on a malformed number. */
bool cli_parse_int(const char *cmd, const char *opt, const char *s, long lo,
                   long hi, long *out);
bool cli_parse_float(const char *cmd, const char *opt, const char *s,
                     double lo, double hi, double *out);
/* Value of option argv[*i] (advances *i). NULL (after printing) when absent. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* Progress: a single updating line on stderr when it is a TTY (with rate and
 * ETA); when stderr is not a TTY (a log file, CI), one plain line per step
 * ("lowbit: [elapsed 00:12] layer 3/24 q,k,v (12/96, 12%)"; a step is the
 * stage text up to its first ':'), at most one a second
 * (LOWBIT_PROGRESS_INTERVAL=S changes that), nothing for work done within
 * the first second; nothing with --quiet. Usable as an lb_progress. The
 * clock restarts when a new phase begins (the total changes or done goes
 * back); a stage text that changes within one phase (e.g. "layer 3/24
 * q,k,v: loss 12.5") keeps it, so the ETA covers the whole phase. */
typedef struct cli_progress {
    double t_start;
    double t_last;
    char stage[128];
    bool active;
    uint64_t last_done, last_total;
    /* stderr not a TTY (logs, CI): plain lines, no \r or escapes */
    double t0, t_line;  /* creation, last line printed                   */
    char line_key[128]; /* the stage up to its first ':' (one step)      */
    int n_lines;
    double line_interval; /* LOWBIT_PROGRESS_INTERVAL (s), default 1       */
} cli_progress;
lb_progress cli_progress_make(cli_progress *p);
/* Finish the line (newline) if one is being shown. */
void cli_progress_done(cli_progress *p);

/* Install the stderr log printer (respecting --quiet / -v). */
void cli_install_logger(void);

/* Read all of standard input (at most max bytes) into a NUL-terminated
 * heap buffer (free with free()); LB_ERR_RANGE beyond max. */
lb_status cli_read_stdin(size_t max, char **out, size_t *len);

/* JSON string escaping to a FILE (for --json output). */
void cli_json_string(FILE *fp, const char *s);

/* Calibration-free `lowbit quantize --method M` (tools/cmd_quantize_nocalib.c):
 * true for the methods it handles (fp8); cmd_quantize hands them over. */
bool cmd_quantize_nocalib_method(const char *method);
int cmd_quantize_nocalib(int argc, char **argv);

/* --fp8-block B|channel|tensor, --fp8-format e4m3|e5m2, --fp8-scale
 * mse|amax at argv[*i] into *q / *rule (value consumed): 1 when it was one
 * of them, 0 when not, -1 after printing a usage error. */
struct lb_fp8_qconfig;
int cli_fp8_option(const char *cmd, int argc, char **argv, int *i,
                   struct lb_fp8_qconfig *q, int *rule);

#endif
