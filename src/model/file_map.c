// Read-only whole-file mappings for the model readers.
#include "model/file_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum vllmc_status file_map_open(const char *path, struct file_map *fm, struct err *err)
{
    fm->addr = NULL;
    fm->n_bytes = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return err_set(err, e == ENOENT ? VLLMC_ERR_NOT_FOUND : VLLMC_ERR_IO, "%s: %s", path,
                       strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, VLLMC_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    if (n) {
        void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return err_set(err, VLLMC_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        fm->addr = p;
    }
    close(fd);
    fm->n_bytes = n;
    return VLLMC_OK;
}

void file_map_drop(const struct file_map *fm, const void *p, size_t n)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    uintptr_t map_lo = (uintptr_t)fm->addr, map_hi = map_lo + fm->n_bytes;
    if (!fm->addr || hi <= map_lo || lo >= map_hi)
        return;
    lo = lo < map_lo ? map_lo : lo;
    hi = hi > map_hi ? map_hi : hi;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    lo = (lo + page - 1) & ~(page - 1);
    hi &= ~(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); // advice: failing costs only memory
}

void file_map_close(struct file_map *fm)
{
    if (fm->addr)
        munmap((void *)fm->addr, fm->n_bytes);
    fm->addr = NULL;
    fm->n_bytes = 0;
}
