/* test_npy.c: the .npy reader/writer (formats/npy.c): byte-exact headers as numpy writes them, round
 * trips of every dtype and rank, hand-written headers of versions 1-3 and their variants, every kind
 * of malformed file (each an error with a message, never a crash), special files (a pipe, a FIFO,
 * /dev/zero: refused before any read), and a mutation fuzz. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"

static char npy_tdir[256];

static int npy_setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(npy_tdir, sizeof npy_tdir, "%s/fos-test-npy-XXXXXX", base && base[0] ? base : "/tmp");
	return mkdtemp(npy_tdir) ? 0 : -1;
}

static int npy_teardown(void **state)
{
	(void)state;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", npy_tdir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *tpath(const char *name)
{
	static char buf[4][512];
	static int i;
	i = (i + 1) % 4;
	snprintf(buf[i], sizeof buf[i], "%s/%s", npy_tdir, name);
	return buf[i];
}

static void write_bytes(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	if (n)
		assert_int_equal(fwrite(b, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	unsigned char *b = malloc(1 << 16);
	assert_non_null(b);
	*n = fread(b, 1, 1 << 16, f);
	fclose(f);
	return b;
}

/* A .npy image: preamble of the given version with the header text as is, then ndata data bytes
 * (0, 1, 2, ... mod 256). */
static unsigned char *mk(int major, const char *hdr, size_t ndata, size_t *len)
{
	size_t hl = strlen(hdr), pre = major == 1 ? 10 : 12;
	*len = pre + hl + ndata;
	unsigned char *b = malloc(*len + 1);
	assert_non_null(b);
	memcpy(b, "\x93NUMPY", 6);
	b[6] = (unsigned char)major;
	b[7] = 0;
	b[8] = (unsigned char)(hl & 0xFF);
	b[9] = (unsigned char)(hl >> 8);
	if (pre == 12) {
		b[10] = (unsigned char)(hl >> 16);
		b[11] = (unsigned char)(hl >> 24);
	}
	memcpy(b + pre, hdr, hl);
	for (size_t i = 0; i < ndata; i++)
		b[pre + hl + i] = (unsigned char)i;
	return b;
}

/* ---- writing: exactly numpy's bytes ---------------------------------------------------------- */

static void test_header_bytes_like_numpy(void **state)
{
	(void)state;
	/* np.save of a (2, 3) float32 array: 10-byte preamble, the dict, spaces, '\n', 128 bytes total */
	const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
	char want[128];
	memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10); /* header length 118 = 0x76 */
	memset(want + 10, ' ', sizeof want - 10);
	memcpy(want + 10, dict, strlen(dict));
	want[127] = '\n';
	char got[256];
	int64_t shape[2] = {2, 3};
	assert_int_equal(npy_header_build(got, sizeof got, NPY_F4, 2, shape), 128);
	assert_memory_equal(got, want, 128);

	/* 1-d uint8 and 0-d: the tuple spellings (n,) and () */
	int64_t s1[1] = {7};
	memset(got, 0, sizeof got);
	size_t n = npy_header_build(got, sizeof got, NPY_U1, 1, s1);
	assert_int_equal(n % 64, 0);
	assert_non_null(strstr(got + 10, "{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }"));
	memset(got, 0, sizeof got);
	n = npy_header_build(got, sizeof got, NPY_U2, 0, s1);
	assert_int_equal(n, 128); /* 10 + 55 + 1 = 66 bytes, padded to 128 */
	assert_non_null(strstr(got + 10, "{'descr': '<u2', 'fortran_order': False, 'shape': (), }"));
	assert_int_equal(got[127], '\n');
	assert_int_equal(got[126], ' ');
	/* numpy's rule pad = 64 - (10 + len(dict) + 1) % 64 adds 64 spaces when the remainder is 0:
	 * 8 dims of 100000 give a 64-character tuple and a 117-character dict, so 10 + 118 = 128 */
	int64_t s8[8] = {100000, 100000, 100000, 100000, 100000, 100000, 100000, 100000};
	memset(got, 0, sizeof got);
	n = npy_header_build(got, sizeof got, NPY_U1, 8, s8);
	assert_int_equal(n, 192);
	for (int i = 127; i < 191; i++)
		assert_int_equal(got[i], ' ');
	assert_int_equal(got[191], '\n');
	assert_int_equal(got[126], '}');
	/* too small a buffer, bad dtype, negative dims: 0 */
	assert_int_equal(npy_header_build(got, 100, NPY_F4, 2, shape), 0);
	assert_int_equal(npy_header_build(got, sizeof got, 7, 2, shape), 0);
	int64_t neg[1] = {-1};
	assert_int_equal(npy_header_build(got, sizeof got, NPY_F4, 1, neg), 0);
}

