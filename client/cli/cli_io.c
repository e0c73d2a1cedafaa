/* cli_io.c: loading and checking the CLI's .npy inputs (dtype, rank, nonempty, amax values; the
 * bf16/f32 inputs and the optional bias in one call each), the f32 -> bf16 rounding of inputs, the
 * fos_tensor over a bf16 input, creating output directories and writing the outputs. */
#include "cli.h"
#include "fos_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_load(const char *path, npy_array *a, fos_err *err)
{
	return npy_read(path, a, err);
}

int cli_load_float(const char *path, int ndim, const char *what, npy_array *a, fos_err *err)
{
	int rc = cli_load(path, a, err);
	return rc ? rc : cli_check_float(a, path, ndim, what, err);
}

int cli_load_bf16(const char *path, int ndim, const char *what, npy_array *a, fos_err *err)
{
	int rc = cli_load_float(path, ndim, what, a, err);
	return rc ? rc : cli_to_bf16(a, err);
}

int cli_check_nonempty(const npy_array *a, const char *path, fos_err *err)
{
	if (a->count)
		return FOS_OK;
	char sb[200];
	return cli_errf(err, "%s: shape %s is empty", path, npy_shape_str(a->ndim, a->shape, sb, sizeof sb));
}

int cli_load_bias(const char *path, npy_array *a, fos_err *err)
{
	if (!path)
		return FOS_OK;
	int rc = cli_load_bf16(path, 1, "(N,)", a, err);
	return rc ? rc : cli_check_nonempty(a, path, err);
}

fos_tensor cli_tensor_bf16(const npy_array *a)
{
	return a->ndim == 2 ? fos_tensor_2d(FOS_DTYPE_BF16, a->shape[0], a->shape[1], a->data)
			    : fos_tensor_1d(FOS_DTYPE_BF16, a->shape[0], a->data);
}

static void cli_dtype_list(int n, const int *dtypes, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = 0;
	for (int i = 0; i < n && used < cap; i++) {
		int w = snprintf(buf + used, cap - used, "%s%s", i == 0 ? "" : (i == n - 1 ? " or " : ", "),
				 npy_dtype_human(dtypes[i]));
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

int cli_check_dtype(const npy_array *a, const char *path, int n, const int *dtypes, fos_err *err)
{
	for (int i = 0; i < n; i++)
		if (a->dtype == dtypes[i])
			return FOS_OK;
	char list[128];
	cli_dtype_list(n, dtypes, list, sizeof list);
	return cli_errf(err, "%s: dtype %s is not accepted here (expected %s)", path, npy_dtype_human(a->dtype),
			list);
}

int cli_check_rank(const npy_array *a, const char *path, int ndim, const char *what, fos_err *err)
{
	if (a->ndim == ndim)
		return FOS_OK;
	char sb[200];
	npy_shape_str(a->ndim, a->shape, sb, sizeof sb);
	return cli_errf(err, "%s: expected a %d-d array %s, got shape %s", path, ndim, what, sb);
}

int cli_check_float(const npy_array *a, const char *path, int ndim, const char *what, fos_err *err)
{
	static const int fl[] = {NPY_U2, NPY_F4};
	int rc = cli_check_dtype(a, path, 2, fl, err);
	return rc ? rc : cli_check_rank(a, path, ndim, what, err);
}

int cli_to_bf16(npy_array *a, fos_err *err)
{
	if (a->dtype == NPY_U2)
		return FOS_OK;
	if (a->dtype != NPY_F4)
		return cli_errf(err, "internal: cli_to_bf16 on dtype %s", npy_dtype_human(a->dtype));
	size_t nb = a->count * 2;
	uint16_t *b = aligned_alloc(64, ((nb + 63) & ~(size_t)63) ? ((nb + 63) & ~(size_t)63) : 64);
	if (!b)
		return fos_seterr(err, FOS_ENOMEM, "out of memory converting %zu float32 values to bf16", a->count);
	const float *f = (const float *)a->data;
	for (size_t i = 0; i < a->count; i++)
		b[i] = fos_f32_to_bf16(f[i]);
	free(a->data);
	a->data = b;
	a->dtype = NPY_U2;
	a->nbytes = nb;
	return FOS_OK;
}

int cli_check_amax_values(const npy_array *a, const char *path, fos_err *err)
{
	const float *v = (const float *)a->data;
	for (size_t i = 0; i < a->count; i++) {
		if (v[i] == v[i] && v[i] >= 0.0f)
			continue;
		char where[40] = "";
		if (a->ndim)
			snprintf(where, sizeof where, "[%zu]", i);
		return cli_errf(err, "%s: amax%s = %g is not a valid amax (must be >= 0 and not NaN)", path, where,
				(double)v[i]);
	}
	return FOS_OK;
}

int cli_mkdirs(const char *dir, fos_err *err)
{
	size_t n = strlen(dir);
	char *p = malloc(n + 1);
	if (!p)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	memcpy(p, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != 0)
			continue;
		char saved = p[i];
		p[i] = 0;
		if (mkdir(p, 0777) && errno != EEXIST) {
			int e = errno;
			cli_errf(err, "%s: cannot create directory: %s", p, strerror(e));
			free(p);
			return FOS_EINVAL;
		}
		p[i] = saved;
	}
	free(p);
	struct stat st;
	if (stat(dir, &st))
		return cli_errf(err, "%s: cannot create directory: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return cli_errf(err, "%s: exists and is not a directory", dir);
	return FOS_OK;
}

int cli_mkparent(const char *file, fos_err *err)
{
	const char *slash = strrchr(file, '/');
	if (!slash || slash == file)
		return FOS_OK;
	size_t n = (size_t)(slash - file);
	char *d = malloc(n + 1);
	if (!d)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	memcpy(d, file, n);
	d[n] = 0;
	int rc = cli_mkdirs(d, err);
	free(d);
	return rc;
}

int cli_write(const char *dir, const char *name, int dtype, int ndim, const int64_t *shape, const void *data,
	      fos_err *err)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *path = malloc(n);
	if (!path)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	snprintf(path, n, "%s/%s", dir, name);
	int rc = npy_write(path, dtype, ndim, shape, data, err);
	free(path);
	return rc;
}
