/* File mappings, whole-file reads and atomic (temp + rename) writes. */
#include "lowbit/file.h"
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

void *lb_map_huge(size_t n) {
    const size_t huge = (size_t)2 << 20;
    const long psz = sysconf(_SC_PAGESIZE);
    const size_t page = psz > 0 ? (size_t)psz : 4096;
    if (n == 0 || n > SIZE_MAX - huge) {
        errno = n ? ENOMEM : EINVAL;
        return NULL;
    }
    uint8_t *raw = mmap(NULL, n + huge, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    const size_t len = (n + page - 1) / page * page;
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + n + huge > p + len) munmap(p + len, (size_t)(raw + n + huge - (p + len)));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice: refused is fine */
#endif
    return p;
}

/* The file's bytes in lb_map_huge memory, read-only afterwards; NULL
 * (errno set) on failure. */
static void *copy_to_anon(int fd, size_t size) {
    /* a file that would take more than half the machine's memory stays
     * mapped (pages the kernel can drop and re-read) */
    const long phys = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (phys > 0 && psz > 0 && size > (size_t)phys / 2 * (size_t)psz) {
        errno = ENOMEM;
        return NULL;
    }
    uint8_t *p = lb_map_huge(size);
    if (!p) return NULL;
    const size_t page = psz > 0 ? (size_t)psz : 4096;
    const size_t len = (size + page - 1) / page * page;
    size_t off = 0;
    while (off < size) {
        ssize_t r = pread(fd, p + off, size - off, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO; /* r == 0: the file shrank */
            munmap(p, len);
            errno = e;
            return NULL;
        }
        off += (size_t)r;
    }
    if (mprotect(p, len, PROT_READ) != 0) {
        int e = errno;
        munmap(p, len);
        errno = e;
        return NULL;
    }
    return p;
}

lb_status lb_map_file(const char *path, lb_mapped_file *out) {
    return lb_map_file_ex(path, 0, out);
}

lb_status lb_map_file_ex(const char *path, unsigned flags, lb_mapped_file *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lb_set_error(LB_ERR_IO, "%s: cannot open: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return lb_set_error(LB_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    void *p = NULL;
    bool copied = false;
    if (size > 0 && (flags & LB_MAP_COPY)) {
        p = copy_to_anon(fd, size);
        copied = p != NULL;
        if (!p && errno != ENOMEM) {
            int e = errno;
            close(fd);
            return lb_set_error(LB_ERR_IO, "%s: cannot read: %s", path, strerror(e));
        }
    }
    if (size > 0 && !p) {
        p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return lb_set_error(LB_ERR_IO, "%s: mmap failed: %s", path,
                                strerror(e));
        }
    }
    close(fd);
    out->copy = p && (flags & LB_MAP_COPY) && copied;
    out->data = p;
    out->size = size;
    out->path = lb_strdup(path);
    if (!out->path) {
        lb_unmap_file(out);
        return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", path);
    }
    return LB_OK;
}

lb_status lb_mapped_file_set_writable(lb_mapped_file *mf, bool writable) {
    if (!mf || !mf->copy || !mf->data)
        return lb_set_error(LB_ERR_UNSUPPORTED, "%s: not a private copy",
                            mf && mf->path ? mf->path : "mapping");
    const long psz = sysconf(_SC_PAGESIZE);
    const size_t page = psz > 0 ? (size_t)psz : 4096;
    const size_t len = (mf->size + page - 1) / page * page;
    if (mprotect((void *)mf->data, len, PROT_READ | (writable ? PROT_WRITE : 0)) != 0)
        return lb_set_error(LB_ERR_IO, "%s: mprotect: %s", mf->path ? mf->path : "mapping",
                            strerror(errno));
    return LB_OK;
}

void lb_mapped_file_release(const lb_mapped_file *mf, const void *p, size_t n) {
    if (!mf || !mf->data || mf->copy || !p || !n) return;
    const uintptr_t a = (uintptr_t)p, lo = (uintptr_t)mf->data;
    if (a < lo || n > mf->size || a - lo > mf->size - n) return;
    lb_drop_pages(p, n);
}

