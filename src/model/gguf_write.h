// GGUF v3 writer: metadata (copied from a parsed file or set by key), tensor
// infos, then tensor data streamed in declaration order, so a model larger
// than memory can be written one tensor at a time. Little-endian hosts only.
#ifndef VLLMC_MODEL_GGUF_WRITE_H
#define VLLMC_MODEL_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "model/gguf.h"

struct gguf_writer;

// *out owns an empty writer (alignment 32); free with gguf_writer_free().
enum vllmc_status gguf_writer_create(struct gguf_writer **out, struct err *err);
void gguf_writer_free(struct gguf_writer *w); // NULL is a no-op; closes an open file

// Metadata, before gguf_writer_open(). A key set twice keeps its first
// position and its last value. kv is copied (src may be freed afterwards).
enum vllmc_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_file *src,
                                      const struct gguf_kv *kv);
enum vllmc_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
enum vllmc_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
enum vllmc_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
enum vllmc_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
// An array of n scalars of type elem (e.g. GGUF_TYPE_FLOAT32), packed
// little-endian at data, as the file stores them.
enum vllmc_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                                      const void *data, uint64_t n);
// An array of the n strings strs[i] (ptr, len; no NUL needed).
enum vllmc_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key,
                                          const struct gguf_str *strs, uint64_t n);

// Declares the next tensor: ne innermost first (unused = 1); its bytes are
// dtype_row_bytes(dtype, ne[0]) * rows. Fails if ne[0] is not a block multiple.
enum vllmc_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name,
                                         enum dtype dtype, int n_dims, const int64_t *ne);
size_t gguf_writer_tensor_bytes(const struct gguf_writer *w, size_t i);

// Creates path and writes the header, metadata and tensor infos.
enum vllmc_status gguf_writer_open(struct gguf_writer *w, const char *path);
// Writes tensor i's n_bytes (exactly its size), in declaration order.
enum vllmc_status gguf_writer_write_tensor(struct gguf_writer *w, size_t i, const void *data,
                                           size_t n_bytes);
// Streams tensor i in pieces (e.g. row by row); it is complete once its size
// has been written, and the next call may start tensor i + 1.
enum vllmc_status gguf_writer_write_tensor_part(struct gguf_writer *w, size_t i, const void *data,
                                                size_t n_bytes);
// Checks every tensor was written, flushes and closes the file.
enum vllmc_status gguf_writer_close(struct gguf_writer *w);

// Detail of the last failure.
const struct err *gguf_writer_err(const struct gguf_writer *w);

#endif