static void test_write_file_bytes(void **state)
{
	(void)state;
	uint16_t v[3] = {0x3F80, 0xBF80, 0x7F80}; /* bf16 1, -1, inf */
	int64_t shape[1] = {3};
	fos_err e = {0, ""};
	assert_int_equal(npy_write(tpath("w.npy"), NPY_U2, 1, shape, v, &e), FOS_OK);
	size_t n;
	unsigned char *b = read_bytes(tpath("w.npy"), &n);
	assert_int_equal(n, 128 + 6); /* dict of 57 characters: 10 + 57 + 1 = 68, padded to 128 */
	assert_memory_equal(b, "\x93NUMPY\x01\x00\x76\x00{'descr': '<u2'", 25);
	const unsigned char data[6] = {0x80, 0x3F, 0x80, 0xBF, 0x80, 0x7F}; /* little-endian */
	assert_memory_equal(b + 128, data, 6);
	free(b);
	/* no temporary file left behind */
	assert_int_equal(access(tpath("w.npy.tmp"), F_OK), -1);
}

/* ---- round trips ------------------------------------------------------------------------------- */

static void roundtrip(int dtype, int ndim, const int64_t *shape)
{
	size_t count = 1;
	for (int i = 0; i < ndim; i++)
		count *= (size_t)shape[i];
	size_t nb = count * npy_dtype_size(dtype);
	unsigned char *data = malloc(nb + 1);
	assert_non_null(data);
	for (size_t i = 0; i < nb; i++)
		data[i] = (unsigned char)(i * 37 + 11);
	fos_err e = {0, ""};
	const char *p = tpath("rt.npy");
	assert_int_equal(npy_write(p, dtype, ndim, shape, data, &e), FOS_OK);
	npy_array a;
	assert_int_equal(npy_read(p, &a, &e), FOS_OK);
	assert_int_equal(a.dtype, dtype);
	assert_int_equal(a.ndim, ndim);
	for (int i = 0; i < ndim; i++)
		assert_int_equal(a.shape[i], shape[i]);
	assert_int_equal(a.count, count);
	assert_int_equal(a.nbytes, nb);
	assert_non_null(a.data);
	assert_int_equal((uintptr_t)a.data % 64, 0);
	if (nb)
		assert_memory_equal(a.data, data, nb);
	npy_free(&a);
	assert_null(a.data);
	free(data);
}

static void test_roundtrip_dtypes_ranks(void **state)
{
	(void)state;
	const int dts[3] = {NPY_U1, NPY_U2, NPY_F4};
	int64_t s2[2] = {5, 48}, s1[1] = {33}, s3[3] = {2, 3, 4}, s0[1] = {0}, sz[2] = {0, 16};
	for (int d = 0; d < 3; d++) {
		roundtrip(dts[d], 0, s1);
		roundtrip(dts[d], 1, s1);
		roundtrip(dts[d], 2, s2);
		roundtrip(dts[d], 3, s3);
		roundtrip(dts[d], 1, s0);
		roundtrip(dts[d], 2, sz);
	}
	/* a larger one: data written and read through several read() calls */
	int64_t big[2] = {512, 1024};
	roundtrip(NPY_F4, 2, big);
}

static void test_write_errors(void **state)
{
	(void)state;
	fos_err e = {0, ""};
	float v = 1.0f;
	int64_t s[1] = {1};
	assert_int_not_equal(npy_write(tpath("no/such/dir/x.npy"), NPY_F4, 1, s, &v, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "cannot write"));
	e.msg[0] = 0;
	assert_int_not_equal(npy_write(npy_tdir, NPY_F4, 1, s, &v, &e), FOS_OK); /* a directory */
	assert_true(e.msg[0] != 0);
	e.msg[0] = 0;
	assert_int_not_equal(npy_write(tpath("n.npy"), NPY_F4, 1, s, NULL, &e), FOS_OK);
	assert_true(e.msg[0] != 0);
}

/* ---- reading hand-written headers ---------------------------------------------------------------- */

