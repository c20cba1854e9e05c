/*
 * lowbit/file.h — read-only file mappings, whole-file reads and atomic writes.
 *
 * Atomic write protocol (used by every lowbit writer): data goes to
 * "<path>.tmp.<pid>.<n>" in the same directory, is fsync'ed, and is renamed
 * over <path> only on lb_atomic_commit. lb_atomic_abort (or a crash) leaves
 * at most a temp file, never a complete-looking <path>.
 */
#ifndef LOWBIT_FILE_H
#define LOWBIT_FILE_H

#include "lowbit/core.h"
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A read-only mapping of a whole file. data is NULL when size is 0. */
typedef struct lb_mapped_file {
    const uint8_t *data;
    size_t size;
    char *path; /* owned copy of the path */
    bool copy;  /* LB_MAP_COPY took effect: private anonymous pages   */
} lb_mapped_file;

/* Map `path` read-only (MAP_PRIVATE). Errors: LB_ERR_IO naming the path. */
lb_status lb_map_file(const char *path, lb_mapped_file *out);

/* lb_map_file flags */
#define LB_MAP_COPY 1u /* read the file into anonymous memory instead       */

/* lb_map_file with flags. LB_MAP_COPY: the file is read (pread) into an
 * anonymous mapping aligned to 2 MiB and advised MADV_HUGEPAGE, then made
 * read-only, so large weight tensors sit on transparent huge pages where
 * the kernel allows them (fewer TLB misses when decode streams every
 * weight once per token; the resident size is the file's, as a fully
 * touched mapping's would be). If that memory cannot be had, or the file
 * is larger than half the machine's physical memory, the file is mapped as
 * by lb_map_file. Errors: LB_ERR_IO naming the path (also for a
 * short read). */
lb_status lb_map_file_ex(const char *path, unsigned flags, lb_mapped_file *out);
/* Make a copy (mf->copy) writable or read-only again (mprotect), e.g. to
 * repack weights in place. LB_ERR_UNSUPPORTED when mf is a file mapping;
 * LB_ERR_IO if mprotect fails. */
lb_status lb_mapped_file_set_writable(lb_mapped_file *mf, bool writable);
/* Give the resident pages of [p, p + n) back to the kernel when the range
 * lies inside mf and mf maps the file (not a copy): madvise MADV_DONTNEED
 * of the whole pages inside the range. The mapping is read-only and
 * private, so those are the file's clean page-cache pages; a later read
 * faults them in again from the file, and the bytes stay valid. Anything
 * else (a copy: its pages would read back as zeros; a range elsewhere) is
 * left alone. Advice: never fails. The process's RSS drops by the pages
 * released; the page cache keeps them while memory allows. */
void lb_mapped_file_release(const lb_mapped_file *mf, const void *p, size_t n);
/* Unmap and free; safe on a zeroed struct. */
void lb_unmap_file(lb_mapped_file *mf);

/* Read a whole file into a NUL-terminated heap buffer (free with free()).
 * Files larger than max_size are rejected with LB_ERR_RANGE. *size_out
 * (optional) receives the length without the NUL. */
lb_status lb_read_file(const char *path, size_t max_size, char **data_out,
                       size_t *size_out);

/* LB_OK if `path` names a regular file (after symlinks); otherwise
 * LB_ERR_NOT_FOUND (missing, "no such file or directory"), or LB_ERR_IO
 * naming the reason (permission, "not a regular file" for devices, FIFOs,
 * sockets). */
lb_status lb_check_regular_file(const char *path);

/* True if `path` names an existing regular file / directory. */
bool lb_is_file(const char *path);
bool lb_is_dir(const char *path);

/* Join directory and file name into a malloc'd string (free with free()). */
char *lb_path_join(const char *dir, const char *name);

/* An output path lowbit may replace: LB_OK if `path` does not exist or is a
 * regular file (after symlinks). A device node, FIFO, socket or directory
 * is refused with LB_ERR_INVALID_ARG ("not a regular file ... refusing to
 * replace it"): an atomic write would rename a regular file over it (e.g.
 * /dev/null as root). Check before any work. */
lb_status lb_check_output_file(const char *path);

/* How two paths relate once resolved (symlinks, "..", relative parts; a
 * path that does not exist yet is resolved through its nearest existing
 * ancestor). */
typedef enum lb_path_relation {
    LB_PATH_UNRELATED = 0,
    LB_PATH_SAME = 1,     /* a and b are the same file or directory */
    LB_PATH_A_INSIDE = 2, /* a lies inside directory b              */
    LB_PATH_B_INSIDE = 3  /* b lies inside directory a              */
} lb_path_relation;
lb_path_relation lb_path_relate(const char *a, const char *b);

/* Temp files of killed atomic writes of `path`: "<path>.tmp.<pid>.<n>"
 * (lb_atomic_open's names) whose process <pid> no longer runs. Each one is
 * removed and named through lb_log(LB_LOG_WARN) ("removed stale temp file
 * ... of an interrupted run (process N)"); files of live processes are
 * left alone. Returns the number removed (best effort: never fails). */
int lb_atomic_remove_stale(const char *path);

/* An output file written atomically. */
typedef struct lb_atomic_file {
    FILE *fp;       /* write through this (buffered)              */
    char *path;     /* final path (owned)                         */
    char *tmp_path; /* temp path in the same directory (owned)    */
    bool failed;    /* set by lb_atomic_write on a short write    */
} lb_atomic_file;

/* Create the temp file for `path`. */
lb_status lb_atomic_open(const char *path, lb_atomic_file *af);
/* fwrite with error tracking; returns LB_ERR_IO on failure (and remembers
 * it, so commit fails too). */
lb_status lb_atomic_write(lb_atomic_file *af, const void *data, size_t size);
/* Write `n` zero bytes (padding). */
lb_status lb_atomic_pad(lb_atomic_file *af, size_t n);
/* Flush, fsync, close and rename into place. On any failure the temp file
 * is removed and the final path is untouched. */
lb_status lb_atomic_commit(lb_atomic_file *af);
/* Close and remove the temp file (safe after commit or on a zeroed struct). */
void lb_atomic_abort(lb_atomic_file *af);

/* Output directories written whole (checkpoints: `export --format hf|gptq`,
 * `quantize --method fp8|nf4|fp4|int8`): files go into a temp directory
 * beside the output, renamed into place at the end, removed on failure.
 *
 * lb_outdir_check: LB_OK if out_dir does not exist or is an empty
 * directory; LB_ERR_INVALID_ARG when it is not a directory or not empty
 * (naming it), LB_ERR_IO when it cannot be examined. Check before work. */
lb_status lb_outdir_check(const char *out_dir);
/* Create "<out_dir>.tmp-<pid>-XXXXXX" (trailing slashes of out_dir
 * dropped), first removing (logged as warnings) such directories of
 * processes no longer running on this host: what a killed run left;
 * *tmp_out is malloc'd (free with free()). LB_ERR_IO naming out_dir. */
lb_status lb_tmpdir_make(const char *out_dir, char **tmp_out);
/* Rename tmp to out_dir (an empty out_dir is replaced). LB_ERR_IO. */
lb_status lb_tmpdir_commit(const char *tmp, const char *out_dir);
/* Remove tmp's plain files, then tmp (best effort; NULL is a no-op). */
void lb_tmpdir_remove(const char *tmp);
/* dir/name <- size bytes of data, atomically (lb_atomic_*). Errors name
 * the file. */
lb_status lb_write_file_in(const char *dir, const char *name, const void *data,
                           size_t size);

#ifdef __cplusplus
}
#endif
#endif /* LOWBIT_FILE_H */
