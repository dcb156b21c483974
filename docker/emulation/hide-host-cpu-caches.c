/* LD_PRELOAD for the RUN steps of an arm64 image built on an x86_64 host under QEMU user emulation.
 *
 * QEMU passes the host's sysfs through, so aarch64 torch's bundled cpuinfo reads the x86 host's
 * cache description (/sys/devices/system/cpu/cpuN/cache/index2/...) next to a CPU model it cannot
 * decode (QEMU 7.2 shows the host's x86 /proc/cpuinfo; 10.x describes the emulated CPU and is not
 * affected): it counts no L2 cache, allocates none, then fills one from sysfs and dereferences NULL
 * on `import torch` (pytorch/cpuinfo#398, still open). Hiding those files makes cpuinfo fall back to
 * its built-in defaults, which is what it does on hosts without that sysfs. The builder sets
 * QFN_EMULATION_PRELOAD only for emulated builds; a native arm64 host (GB10) never loads this.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

static int hidden(const char *path) {
    static const char cpus[] = "/sys/devices/system/cpu/cpu";
    return path != NULL && strncmp(path, cpus, sizeof(cpus) - 1) == 0 && strstr(path, "/cache/") != NULL;
}

/* open(2)'s optional third argument, read only when the flags say it is there. */
#define MODE_OF(flags)                                      \
    mode_t mode = 0;                                        \
    if ((flags) & (O_CREAT | O_TMPFILE)) {                  \
        va_list ap;                                         \
        va_start(ap, flags);                                \
        mode = (mode_t)va_arg(ap, int);                     \
        va_end(ap);                                         \
    }

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);

static int forward_open(const char *symbol, open_fn *real, const char *path, int flags, mode_t mode) {
    if (hidden(path)) { errno = ENOENT; return -1; }
    if (*real == NULL) *real = (open_fn)dlsym(RTLD_NEXT, symbol);
    return (*real)(path, flags, mode);
}

int open(const char *path, int flags, ...) {
    MODE_OF(flags)
    static open_fn real;
    return forward_open("open", &real, path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    MODE_OF(flags)
    static open_fn real;
    return forward_open("open64", &real, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
    MODE_OF(flags)
    if (hidden(path)) { errno = ENOENT; return -1; }
    static openat_fn real;
    if (real == NULL) real = (openat_fn)dlsym(RTLD_NEXT, "openat");
    return real(dirfd, path, flags, mode);
}

FILE *fopen(const char *path, const char *how) {
    if (hidden(path)) { errno = ENOENT; return NULL; }
    static fopen_fn real;
    if (real == NULL) real = (fopen_fn)dlsym(RTLD_NEXT, "fopen");
    return real(path, how);
}