void lb_drop_pages(const void *p, size_t n) {
    if (!p || !n) return;
    const long psz = sysconf(_SC_PAGESIZE);
    const uintptr_t ps = psz > 0 ? (uintptr_t)psz : 4096;
    const uintptr_t a = (uintptr_t)p;
    const uintptr_t a1 = (a + ps - 1) & ~(ps - 1), e1 = (a + n) & ~(ps - 1);
    if (e1 > a1) (void)madvise((void *)a1, e1 - a1, MADV_DONTNEED);
}

/* Spill space (core/internal.h): an unlinked temporary file in dir, its
 * blocks reserved (posix_fallocate), mapped shared and writable. */
lb_status lb_spill_map(const char *dir, size_t n, const char *what,
                       void **out) {
    *out = NULL;
    if (!what) what = "spill";
    if (!dir || !*dir)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: no spill directory", what);
    if (n == 0 || n > (size_t)INT64_MAX)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: spill size %zu", what, n);
    struct stat st;
    if (stat(dir, &st) != 0)
        return lb_set_error(errno == ENOENT ? LB_ERR_NOT_FOUND : LB_ERR_IO,
                            "spill directory %s (for the %s): %s", dir, what,
                            strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return lb_set_error(LB_ERR_IO, "spill directory %s (for the %s): not "
                            "a directory", dir, what);
    int fd = -1, err = 0;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    err = fd < 0 ? errno : 0;
    /* EOPNOTSUPP: the file system has no O_TMPFILE; EISDIR / EINVAL: the
     * kernel has none: a named file, unlinked at once */
    if (fd < 0 && err != EOPNOTSUPP && err != EISDIR && err != EINVAL)
        return lb_set_error(LB_ERR_IO, "spill directory %s: cannot create a "
                            "temporary file for the %s: %s", dir, what,
                            strerror(err));
#endif
    if (fd < 0) {
        char *tmpl = lb_path_join(dir, "lowbit-spill-XXXXXX");
        if (!tmpl) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", what);
        fd = mkostemp(tmpl, O_CLOEXEC);
        err = errno;
        if (fd >= 0) unlink(tmpl);
        free(tmpl);
        if (fd < 0)
            return lb_set_error(LB_ERR_IO, "spill directory %s: cannot "
                                "create a temporary file for the %s: %s", dir,
                                what, strerror(err));
    }
    struct statfs fs;
    if (fstatfs(fd, &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */)
        lb_log(LB_LOG_WARN, "spill directory %s is on tmpfs: the %s stay in "
               "memory (shmem) there; a directory on a disk file system "
               "takes them out of it", dir, what);
    /* the blocks are reserved now: a full disk fails here, not with a
     * SIGBUS at a later write through the mapping */
    err = posix_fallocate(fd, 0, (off_t)n);
    if (err == EOPNOTSUPP || err == EINVAL) {
        /* no fallocate on this file system (glibc emulates it where it
         * can): the size only, blocks allocated as pages are written */
        lb_log(LB_LOG_WARN, "spill directory %s: cannot reserve %zu bytes "
               "(%s); a full disk would stop the run later", dir, n,
               strerror(err));
        err = ftruncate(fd, (off_t)n) == 0 ? 0 : errno;
    }
    if (err) {
        close(fd);
        const bool full = err == ENOSPC || err == EDQUOT || err == EFBIG;
        return lb_set_error(LB_ERR_IO, "spill directory %s: cannot reserve "
                            "%.1f MiB for the %s: %s%s", dir,
                            (double)n / 1048576.0, what, strerror(err),
                            full ? " (free that much space there, or choose "
                                   "another directory)"
                                 : "");
    }
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    err = errno;
    close(fd); /* the mapping holds the file until munmap */
    if (p == MAP_FAILED)
        return lb_set_error(LB_ERR_IO, "spill directory %s: cannot map the "
                            "%s (%zu bytes): %s", dir, what, n, strerror(err));
    *out = p;
    return LB_OK;
}

void lb_spill_unmap(void *p, size_t n) {
    if (p && n) munmap(p, n);
}

void lb_unmap_file(lb_mapped_file *mf) {
    if (!mf) return;
    if (mf->data && mf->size) munmap((void *)mf->data, mf->size);
    free(mf->path);
    memset(mf, 0, sizeof *mf);
}

lb_status lb_read_file(const char *path, size_t max_size, char **data_out,
                       size_t *size_out) {
    *data_out = NULL;
    if (lb_is_dir(path))
        return lb_set_error(LB_ERR_IO, "%s: is a directory, not a file", path);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return lb_set_error(LB_ERR_IO, "%s: cannot open: %s", path,
                            strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(fp);
        return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (len == cap) {
            if (cap >= max_size) {
                free(buf);
                fclose(fp);
                return lb_set_error(LB_ERR_RANGE,
                                    "%s: larger than the %zu-byte limit", path,
                                    max_size);
            }
            size_t ncap = cap * 2 > max_size ? max_size : cap * 2;
            if (ncap <= cap) ncap = cap + 1;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                fclose(fp);
                return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t n = fread(buf + len, 1, cap - len, fp);
        len += n;
        if (n == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(buf);
        return lb_set_error(LB_ERR_IO, "%s: read error", path);
    }
    if (len > max_size) {
        free(buf);
        return lb_set_error(LB_ERR_RANGE, "%s: larger than the %zu-byte limit",
                            path, max_size);
    }
    buf[len] = '\0';
    *data_out = buf;
    if (size_out) *size_out = len;
    return LB_OK;
}

bool lb_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

lb_status lb_check_regular_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return lb_set_error(LB_ERR_NOT_FOUND, "%s: no such file or directory", path);
        return lb_set_error(LB_ERR_IO, "%s: cannot access: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode))
        return lb_set_error(LB_ERR_IO, "%s: not a regular file", path);
    return LB_OK;
}

bool lb_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *lb_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    bool slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a++] = '/';
    memcpy(p + a, name, b + 1);
    return p;
}

lb_status lb_check_output_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return LB_OK; /* a new file (or the writer reports why not) */
    if (S_ISREG(st.st_mode)) return LB_OK;
    return lb_set_error(LB_ERR_INVALID_ARG,
                        "%s: not a regular file (%s): refusing to replace it",
                        path,
                        S_ISDIR(st.st_mode)    ? "a directory"
                        : S_ISFIFO(st.st_mode) ? "a FIFO"
                        : S_ISSOCK(st.st_mode) ? "a socket"
                        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device node"
                                                                     : "not a file");
}

/* realpath of `path`, or of its nearest existing ancestor followed by the
 * rest of the path (a path to be created); false if none resolves. */
static bool resolve_path(const char *path, char *out) {
    if (realpath(path, out)) return true;
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, path, n + 1);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    const char *rest;
    char parent[PATH_MAX];
    if (!slash) {
        rest = buf;
        if (!getcwd(parent, sizeof parent)) return false;
    } else {
        *slash = '\0';
        rest = slash + 1;
        if (!resolve_path(buf[0] ? buf : "/", parent)) return false;
    }
    if (!strcmp(rest, ".") || !rest[0]) {
        memcpy(out, parent, strlen(parent) + 1);
        return true;
    }
    if (!strcmp(rest, "..")) return false; /* not worth resolving by hand */
    int k = snprintf(out, PATH_MAX, "%s/%s", strcmp(parent, "/") ? parent : "", rest);
    return k > 0 && k < PATH_MAX;
}

