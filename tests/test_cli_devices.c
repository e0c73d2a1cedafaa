/* test_cli_devices.c: the `fos` CLI against one fosd over several devices (a cpu fosd started with
 * `--devices 0,1,2`, PROTOCOL.md "Devices"; build/fos as a subprocess): `fos health` lists the
 * three devices (text and --json); `fos put-weight --devices LIST` and `--replicas N|all` put a
 * weight where asked (the summary line, --json, and --safetensors for every tensor); `fos
 * list-weights` shows the devices (the DEVICES column, --json "devices"); `fos stats` prints a row
 * per device and --json "devices" whose cache bytes sum to the total; bad values are usage errors
 * (exit 2) caught before connecting, and placements fosd refuses exit 1 with its
 * INVALID_ARGUMENT naming the field; `fos put-weight --help` explains both options. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli.h"
#include "support_safetensors.h"
#include "support_server.h"
#include "test_cli_harness.h"
#include "support_json.h"

static tsrv g_srv;

static int setup(void **state)
{
	if (th_setup(state))
		return -1;
	setenv("FOS_TEST_BACKEND", "cpu", 1); /* the stand-ins are cpu devices */
	const char *args[] = {"--devices", "0,1,2", NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	static uint16_t w[64 * 32];
	tsrv_fill_bf16(w, 64 * 32, 5, 0.05f);
	th_save(th_p("w.npy"), NPY_U2, 2, 64, 32, w);
	tst_in t[2] = {{"st.a", "BF16", 2, 64, 32, w, sizeof w}, {"st.b", "BF16", 2, 32, 32, w, 32 * 32 * 2}};
	return tst_write(th_p("m.safetensors"), t, 2, 0, NULL);
}

static int teardown(void **state)
{
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

static void parse_json(const th_result *r, cli_jv *j)
{
	th_expect_ok(r);
	fos_err e = {0, ""};
	if (cli_json_parse(r->out, strlen(r->out), j, &e) || j->type != CLI_JOBJ)
		fail_msg("stdout is not a JSON object (%s): [%s]", e.msg, r->out);
}

/* The numbers of the JSON array v, as "0,1,2". */
static const char *num_list(const cli_jv *v, char *buf, size_t cap)
{
	if (!v || v->type != CLI_JARR)
		fail_msg("not an array");
	buf[0] = 0;
	for (size_t i = 0; i < v->n; i++) {
		if (v->items[i].type != CLI_JNUM)
			fail_msg("devices[%zu] is not a number", i);
		snprintf(buf + strlen(buf), cap - strlen(buf), "%s%.0f", i ? "," : "", v->items[i].num);
	}
	return buf;
}

/* The list-weights --json entry of name's devices, as "0,1". */
static const char *listed_devices(const char *name, char *buf, size_t cap)
{
	th_result r;
	cli_jv j;
	th_run(&r, "list-weights", "--json", NULL);
	parse_json(&r, &j);
	const cli_jv *ws = cli_json_get(&j, "weights");
	assert_true(ws && ws->type == CLI_JARR);
	buf[0] = 0;
	int found = 0;
	for (size_t i = 0; i < ws->n; i++) {
		const cli_jv *nm = cli_json_get(&ws->items[i], "name");
		if (nm && nm->type == CLI_JSTR && !strcmp(nm->str, name)) {
			num_list(cli_json_get(&ws->items[i], "devices"), buf, cap);
			found++;
		}
	}
	cli_json_free(&j);
	if (found != 1)
		fail_msg("%s is listed %d times", name, found);
	return buf;
}

static void test_health(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "health", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "devices:     3\n"));
	for (int i = 0; i < 3; i++) {
		char line[64];
		snprintf(line, sizeof line, "\n    %-3d cpu:%d", i, i); /* then " (description)" or the end */
		if (!strstr(r.out, line))
			fail_msg("health does not list [%s]: %s", line, r.out);
	}
	cli_jv j;
	th_run(&r, "health", "--json", NULL);
	parse_json(&r, &j);
	const cli_jv *d = cli_json_get(&j, "devices");
	assert_true(d && d->type == CLI_JARR && d->n == 3);
	for (size_t i = 0; i < 3; i++) {
		char want[16];
		snprintf(want, sizeof want, "cpu:%zu", i);
		const cli_jv *idx = cli_json_get(&d->items[i], "index"), *dev = cli_json_get(&d->items[i], "device"),
			     *be = cli_json_get(&d->items[i], "backend");
		assert_true(idx && idx->type == CLI_JNUM && idx->num == (double)i);
		assert_true(dev && dev->type == CLI_JSTR && !strncmp(dev->str, want, strlen(want)) &&
			    (dev->str[strlen(want)] == 0 || dev->str[strlen(want)] == ' '));
		assert_true(be && be->type == CLI_JSTR && !strcmp(be->str, "cpu"));
		assert_null(cli_json_get(&d->items[i], "gpu_uuid"));
	}
	cli_json_free(&j);
}