static void expect_ok(int major, const char *hdr, size_t ndata, int dtype, int ndim, int64_t d0, int64_t d1)
{
	size_t len;
	unsigned char *b = mk(major, hdr, ndata, &len);
	npy_array a;
	fos_err e = {0, ""};
	int rc = npy_read_mem(b, len, &a, &e);
	if (rc)
		fail_msg("header %s: %s", hdr, e.msg);
	assert_int_equal(a.dtype, dtype);
	assert_int_equal(a.ndim, ndim);
	if (ndim > 0)
		assert_int_equal(a.shape[0], d0);
	if (ndim > 1)
		assert_int_equal(a.shape[1], d1);
	assert_int_equal(a.nbytes, ndata);
	if (ndata)
		assert_memory_equal(a.data, b + len - ndata, ndata);
	npy_free(&a);
	/* the same through a file */
	write_bytes(tpath("ok.npy"), b, len);
	rc = npy_read(tpath("ok.npy"), &a, &e);
	if (rc)
		fail_msg("file with header %s: %s", hdr, e.msg);
	assert_int_equal(a.nbytes, ndata);
	if (ndata)
		assert_memory_equal(a.data, b + len - ndata, ndata);
	npy_free(&a);
	free(b);
}

static void test_read_header_variants(void **state)
{
	(void)state;
	expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24, NPY_F4, 2, 2, 3);
	/* double quotes, other key order, no trailing comma, no newline, tabs */
	expect_ok(1, "{\"shape\": (2,3),\t\"fortran_order\":False, \"descr\": \"<u2\"}", 12, NPY_U2, 2, 2, 3);
	/* '<u1' and '|u1', trailing comma inside the tuple, Python 2 long suffix */
	expect_ok(1, "{'descr': '<u1', 'fortran_order': False, 'shape': (4, 5,), }   \n", 20, NPY_U1, 2, 4, 5);
	expect_ok(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4L, 5L), }\n", 20, NPY_U1, 2, 4, 5);
	/* 0-d and 1-d and empty */
	expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", 4, NPY_F4, 0, 0, 0);
	expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }\n", 28, NPY_F4, 1, 7, 0);
	expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9), }\n", 0, NPY_F4, 2, 0, 9);
	/* versions 2.0 and 3.0 (4-byte header length) */
	expect_ok(2, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }\n", 6, NPY_U2, 1, 3, 0);
	expect_ok(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }\n", 4, NPY_F4, 2, 1, 1);
	/* whitespace everywhere Python allows it */
	expect_ok(1, "  { 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 1 , 2 ) , }  \n", 8, NPY_F4, 2, 1, 2);
}

/* ---- malformed files: every one an error naming the problem ------------------------------------ */

static void expect_bad_mem(const unsigned char *b, size_t len, const char *needle)
{
	npy_array a;
	memset(&a, 0x5A, sizeof a);
	fos_err e = {0, ""};
	int rc = npy_read_mem(b, len, &a, &e);
	if (rc == FOS_OK)
		fail_msg("accepted a bad file (expected '%s')", needle);
	assert_null(a.data);
	if (!strstr(e.msg, needle))
		fail_msg("message '%s' does not mention '%s'", e.msg, needle);
	/* the same bytes through a file: an error too, and the message starts with the path */
	const char *p = tpath("bad.npy");
	write_bytes(p, b, len);
	e.msg[0] = 0;
	rc = npy_read(p, &a, &e);
	if (rc == FOS_OK)
		fail_msg("accepted a bad file on disk (expected '%s')", needle);
	assert_null(a.data);
	if (!strstr(e.msg, needle) || strncmp(e.msg, p, strlen(p)))
		fail_msg("file message '%s' does not start with the path or mention '%s'", e.msg, needle);
}

static void expect_bad(int major, const char *hdr, size_t ndata, const char *needle)
{
	size_t len;
	unsigned char *b = mk(major, hdr, ndata, &len);
	expect_bad_mem(b, len, needle);
	free(b);
}

#define H(descr, fortran, shape) "{'descr': " descr ", 'fortran_order': " fortran ", 'shape': " shape ", }\n"