static bool path_under(const char *in, const char *dir) {
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/') return in[0] == '/' && in[1];
    return !strncmp(in, dir, n) && in[n] == '/';
}

lb_path_relation lb_path_relate(const char *a, const char *b) {
    char *ra = malloc(PATH_MAX), *rb = malloc(PATH_MAX);
    lb_path_relation r = LB_PATH_UNRELATED;
    if (ra && rb && resolve_path(a, ra) && resolve_path(b, rb)) {
        struct stat sa, sb;
        if (!strcmp(ra, rb) || (stat(ra, &sa) == 0 && stat(rb, &sb) == 0 &&
                                sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino))
            r = LB_PATH_SAME;
        else if (path_under(ra, rb)) r = LB_PATH_A_INSIDE;
        else if (path_under(rb, ra)) r = LB_PATH_B_INSIDE;
    }
    free(ra);
    free(rb);
    return r;
}

bool lb_pid_alive(long pid) {
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* The directory of path's first n bytes into dir ("." without a slash) and
 * the name after it, its length in *bl; NULL when dir would not fit or the
 * name is empty. */
static const char *split_parent(const char *path, size_t n, char dir[PATH_MAX], size_t *bl) {
    const char *slash = memrchr(path, '/', n);
    const size_t dl = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    if (dl >= PATH_MAX) return NULL;
    memcpy(dir, slash ? path : ".", dl);
    dir[dl] = '\0';
    const char *base = slash ? slash + 1 : path;
    *bl = n - (size_t)(base - path);
    return *bl ? base : NULL;
}

/* The writer's PID in directory entry nm when it reads <base><tag><pid><sep>
 * (*rest: what follows sep), else 0. */
static long entry_pid(const char *nm, const char *base, size_t bl, const char *tag, char sep,
                      const char **rest) {
    const size_t tl = strlen(tag);
    if (strncmp(nm, base, bl) || strncmp(nm + bl, tag, tl)) return 0;
    const char *q = nm + bl + tl;
    char *end;
    errno = 0;
    const long pid = strtol(q, &end, 10);
    if (errno || end == q || *end != sep || pid <= 0) return 0;
    *rest = end + 1;
    return pid;
}

int lb_atomic_remove_stale(const char *path) {
    char dir[PATH_MAX];
    size_t bl;
    const char *base = split_parent(path, strlen(path), dir, &bl);
    DIR *d = base ? opendir(dir) : NULL;
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* <base>.tmp.<pid>.<n>, digits only */
        const char *nm = e->d_name, *q2;
        const long pid = entry_pid(nm, base, bl, ".tmp.", '.', &q2);
        if (!pid || !*q2 || q2[strspn(q2, "0123456789")]) continue;
        if (lb_pid_alive(pid))
            continue; /* a live process (perhaps another run): not ours to remove */
        char *f = lb_path_join(dir, nm);
        struct stat st;
        if (f && lstat(f, &st) == 0 && S_ISREG(st.st_mode) && unlink(f) == 0) {
            lb_log(LB_LOG_WARN, "removed %s: the temp file of an interrupted run "
                   "(process %ld, no longer running; %lld bytes)", f, pid,
                   (long long)st.st_size);
            removed++;
        }
        free(f);
    }
    closedir(d);
    return removed;
}