static void test_put_where_asked(void **state)
{
	(void)state;
	th_result r;
	char buf[64];
	th_run(&r, "put-weight", "pw.a", th_p("w.npy"), "--devices", "0,2", NULL);
	th_expect_ok(&r);
	if (!strstr(r.out, "cached pw.a version 1: (64, 32)") || !strstr(r.out, ", on devices 0,2\n"))
		fail_msg("summary: %s", r.out);
	assert_string_equal(listed_devices("pw.a", buf, sizeof buf), "0,2");

	th_run(&r, "put-weight", "pw.b", th_p("w.npy"), "--devices=1", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, ", on device 1\n"));
	assert_string_equal(listed_devices("pw.b", buf, sizeof buf), "1");

	cli_jv j;
	th_run(&r, "put-weight", "pw.c", th_p("w.npy"), "--replicas", "all", "--json", NULL);
	parse_json(&r, &j);
	assert_string_equal(num_list(cli_json_get(&j, "devices"), buf, sizeof buf), "0,1,2");
	cli_json_free(&j);
	assert_string_equal(listed_devices("pw.c", buf, sizeof buf), "0,1,2");

	th_run(&r, "put-weight", "pw.d", th_p("w.npy"), "--replicas", "2", "--json", NULL);
	parse_json(&r, &j);
	const cli_jv *d = cli_json_get(&j, "devices");
	assert_true(d && d->type == CLI_JARR && d->n == 2 && d->items[0].num != d->items[1].num);
	cli_json_free(&j);

	/* a new version without a placement stays where the name is */
	th_run(&r, "put-weight", "pw.b", th_p("w.npy"), "--version", "2", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, ", on device 1\n"));
	/* and one with a placement moves */
	th_run(&r, "put-weight", "pw.b", th_p("w.npy"), "--version", "3", "--devices", "2,0", NULL);
	th_expect_ok(&r);
	assert_string_equal(listed_devices("pw.b", buf, sizeof buf), "0,2");

	/* every tensor of a checkpoint, on the devices given */
	th_run(&r, "put-weight", "--safetensors", th_p("m.safetensors"), "--devices", "1,2", "--json", NULL);
	parse_json(&r, &j);
	const cli_jv *ws = cli_json_get(&j, "weights");
	assert_true(ws && ws->type == CLI_JARR && ws->n == 2);
	for (size_t i = 0; i < 2; i++)
		assert_string_equal(num_list(cli_json_get(&ws->items[i], "devices"), buf, sizeof buf), "1,2");
	cli_json_free(&j);
	assert_string_equal(listed_devices("st.a", buf, sizeof buf), "1,2");
	assert_string_equal(listed_devices("st.b", buf, sizeof buf), "1,2");

	/* the text listing's DEVICES column */
	th_run(&r, "list-weights", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, " DEVICES "));
	const char *row = strstr(r.out, "\npw.c ");
	assert_non_null(row);
	const char *eol = strchr(row + 1, '\n');
	char line[1024];
	snprintf(line, sizeof line, "%.*s", (int)(eol ? eol - row : 200), row);
	if (!strstr(line, " 0,1,2 "))
		fail_msg("pw.c's row has no devices 0,1,2: %s", line);

	static const char *const names[] = {"pw.a", "pw.b", "pw.c", "pw.d", "st.a", "st.b"};
	for (size_t i = 0; i < 6; i++) {
		th_run(&r, "drop-weight", names[i], NULL);
		th_expect_ok(&r);
	}
}

