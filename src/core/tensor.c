// Tensor shape helpers.
#include "core/tensor.h"

bool tensor_init(struct tensor *t, enum dtype dtype, void *data, int n_dims, const int64_t *ne)
{
    const struct dtype_info *info = dtype_info(dtype);
    if (!info || n_dims < 1 || n_dims > TENSOR_MAX_DIMS)
        return false;
    if (ne[0] < 0 || ne[0] % info->block_size)
        return false;
    *t = (struct tensor){.dtype = dtype, .n_dims = n_dims, .data = data};
    for (int i = 0; i < TENSOR_MAX_DIMS; i++)
        t->ne[i] = i < n_dims ? ne[i] : 1;
    for (int i = 1; i < n_dims; i++)
        if (ne[i] < 0)
            return false;
    t->nb[0] = info->type_size;
    t->nb[1] = (size_t)(t->ne[0] / info->block_size) * info->type_size;
    for (int i = 2; i < TENSOR_MAX_DIMS; i++)
        t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
    return true;
}

bool tensor_init_1d(struct tensor *t, enum dtype dtype, void *data, int64_t ne0)
{
    return tensor_init(t, dtype, data, 1, (int64_t[]){ne0});
}

bool tensor_init_2d(struct tensor *t, enum dtype dtype, void *data, int64_t ne0, int64_t ne1)
{
    return tensor_init(t, dtype, data, 2, (int64_t[]){ne0, ne1});
}

bool tensor_init_3d(struct tensor *t, enum dtype dtype, void *data, int64_t ne0, int64_t ne1,
                    int64_t ne2)
{
    return tensor_init(t, dtype, data, 3, (int64_t[]){ne0, ne1, ne2});
}

int64_t tensor_n_elements(const struct tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

int64_t tensor_n_rows(const struct tensor *t)
{
    return t->ne[1] * t->ne[2] * t->ne[3];
}

size_t tensor_n_bytes(const struct tensor *t)
{
    return t->nb[1] * (size_t)tensor_n_rows(t);
}

bool tensor_rows_contiguous(const struct tensor *t)
{
    const struct dtype_info *info = dtype_info(t->dtype);
    return info && t->nb[0] == info->type_size;
}

bool tensor_is_contiguous(const struct tensor *t)
{
    if (!tensor_rows_contiguous(t))
        return false;
    const struct dtype_info *info = dtype_info(t->dtype);
    if (t->nb[1] != (size_t)(t->ne[0] / info->block_size) * info->type_size)
        return false;
    for (int i = 2; i < TENSOR_MAX_DIMS; i++)
        if (t->nb[i] != t->nb[i - 1] * (size_t)t->ne[i - 1])
            return false;
    return true;
}

bool tensor_same_shape(const struct tensor *a, const struct tensor *b)
{
    for (int i = 0; i < TENSOR_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i])
            return false;
    return true;
}