static atomic_uint tmp_counter = 0;

lb_status lb_atomic_open(const char *path, lb_atomic_file *af) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 64;
    af->path = lb_strdup(path);
    af->tmp_path = malloc(n);
    if (!af->path || !af->tmp_path) {
        lb_atomic_abort(af);
        return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(af->tmp_path, n, "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    int fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        lb_status st = lb_set_error(LB_ERR_IO, "%s: cannot create: %s",
                                    af->tmp_path, strerror(errno));
        free(af->tmp_path);
        af->tmp_path = NULL;
        lb_atomic_abort(af);
        return st;
    }
    af->fp = fdopen(fd, "wb");
    if (!af->fp) {
        close(fd);
        lb_atomic_abort(af);
        return lb_set_error(LB_ERR_IO, "%s: fdopen failed", path);
    }
    return LB_OK;
}

lb_status lb_atomic_write(lb_atomic_file *af, const void *data, size_t size) {
    if (af->failed) return lb_set_error(LB_ERR_IO, "%s: earlier write failed", af->path);
    if (size && fwrite(data, 1, size, af->fp) != size) {
        af->failed = true;
        return lb_set_error(LB_ERR_IO, "%s: write failed: %s", af->tmp_path,
                            strerror(errno));
    }
    return LB_OK;
}

lb_status lb_atomic_pad(lb_atomic_file *af, size_t n) {
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t k = n > sizeof zeros ? sizeof zeros : n;
        LB_TRY(lb_atomic_write(af, zeros, k));
        n -= k;
    }
    return LB_OK;
}

lb_status lb_atomic_commit(lb_atomic_file *af) {
    lb_status st = LB_OK;
    if (af->failed) st = lb_set_error(LB_ERR_IO, "%s: a write failed", af->path);
    if (st == LB_OK && fflush(af->fp) != 0)
        st = lb_set_error(LB_ERR_IO, "%s: flush failed: %s", af->tmp_path,
                          strerror(errno));
    if (st == LB_OK && fsync(fileno(af->fp)) != 0)
        st = lb_set_error(LB_ERR_IO, "%s: fsync failed: %s", af->tmp_path,
                          strerror(errno));
    if (af->fp && fclose(af->fp) != 0 && st == LB_OK)
        st = lb_set_error(LB_ERR_IO, "%s: close failed: %s", af->tmp_path,
                          strerror(errno));
    af->fp = NULL;
    if (st == LB_OK && rename(af->tmp_path, af->path) != 0)
        st = lb_set_error(LB_ERR_IO, "%s: rename into place failed: %s",
                          af->path, strerror(errno));
    if (st == LB_OK) {
        free(af->tmp_path);
        af->tmp_path = NULL;
    }
    lb_atomic_abort(af);
    return st;
}