static void test_bad_values(void **state)
{
	(void)state;
	th_result r;
	/* usage errors, before any connection (exit 2) */
	const char *w = th_p("w.npy");
	th_run(&r, "put-weight", "bad", w, "--devices", "0,1", "--replicas", "2", NULL);
	th_expect_fail(&r, 2, "not both");
	th_run(&r, "put-weight", "bad", w, "--devices", "1,1", NULL);
	th_expect_fail(&r, 2, "lists device 1 twice");
	th_run(&r, "put-weight", "bad", w, "--devices", "0,", NULL);
	th_expect_fail(&r, 2, "--devices");
	th_run(&r, "put-weight", "bad", w, "--devices", "a", NULL);
	th_expect_fail(&r, 2, "not a device index");
	th_run(&r, "put-weight", "bad", w, "--devices", "-1", NULL);
	th_expect_fail(&r, 2, "--devices");
	th_run(&r, "put-weight", "bad", w, "--devices", "99999999999", NULL);
	th_expect_fail(&r, 2, "not a device index");
	th_run(&r, "put-weight", "bad", w, "--replicas", "0", NULL);
	th_expect_fail(&r, 2, "--replicas '0'");
	th_run(&r, "put-weight", "bad", w, "--replicas", "some", NULL);
	th_expect_fail(&r, 2, "nor 'all'");
	/* fosd's refusals (exit 1), naming the field */
	th_run(&r, "put-weight", "bad", w, "--devices", "3", NULL);
	th_expect_fail(&r, 1, "INVALID_ARGUMENT");
	assert_non_null(strstr(r.err, "devices"));
	th_run(&r, "put-weight", "bad", w, "--replicas", "4", NULL);
	th_expect_fail(&r, 1, "INVALID_ARGUMENT");
	assert_non_null(strstr(r.err, "replicas"));
	th_run(&r, "list-weights", NULL);
	th_expect_ok(&r);
	assert_null(strstr(r.out, "\nbad "));
}

static void test_stats(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "put-weight", "sx.a", th_p("w.npy"), "--devices", "0,1", NULL);
	th_expect_ok(&r);
	th_run(&r, "stats", NULL);
	th_expect_ok(&r);
	const char *t = strstr(r.out, "\ndevices (");
	if (!t)
		fail_msg("stats has no devices table: %s", r.out);
	for (int i = 0; i < 3; i++) { /* "I   numbers...  cpu:I (description)" */
		char row[32], name[32];
		snprintf(row, sizeof row, "\n%-3d ", i);
		snprintf(name, sizeof name, "  cpu:%d", i);
		const char *p = strstr(t, row), *eol = p ? strchr(p + 1, '\n') : NULL;
		const char *at = p ? strstr(p + 1, name) : NULL;
		if (!p || !at || (eol && at > eol))
			fail_msg("the devices table has no row of device %d: %s", i, t);
	}
	cli_jv j;
	th_run(&r, "stats", "--json", NULL);
	parse_json(&r, &j);
	const cli_jv *d = cli_json_get(&j, "devices"), *total = cli_json_path(&j, "cache.bytes");
	assert_true(d && d->type == CLI_JARR && d->n == 3);
	assert_true(total && total->type == CLI_JNUM && total->num > 0);
	double sum = 0;
	for (size_t i = 0; i < 3; i++) {
		const cli_jv *cb = cli_json_get(&d->items[i], "cache_bytes"), *idx = cli_json_get(&d->items[i], "index"),
			     *lanes = cli_json_get(&d->items[i], "lanes"), *dev = cli_json_get(&d->items[i], "device");
		assert_true(cb && cb->type == CLI_JNUM);
		assert_true(idx && idx->type == CLI_JNUM && idx->num == (double)i);
		assert_true(lanes && lanes->type == CLI_JNUM && lanes->num >= 1);
		assert_true(dev && dev->type == CLI_JSTR && !strncmp(dev->str, "cpu:", 4));
		sum += cb->num;
	}
	assert_true(sum == total->num);
	/* sx.a's two copies: devices 0 and 1 hold bytes, 2 none */
	assert_true(cli_json_get(&d->items[0], "cache_bytes")->num > 0);
	assert_true(cli_json_get(&d->items[1], "cache_bytes")->num > 0);
	assert_true(cli_json_get(&d->items[2], "cache_bytes")->num == 0);
	cli_json_free(&j);
	th_run(&r, "drop-weight", "sx.a", NULL);
	th_expect_ok(&r);
}

static void test_help(void **state)
{
	(void)state;
	th_result r;
	th_run(&r, "put-weight", "--help", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "\n  --devices LIST "));
	assert_non_null(strstr(r.out, "\n  --replicas N|all "));
	assert_non_null(strstr(r.out, "[--devices LIST | --replicas N|all]"));
	th_run(&r, "stats", "--help", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "devices table"));
	th_run(&r, "list-weights", "--help", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "DEVICES"));
	th_run(&r, "health", "--help", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "devices"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_health),    cmocka_unit_test(test_put_where_asked), cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_stats),     cmocka_unit_test(test_help),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