static void test_bad_preamble(void **state)
{
	(void)state;
	expect_bad_mem((const unsigned char *)"", 0, "too short");
	expect_bad_mem((const unsigned char *)"\x93NUMPY", 6, "too short");
	expect_bad_mem((const unsigned char *)"\x93NUMPY\x01\x00\x10", 9, "too short");
	expect_bad_mem((const unsigned char *)"PK\x03\x04 this is a zip file", 24, "magic");
	expect_bad_mem((const unsigned char *)"\x93NUMPX\x01\x00\x00\x00", 10, "magic");
	size_t len;
	unsigned char *b = mk(1, H("'<f4'", "False", "(1,)"), 4, &len);
	b[6] = 4;
	expect_bad_mem(b, len, "version 4.0");
	b[6] = 1;
	b[7] = 1;
	expect_bad_mem(b, len, "version 1.1");
	b[6] = 0;
	b[7] = 0;
	expect_bad_mem(b, len, "version 0.0");
	free(b);
	/* version 2 cut inside its 4-byte length */
	expect_bad_mem((const unsigned char *)"\x93NUMPY\x02\x00\x10\x00\x00", 11, "too short");
	/* header length longer than the file */
	b = mk(1, H("'<f4'", "False", "(1,)"), 0, &len);
	b[8] = 0xFF;
	b[9] = 0x7F;
	expect_bad_mem(b, len, "truncated");
	free(b);
	/* a v2 header claiming 4 GiB is refused before any allocation */
	b = mk(2, H("'<f4'", "False", "(1,)"), 4, &len);
	b[8] = b[9] = b[10] = b[11] = 0xFF;
	expect_bad_mem(b, len, "above the limit");
	free(b);
}

static void test_bad_dict(void **state)
{
	(void)state;
	expect_bad(1, "", 0, "expected '{'");
	expect_bad(1, "[1, 2]\n", 0, "expected '{'");
	expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), \n", 4, "expected a quoted key");
	expect_bad(1, "{'descr': '<f4', 'fortran_order': False}\n", 4, "missing key 'shape'");
	expect_bad(1, "{'fortran_order': False, 'shape': (1,)}\n", 4, "missing key 'descr'");
	expect_bad(1, "{'descr': '<f4', 'shape': (1,)}\n", 4, "missing key 'fortran_order'");
	expect_bad(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\n", 4, "twice");
	expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}\n", 4, "unknown key 'extra'");
	expect_bad(1, "{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}\n", 4, "expected ':'");
	expect_bad(1, "{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}\n", 4, "expected ',' or '}'");
	expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk\n", 4, "after the dict");
	expect_bad(1, "{'descr: '<f4', 'fortran_order': False, 'shape': (1,)}\n", 4, "expected ':'");
	expect_bad(1, "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}\n", 4, "unsupported dtype '<f4, '");
	expect_bad(1, "{'descr': '<f4", 4, "unterminated");
	expect_bad(1, "{'des\\x63r': '<f4', 'fortran_order': False, 'shape': (1,)}\n", 4, "escape");
	expect_bad(1, "{descr: '<f4', 'fortran_order': False, 'shape': (1,)}\n", 4, "quoted key");
	expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\x01\n", 4, "byte 0x01");
	expect_bad(1, "{'descr': '<f4', 'fortran_order': F\xC3\xA4lse, 'shape': (1,)}\n", 4, "byte 0xc3");
	expect_bad(3, "{'d\xC3\xA9scr': '<f4', 'fortran_order': False, 'shape': (1,)}\n", 4, "byte 0xc3");
	expect_bad(1, "{'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa': 1}\n", 0,
		   "too long");
	/* a NUL inside the header */
	size_t len;
	unsigned char *b = mk(1, H("'<f4'", "False", "(1,)"), 4, &len);
	b[12] = 0;
	expect_bad_mem(b, len, "byte 0x00");
	free(b);
}