void lb_atomic_abort(lb_atomic_file *af) {
    if (!af) return;
    if (af->fp) fclose(af->fp);
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->tmp_path);
    free(af->path);
    memset(af, 0, sizeof *af);
}

/* ---- output directories (lowbit/file.h) ----------------------------------- */

lb_status lb_outdir_check(const char *out_dir) {
    struct stat sb;
    if (stat(out_dir, &sb) != 0) {
        if (errno == ENOENT) return LB_OK;
        return lb_set_error(LB_ERR_IO, "%s: %s", out_dir, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: exists and is not a directory", out_dir);
    DIR *d = opendir(out_dir);
    if (!d) return lb_set_error(LB_ERR_IO, "%s: cannot list the directory", out_dir);
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
    closedir(d);
    if (!empty)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: exists and is not empty (the checkpoint is written into a new "
                            "or empty directory)",
                            out_dir);
    return LB_OK;
}

/* Remove the directories "<base>.tmp-<pid>-XXXXXX" beside out (its first n
 * bytes) that lb_tmpdir_make made for a process no longer running (a run
 * killed before its rename), logging each; a live or unreadable one is
 * left alone. */
static void tmpdir_remove_stale(const char *out, size_t n) {
    char dir[PATH_MAX];
    size_t bl;
    const char *base = split_parent(out, n, dir, &bl);
    DIR *d = base ? opendir(dir) : NULL;
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* <base>.tmp-<pid>-XXXXXX (mkdtemp's six characters) */
        const char *nm = e->d_name, *x;
        const long pid = entry_pid(nm, base, bl, ".tmp-", '-', &x);
        if (!pid || strlen(x) != 6) continue;
        if (lb_pid_alive(pid))
            continue; /* a live process (perhaps another run): not ours to remove */
        char *f = lb_path_join(dir, nm);
        struct stat st;
        if (f && lstat(f, &st) == 0 && S_ISDIR(st.st_mode)) {
            lb_tmpdir_remove(f);
            if (lstat(f, &st) != 0)
                lb_log(LB_LOG_WARN, "removed %s: the temp directory of an interrupted run "
                       "(process %ld, no longer running)", f, pid);
        }
        free(f);
    }
    closedir(d);
}

lb_status lb_tmpdir_make(const char *out_dir, char **tmp_out) {
    size_t n = strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/') n--;
    tmpdir_remove_stale(out_dir, n);
    char *t = malloc(n + 40);
    if (!t) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    memcpy(t, out_dir, n);
    snprintf(t + n, 40, ".tmp-%ld-XXXXXX", (long)getpid());
    if (!mkdtemp(t)) {
        lb_status s = lb_set_error(LB_ERR_IO, "%.*s: cannot create a temp directory beside it: %s",
                                   (int)n, out_dir, strerror(errno));
        free(t);
        return s;
    }
    *tmp_out = t;
    return LB_OK;
}

void lb_tmpdir_remove(const char *tmp) {
    if (!tmp) return;
    DIR *d = opendir(tmp);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = lb_path_join(tmp, e->d_name);
            if (p) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(tmp);
}

lb_status lb_tmpdir_commit(const char *tmp, const char *out_dir) {
    /* an empty out_dir is replaced (rename(2) allows an empty target dir) */
    if (rename(tmp, out_dir) != 0)
        return lb_set_error(LB_ERR_IO, "%s: cannot rename the finished checkpoint into place: %s",
                            out_dir, strerror(errno));
    return LB_OK;
}

lb_status lb_write_file_in(const char *dir, const char *name, const void *data,
                           size_t size) {
    char *path = lb_path_join(dir, name);
    if (!path) return lb_set_error(LB_ERR_NOMEM, "out of memory (%s)", name);
    lb_atomic_file af;
    memset(&af, 0, sizeof af);
    lb_status s = lb_atomic_open(path, &af);
    if (s == LB_OK) s = lb_atomic_write(&af, data, size);
    if (s == LB_OK) s = lb_atomic_commit(&af);
    else lb_atomic_abort(&af);
    free(path);
    return s;
}