static void test_bad_values(void **state)
{
	(void)state;
	expect_bad(1, H("'<f4'", "True", "(2, 2)"), 16, "fortran_order True is not supported");
	expect_bad(1, H("'<f4'", "True", "(4,)"), 16, "fortran_order True");
	expect_bad(1, H("'<f4'", "maybe", "(4,)"), 16, "True or False");
	expect_bad(1, H("'<f4'", "Falsey", "(4,)"), 16, "True or False");
	expect_bad(1, H("'<f4'", "0", "(4,)"), 16, "True or False");
	expect_bad(1, H("'<f8'", "False", "(2,)"), 16, "unsupported dtype '<f8'");
	expect_bad(1, H("'>f4'", "False", "(2,)"), 8, "unsupported dtype '>f4'");
	expect_bad(1, H("'<i4'", "False", "(2,)"), 8, "unsupported dtype '<i4'");
	expect_bad(1, H("'>u2'", "False", "(2,)"), 4, "unsupported dtype '>u2'");
	expect_bad(1, H("'<f2'", "False", "(2,)"), 4, "unsupported dtype '<f2'");
	expect_bad(1, H("'|V2'", "False", "(2,)"), 4, "x.view(np.uint16)");
	expect_bad(1, H("''", "False", "(2,)"), 4, "unsupported dtype ''");
	expect_bad(1, H("[('a', '<f4')]", "False", "(2,)"), 8, "structured");
	expect_bad(1, H("5", "False", "(2,)"), 8, "quoted 'descr'");
	expect_bad(1, H("'<f4'", "False", "(3)"), 12, "not a tuple");
	expect_bad(1, H("'<f4'", "False", "[3]"), 12, "expected '('");
	expect_bad(1, H("'<f4'", "False", "3"), 12, "expected '('");
	expect_bad(1, H("'<f4'", "False", "(-1,)"), 0, "negative dimension");
	expect_bad(1, H("'<f4'", "False", "(2, x)"), 8, "expected an integer");
	expect_bad(1, H("'<f4'", "False", "(2.0,)"), 8, "expected ',' or ')'");
	expect_bad(1, H("'<f4'", "False", "(2, 3"), 24, "expected an integer");
	expect_bad(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}\n", 24, "expected ',' or ')'");
	expect_bad(1, H("'<f4'", "False", "(,)"), 0, "expected an integer");
	expect_bad(1, H("'<f4'", "False", "(2,,)"), 8, "expected an integer");
	expect_bad(1, H("'<f4'", "False", "(0x10,)"), 64, "bad integer");
	expect_bad(1, H("'<f4'", "False", "(99999999999999999999,)"), 4, "too large");
	expect_bad(1, H("'<f4'", "False", "(4611686018427387904, 4611686018427387904)"), 4, "too large");
	expect_bad(1, H("'<u1'", "False", "(9223372036854775807, 3)"), 4, "too large");
	expect_bad(1, H("'<u1'", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 1, "more than 8 dimensions");
}

static void test_bad_data_length(void **state)
{
	(void)state;
	expect_bad(1, H("'<f4'", "False", "(4,)"), 12, "truncated .npy data");
	expect_bad(1, H("'<f4'", "False", "(4,)"), 0, "needs 16 bytes, the file has 0");
	expect_bad(1, H("'<f4'", "False", "(4,)"), 17, "1 bytes of trailing data");
	expect_bad(1, H("'<u2'", "False", "(2, 3)"), 13, "trailing data");
	expect_bad(1, H("'<u2'", "False", "()"), 0, "truncated");
	/* a huge shape with a tiny file: refused from the file size, no huge allocation */
	expect_bad(1, H("'<f4'", "False", "(1000000000, 1000)"), 8, "truncated");
}

static void test_bad_paths(void **state)
{
	(void)state;
	npy_array a;
	fos_err e = {0, ""};
	assert_int_not_equal(npy_read(tpath("does-not-exist.npy"), &a, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "cannot open"));
	assert_non_null(strstr(e.msg, "does-not-exist.npy"));
	assert_null(a.data);
	assert_int_not_equal(npy_read(npy_tdir, &a, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "not a regular file (a directory)"));
	/* unreadable file (skipped as root, who reads anything) */
	if (geteuid() != 0) {
		int64_t s[1] = {1};
		float v = 0;
		assert_int_equal(npy_write(tpath("locked.npy"), NPY_F4, 1, s, &v, &e), FOS_OK);
		assert_int_equal(chmod(tpath("locked.npy"), 0), 0);
		assert_int_not_equal(npy_read(tpath("locked.npy"), &a, &e), FOS_OK);
		assert_non_null(strstr(e.msg, "cannot open"));
	}
}

/* Only regular files are read (regfile.h): a pipe holding a valid file, a FIFO without a writer
 * (whose blocking open would wait forever: the alarm fails the test instead) and /dev/zero are
 * refused at once, naming what they are. */
static void test_refuses_special(void **state)
{
	(void)state;
	size_t len;
	npy_array a;
	fos_err e = {0, ""};
	alarm(20);
	unsigned char *b = mk(1, H("'<f4'", "False", "(2, 2)"), 16, &len);
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	assert_int_equal(write(fds[1], b, len), (ssize_t)len);
	close(fds[1]);
	char p[64];
	snprintf(p, sizeof p, "/dev/fd/%d", fds[0]);
	assert_int_not_equal(npy_read(p, &a, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "not a regular file (a FIFO)"));
	close(fds[0]);
	free(b);
	assert_int_equal(mkfifo(tpath("fifo.npy"), 0600), 0);
	assert_int_not_equal(npy_read(tpath("fifo.npy"), &a, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "fifo.npy: not a regular file (a FIFO)"));
	assert_null(a.data);
	assert_int_not_equal(npy_read("/dev/zero", &a, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "/dev/zero: not a regular file (a character device)"));
	alarm(0);
	/* a header shorter than the 12 bytes read up front, in a regular file */
	b = mk(1, "{}", 2, &len);
	FILE *f = fopen(tpath("short.npy"), "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, len, f), len);
	fclose(f);
	assert_int_not_equal(npy_read(tpath("short.npy"), &a, &e), FOS_OK);
	assert_non_null(strstr(e.msg, "missing key"));
	free(b);
}

/* Mutations of a valid file: every result is either a clean accept or an error with a message. */
static void test_fuzz_mutations(void **state)
{
	(void)state;
	size_t len;
	unsigned char *orig = mk(1, H("'<f4'", "False", "(3, 4)"), 48, &len);
	unsigned char *b = malloc(len);
	assert_non_null(b);
	uint64_t s = 0x9E3779B97F4A7C15ull;
	int accepted = 0, rejected = 0;
	for (int it = 0; it < 20000; it++) {
		memcpy(b, orig, len);
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		int nmut = 1 + (int)(s % 4);
		for (int m = 0; m < nmut; m++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			size_t pos = (size_t)(s >> 8) % (len - 48); /* preamble + header */
			static const char pick[] = "{}()[],:'\" 0123456789-LTFx<>|uf\n\t\x93\x00\xff";
			b[pos] = (s & 1) ? (unsigned char)(s >> 40) : (unsigned char)pick[(s >> 32) % (sizeof pick - 1)];
		}
		size_t cut = (s >> 50) % 5 == 0 ? (size_t)(s >> 20) % (len + 1) : len;
		npy_array a;
		fos_err e = {0, ""};
		if (npy_read_mem(b, cut, &a, &e) == FOS_OK) {
			size_t off;
			npy_array h;
			assert_int_equal(npy_parse_header(b, cut, &h, &off, &e), FOS_OK);
			assert_int_equal(off + a.nbytes, cut);
			npy_free(&a);
			accepted++;
		} else {
			assert_true(e.msg[0] != 0);
			assert_null(a.data);
			rejected++;
		}
	}
	assert_true(accepted > 0 && rejected > 0);
	free(b);
	free(orig);
}

static void test_shape_str(void **state)
{
	(void)state;
	char buf[64];
	int64_t s[3] = {3, 4, 5};
	assert_string_equal(npy_shape_str(0, s, buf, sizeof buf), "()");
	assert_string_equal(npy_shape_str(1, s, buf, sizeof buf), "(3,)");
	assert_string_equal(npy_shape_str(3, s, buf, sizeof buf), "(3, 4, 5)");
	assert_string_equal(npy_shape_str(3, s, buf, 5), "(3, ");
	assert_string_equal(npy_dtype_descr(NPY_U2), "<u2");
	assert_int_equal(npy_dtype_size(NPY_F4), 4);
	assert_int_equal(npy_dtype_size(NPY_U1), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_bytes_like_numpy),
		cmocka_unit_test(test_write_file_bytes),
		cmocka_unit_test(test_roundtrip_dtypes_ranks),
		cmocka_unit_test(test_write_errors),
		cmocka_unit_test(test_read_header_variants),
		cmocka_unit_test(test_bad_preamble),
		cmocka_unit_test(test_bad_dict),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_bad_data_length),
		cmocka_unit_test(test_bad_paths),
		cmocka_unit_test(test_refuses_special),
		cmocka_unit_test(test_fuzz_mutations),
		cmocka_unit_test(test_shape_str),
	};
	return cmocka_run_group_tests_name("npy", tests, npy_setup, npy_teardown);
}
