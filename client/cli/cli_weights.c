/* cli_weights.c: fosd's weight cache from the command line: `fos put-weight` (quantize a .npy
 * weight once and cache it under a name and version, or every tensor of a .safetensors checkpoint
 * under its tensor name; on the devices --devices or --replicas name), `fos drop-weight` and
 * `fos list-weights` (with the devices holding each weight). A checkpoint's tensors are all
 * checked (dtype, shape, name) before the first is sent, and nothing is printed on stdout unless
 * all of them were cached. All three follow the global --json and --quiet (given before or after
 * the command): one JSON object, or nothing at all on success with --quiet. */
#include "cli.h"
#include "safetensors.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* FOS_WEIGHT_USE_* bit i is use_names[i] */
static const char *const use_names[4] = {"forward", "quantized", "high_precision", "dequantized"}; /* bit i */

/* Weight names as fosd accepts them: 1..128 bytes of [A-Za-z0-9._:/-]. */
static int cli_check_weight_name(const char *name, fos_err *err)
{
	size_t n = strlen(name);
	if (n < 1 || n > FOS_NAME_MAX)
		return cli_errf(err, "weight name '%.40s%s' is %zu bytes long (1 to %d allowed)", name, n > 40 ? "..." : "", n,
				FOS_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._:/-", c)))
			return cli_errf(err, "weight name '%s' has a character outside [A-Za-z0-9._:/-] at byte %zu", name, i);
	}
	return FOS_OK;
}

/* "0,1,2" (or "-" for none) into buf; returns buf. */
static const char *cli_devices_str(const fos_weight_entry *e, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = 0;
	for (size_t i = 0; i < e->n_devices && used < cap; i++) {
		int w = snprintf(buf + used, cap - used, "%s%u", i ? "," : "", (unsigned)e->devices[i]);
		if (w < 0)
			break;
		used += (size_t)w;
	}
	if (!e->n_devices)
		snprintf(buf, cap, "-");
	return buf;
}

static void cli_weight_json(cli_jw *w, const char *key, const fos_weight_entry *e)
{
	const fos_weight_info *wi = &e->info;
	cli_jw_obj(w, key);
	cli_jw_str(w, "name", wi->name);
	cli_jw_u64(w, "version", wi->version);
	cli_jw_arr(w, "shape");
	cli_jw_i64(w, NULL, wi->n);
	cli_jw_i64(w, NULL, wi->k);
	cli_jw_end(w, ']');
	cli_jw_str(w, "weight_block", cli_block_name(wi->weight_block, 1));
	cli_jw_str(w, "err", cli_errmode_name(wi->err_mode));
	cli_jw_i64(w, "bound", wi->bound ? wi->bound : 256);
	cli_jw_u64(w, "bytes", wi->bytes);
	cli_jw_bool(w, "pinned", wi->pinned);
	cli_jw_bool(w, "has_master", wi->has_master);
	cli_jw_bool(w, "has_columnwise", wi->has_columnwise);
	cli_jw_u64(w, "uses", wi->uses);
	cli_jw_u64(w, "idle_ms", wi->idle_ms);
	cli_jw_arr(w, "weight_uses");
	for (int i = 0; i < 4; i++)
		if (wi->weight_uses & (1 << i))
			cli_jw_str(w, NULL, use_names[i]);
	cli_jw_end(w, ']');
	cli_jw_u64(w, "codes_bytes", wi->codes_bytes);
	cli_jw_u64(w, "columnwise_bytes", wi->columnwise_bytes);
	cli_jw_u64(w, "master_bytes", wi->master_bytes);
	cli_jw_u64(w, "decoded_tier_bytes", wi->decoded_tier_bytes);
	cli_jw_arr(w, "devices");
	for (size_t i = 0; i < e->n_devices; i++)
		cli_jw_u64(w, NULL, e->devices[i]);
	cli_jw_end(w, ']');
	cli_jw_end(w, '}');
}

/* ---- put-weight ------------------------------------------------------------------------------- */

/* The `cached ...` line of one weight (cli_summary: none with --quiet or --json): ", on device(s)
 * LIST" at its end when fosd says where it went. */
static void cli_weight_line(const cli_global *g, const fos_weight_entry *e)
{
	const fos_weight_info *info = &e->info;
	char bb[32], on[600] = "", dl[400];
	if (e->n_devices)
		snprintf(on, sizeof on, ", on device%s %s", e->n_devices == 1 ? "" : "s", cli_devices_str(e, dl, sizeof dl));
	cli_summary(g, "cached %s version %llu: (%lld, %lld), %s blocks, %s, bound %d, %s%s%s", info->name,
		    (unsigned long long)info->version, (long long)info->n, (long long)info->k,
		    cli_block_name(info->weight_block, 1), cli_errmode_name(info->err_mode),
		    info->bound ? info->bound : 256, cli_human_bytes(info->bytes, bb, sizeof bb),
		    info->pinned ? ", pinned" : "", on);
}

/* put-weight's placement: --devices LIST or --replicas N|all (all: resolved once connected). */
typedef struct cli_placement {
	fos_placement pl;
	uint32_t devices[FOS_DEVICES_MAX];
	int replicas_all;
} cli_placement;

/* --devices LIST: comma-separated device indices (as `fos health` lists them), each once. */
static int parse_devices(const char *list, cli_placement *p, fos_err *err)
{
	const char *s = list;
	size_t n = 0;
	for (;;) {
		size_t len = strcspn(s, ",");
		char item[24];
		uint64_t v;
		if (!len)
			return cli_errf(err, "put-weight: --devices '%s' has an empty entry (give device indices, "
					     "comma-separated, e.g. 0,1)", list);
		if (len >= sizeof item || s[0] < '0' || s[0] > '9')
			return cli_errf(err, "put-weight: --devices '%s': '%.*s' is not a device index (a whole number "
					     "as `fos health` lists them)", list, (int)(len < 40 ? len : 40), s);
		memcpy(item, s, len);
		item[len] = 0;
		fos_err ie = {0, ""};
		if (cli_parse_u64("--devices", item, 0, UINT32_MAX, &v, &ie))
			return cli_errf(err, "put-weight: --devices '%s': '%s' is not a device index (a whole number "
					     "as `fos health` lists them)", list, item);
		for (size_t j = 0; j < n; j++)
			if (p->devices[j] == v)
				return cli_errf(err, "put-weight: --devices '%s' lists device %s twice", list, item);
		if (n == FOS_DEVICES_MAX)
			return cli_errf(err, "put-weight: --devices '%s' lists more than %d devices", list, FOS_DEVICES_MAX);
		p->devices[n++] = (uint32_t)v;
		s += len;
		if (!*s)
			break;
		s++; /* the comma; an entry must follow */
	}
	p->pl.devices = p->devices;
	p->pl.n_devices = n;
	return FOS_OK;
}

/* --replicas N|all. */
static int parse_replicas(const char *v, cli_placement *p, fos_err *err)
{
	uint64_t n;
	if (!strcmp(v, "all")) {
		p->replicas_all = 1;
		return FOS_OK;
	}
	fos_err ie = {0, ""};
	if (cli_parse_u64("--replicas", v, 1, FOS_DEVICES_MAX, &n, &ie))
		return cli_errf(err, "put-weight: --replicas '%s' is neither a count of devices (1 to %d) nor 'all'", v,
				FOS_DEVICES_MAX);
	p->pl.replicas = (uint32_t)n;
	return FOS_OK;
}

/* --replicas all: the number of devices fosd serves (its Health). */
static int cli_placement_resolve(fos_client *c, cli_placement *p, fos_err *err)
{
	if (!p->replicas_all)
		return FOS_OK;
	size_t n = 0;
	fos_status st;
	int code = fos_health_devices(c, NULL, 0, &n, &st);
	if (code)
		return cli_status_err(&st, "put-weight: --replicas all: the device count", err);
	p->pl.replicas = (uint32_t)(n ? n : 1);
	return FOS_OK;
}

/* Whether argv (before a "--") has --safetensors: the form without positional arguments. */
static int cli_has_safetensors(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--safetensors") || !strncmp(argv[i], "--safetensors=", 14))
			return 1;
	return 0;
}

/* The tensors of f that match (every one when match is NULL), checked to be weights: *sel gets
 * their indices (malloc'd). */
static int cli_safet_select(const safet_file *f, const char *match, size_t **sel, size_t *nsel, fos_err *err)
{
	*nsel = 0;
	*sel = malloc((f->n ? f->n : 1) * sizeof **sel);
	if (!*sel)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	for (size_t i = 0; i < f->n; i++) {
		const safet_tensor *t = &f->t[i];
		if (match && fnmatch(match, t->name, 0))
			continue;
		char sb[200];
		if (t->dtype != SAFET_BF16 && t->dtype != SAFET_F32)
			return cli_errf(err, "%s: tensor '%s' has dtype %s (BF16 or F32 expected; --match selects tensors)",
					f->path, t->name, t->dtype_name);
		if (t->ndim != 2 || !t->count)
			return cli_errf(err, "%s: tensor '%s' has shape %s (a nonempty (N, K) expected; --match selects "
					     "tensors)",
					f->path, t->name, safet_shape_str(t, sb, sizeof sb));
		fos_err ne = {0, ""};
		if (cli_check_weight_name(t->name, &ne))
			return cli_errf(err, "%s: tensor '%s': %s", f->path, t->name, ne.msg);
		(*sel)[(*nsel)++] = i;
	}
	if (!*nsel)
		return match ? cli_errf(err, "%s: no tensor name matches --match '%s' (%zu tensors in the file)", f->path,
					match, f->n)
			     : cli_errf(err, "%s: the file holds no tensors", f->path);
	return FOS_OK;
}

/* put-weight --replace: drops name (any version) so that the put after it caches it anew; a weight
 * not cached is nothing to replace. */
static int cli_put_replace(fos_client *c, const char *name, fos_err *err)
{
	fos_status st;
	int code = fos_drop_weight(c, name, &st);
	if (code && code != FOS_CODE_NOT_FOUND) {
		char what[200];
		snprintf(what, sizeof what, "put-weight --replace %s: dropping the cached one", name);
		return cli_status_err(&st, what, err);
	}
	return FOS_OK;
}

/* put-weight --safetensors: every selected tensor as the weight of its name. */
static int cli_put_safetensors(const cli_global *g, const char *path, const char *match, uint64_t version,
			       const fos_weight_config *cfg, cli_placement *pl, int replace)
{
	fos_err err = {0, ""};
	safet_file f;
	size_t *sel = NULL, nsel = 0;
	fos_weight_entry *infos = NULL;
	fos_client *c = NULL;
	int ex = CLI_EXIT_FAIL;
	if (safet_open(path, &f, &err) || cli_safet_select(&f, match, &sel, &nsel, &err))
		goto out;
	infos = calloc(nsel, sizeof *infos);
	if (!infos) {
		fos_seterr(&err, FOS_ENOMEM, "out of memory");
		goto out;
	}
	if (cli_connect(g, &c, &err) || cli_placement_resolve(c, pl, &err))
		goto out;
	for (size_t i = 0; i < nsel; i++) {
		const safet_tensor *t = &f.t[sel[i]];
		uint16_t *w;
		if (safet_read_bf16(&f, t, &w, &err))
			goto out;
		fos_tensor ft = fos_tensor_2d(FOS_DTYPE_BF16, t->shape[0], t->shape[1], w);
		fos_status st;
		if (replace && cli_put_replace(c, t->name, &err)) {
			free(w);
			goto out;
		}
		int code = fos_put_weight_on(c, t->name, version, &ft, cfg, &pl->pl, &infos[i], &st);
		free(w);
		if (code) {
			char what[400];
			snprintf(what, sizeof what, "put-weight %s from %s (%zu of %zu weights cached before it)", t->name,
				 path, i, nsel);
			cli_status_err(&st, what, &err);
			goto out;
		}
	}
	if (g->json && !g->quiet) {
		cli_jw jw;
		cli_jw_init(&jw, stdout, 1);
		cli_jw_obj(&jw, NULL);
		cli_jw_str(&jw, "safetensors", path);
		cli_jw_arr(&jw, "weights");
		for (size_t i = 0; i < nsel; i++)
			cli_weight_json(&jw, NULL, &infos[i]);
		cli_jw_end(&jw, ']');
		cli_jw_u64(&jw, "skipped", f.n - nsel);
		cli_jw_end(&jw, '}');
	} else {
		for (size_t i = 0; i < nsel; i++)
			cli_weight_line(g, &infos[i]);
		cli_summary(g, "cached %zu weight%s from %s (%zu tensor%s not matched)", nsel, nsel == 1 ? "" : "s", path,
			    f.n - nsel, f.n - nsel == 1 ? "" : "s");
	}
	ex = cli_flush_stdout("put-weight");
out:
	if (c)
		fos_close(c);
	free(infos);
	free(sel);
	safet_close(&f);
	return ex == CLI_EXIT_OK ? ex : cli_report(&err, ex);
}

enum { PF_VERSION, PF_WBLOCK, PF_ERR, PF_BOUND, PF_PIN, PF_DROP_MASTER, PF_EAGER, PF_SAFET, PF_MATCH, PF_JSON, PF_USES,
       PF_DEVICES, PF_REPLICAS, PF_REPLACE, PF_SCOPE, PF_COUNT };


/* --uses LIST: comma-separated use names into FOS_WEIGHT_USE_* bits; -1 with err on a bad one. */
static int parse_uses(const char *list, int *out, fos_err *err)
{
	int u = 0;
	const char *p = list;
	while (*p) {
		size_t len = strcspn(p, ",");
		int bit = -1;
		for (int i = 0; i < 4; i++)
			if (strlen(use_names[i]) == len && !strncmp(p, use_names[i], len))
				bit = i;
		if (bit < 0 || (u & (1 << bit))) {
			cli_errf(err, "put-weight: --uses '%s': %s '%.*s' (give forward, quantized, high_precision, "
				      "dequantized, comma-separated, each once)", list, bit < 0 ? "unknown use" : "repeated use",
				 (int)len, p);
			return -1;
		}
		u |= 1 << bit;
		p += len;
		if (*p == ',' && *++p == 0) {
			cli_errf(err, "put-weight: --uses '%s' ends with a comma", list);
			return -1;
		}
	}
	if (!u) {
		cli_errf(err, "put-weight: --uses is empty");
		return -1;
	}
	*out = u;
	return 0;
}

int cli_put_weight_main(const cli_global *g, int argc, char **argv)
{
	fos_err err = {0, ""};
	cli_flag flags[PF_COUNT] = {
		[PF_VERSION] = {"--version", "V", "the weight's version, a whole number >= 1 (default 1); a\n"
						  "new version replaces the cached one, the same one is refused\n"
						  "(ALREADY_EXISTS) unless --replace", 0, 0},
		[PF_REPLACE] = {"--replace", NULL, "replace a cached weight of this name whatever its version\n"
						   "(drops it, then puts this one)", 0, 0},
		[PF_WBLOCK] = {"--weight-block", "16x16|1x16", "block shape of the weight's scales (default 16x16)", 0, 0},
		[PF_ERR] = {"--err", "mae|mse", "how 4/6 compares its two candidates (default mae); a\n"
						"forward's X is quantized the same way", 0, 0},
		[PF_BOUND] = {"--bound", "256|448", "E4M3 scale bound (default 256)", 0, 0},
		[PF_PIN] = {"--pin", NULL, "never evict it to make room (drop-weight still drops it)", 0, 0},
		[PF_DROP_MASTER] = {"--drop-master", NULL, "keep no bf16 copy of W: less memory, but no\n"
							   "high_precision backward (--uses without it)", 0, 0},
		[PF_EAGER] = {"--eager-columnwise", NULL, "no effect: the columnwise copy (quantized\n"
							  "backward) is always made at put", 0, 0},
		[PF_SAFET] = {"--safetensors", "FILE", "instead of NAME W.npy: every tensor of a .safetensors\n"
						       "checkpoint (BF16 or F32, (N, K)), each cached under its\n"
						       "tensor name with the options given here", 0, 0},
		[PF_MATCH] = {"--match", "GLOB", "with --safetensors: only the tensors whose names match\n"
						 "GLOB (fnmatch(3): * ? [...]; * matches '.' and '/')", 0, 0},
		[PF_JSON] = {"--json", NULL, "print the cached entry as one JSON object (--safetensors:\n"
					     "{\"safetensors\": FILE, \"weights\": [...], \"skipped\": N})", 0, 0},
		[PF_USES] = {"--uses", "LIST", "what the weight serves, comma-separated: forward,\n"
					       "quantized, high_precision, dequantized (default all); it\n"
					       "keeps only what they need, other uses fail\n"
					       "FAILED_PRECONDITION", 0, 0},
		[PF_DEVICES] = {"--devices", "LIST", "the devices to put it on, comma-separated indices as\n"
						     "`fos health` lists them (e.g. 0,1); a device it was on\n"
						     "and is not listed drops its copy", 0, 0},
		[PF_REPLICAS] = {"--replicas", "N|all", "put it on N devices (all: every device fosd serves),\n"
							"those it is on first, then the least loaded; default\n"
							"(neither option): where it is now, else the one\n"
							"least loaded device", 0, 0},
		[PF_SCOPE] = {"--four-over-six", "SCOPE", "the scope W is quantized for: all (default) or weights\n"
							  "(W 4/6), activations or none (W plain NVFP4);\n"
							  "forwards default to it (NUMERICS.md 11)", 0, 0},
	};
	static const char *const pos_names[] = {"NAME", "W.npy"};
	static const char *const pos_help[] = {"the name forwards will use: 1 to 128 of [A-Za-z0-9._:/-]",
					       "the weight, shape (N, K), bf16 ('<u2') or float32 ('<f4',\n"
					       "rounded to bf16); N and K multiples of 16"};
	cli_cmd cmd = {
		.name = "put-weight",
		.synopsis = "NAME W.npy [--version V] [--weight-block 16x16|1x16] [--err mae|mse]\n"
			    "           [--bound 256|448] [--pin] [--drop-master] [--eager-columnwise]\n"
			    "           [--uses forward,quantized,high_precision,dequantized]\n"
			    "           [--devices LIST | --replicas N|all] [--four-over-six SCOPE] [--replace] [--json]\n"
			    "   or: fos put-weight --safetensors FILE [--match GLOB] [the options above]",
		.summary = "Quantize a weight once into fosd's cache; `fos forward NAME ...` then uses it.",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
	};
	int safet = cli_has_safetensors(argc, argv);
	if (safet)
		cmd.npos = 0; /* --safetensors FILE stands for NAME W.npy */
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;
	if (flags[PF_MATCH].given && !safet) {
		cli_errf(&err, "put-weight: --match selects tensors of a --safetensors FILE");
		return cli_report(&err, CLI_EXIT_USAGE);
	}
	int block = FOS_BLOCK_16X16, errm = FOS_ERR_MAE, bound = 256, uses = 0, scope = FOS_SCOPE_ALL;
	uint64_t version = 1;
	if (cli_opt_block(&flags[PF_WBLOCK], &block, &err) || cli_opt_err_mode(&flags[PF_ERR], &errm, &err) ||
	    cli_opt_bound(&flags[PF_BOUND], &bound, &err) || cli_opt_scope(&flags[PF_SCOPE], &scope, &err) ||
	    (flags[PF_VERSION].given && cli_parse_u64("--version", flags[PF_VERSION].value, 1, UINT64_MAX, &version, &err)) ||
	    (!safet && cli_check_weight_name(cmd.pos[0], &err)) ||
	    (flags[PF_USES].given && parse_uses(flags[PF_USES].value, &uses, &err)))
		return cli_report(&err, CLI_EXIT_USAGE);
	cli_placement place;
	memset(&place, 0, sizeof place);
	if (flags[PF_DEVICES].given && flags[PF_REPLICAS].given) {
		cli_errf(&err, "put-weight: give --devices or --replicas, not both");
		return cli_report(&err, CLI_EXIT_USAGE);
	}
	if ((flags[PF_DEVICES].given && parse_devices(flags[PF_DEVICES].value, &place, &err)) ||
	    (flags[PF_REPLICAS].given && parse_replicas(flags[PF_REPLICAS].value, &place, &err)))
		return cli_report(&err, CLI_EXIT_USAGE);
	fos_weight_config cfg = {.weight_block = fos_block_to_wire(block),
				 .err_mode = errm,
				 .bound = bound,
				 .pin = flags[PF_PIN].given,
				 .drop_master = flags[PF_DROP_MASTER].given,
				 .eager_columnwise = flags[PF_EAGER].given,
				 .uses = uses,
				 .four_over_six = fos_scope_to_wire(scope)};
	if (safet)
		return cli_put_safetensors(g, flags[PF_SAFET].value, flags[PF_MATCH].value, version, &cfg, &place,
					   flags[PF_REPLACE].given);
	const char *name = cmd.pos[0], *wp = cmd.pos[1];
	npy_array w = {0};
	if (cli_load_bf16(wp, 2, "(N, K)", &w, &err) || cli_check_nonempty(&w, wp, &err)) {
		npy_free(&w);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	fos_client *c;
	if (cli_connect(g, &c, &err)) {
		npy_free(&w);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	if (cli_placement_resolve(c, &place, &err) || (flags[PF_REPLACE].given && cli_put_replace(c, name, &err))) {
		fos_close(c);
		npy_free(&w);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	fos_tensor t = cli_tensor_bf16(&w);
	fos_weight_entry info;
	fos_status st;
	int code = fos_put_weight_on(c, name, version, &t, &cfg, &place.pl, &info, &st);
	fos_close(c);
	npy_free(&w);
	if (code) {
		char what[200];
		snprintf(what, sizeof what, "put-weight %s", name);
		cli_status_err(&st, what, &err);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	if (g->json && !g->quiet) {
		cli_jw jw;
		cli_jw_init(&jw, stdout, 1);
		cli_weight_json(&jw, NULL, &info);
	} else {
		cli_weight_line(g, &info);
	}
	return cli_flush_stdout("put-weight");
}

/* ---- drop-weight ------------------------------------------------------------------------------ */

enum { DWF_JSON, DWF_COUNT };

int cli_drop_weight_main(const cli_global *g, int argc, char **argv)
{
	cli_flag flags[DWF_COUNT] = {
		[DWF_JSON] = {"--json", NULL, "print one JSON object naming the weight dropped:\n"
					      "{\"command\": \"drop-weight\", \"where\": \"fosd\", \"server\": URL,\n"
					      "\"weight\": NAME}", 0, 0},
	};
	static const char *const pos_names[] = {"NAME"};
	static const char *const pos_help[] = {"the cached weight to remove (forwards and contexts already\n"
					       "using it finish with it)"};
	cli_cmd cmd = {
		.name = "drop-weight",
		.synopsis = "NAME [--json]",
		.summary = "Remove a weight from fosd's cache.",
		CLI_CMD_ARGS(pos_names, pos_help, flags),
		.footer = "Exit status: 0 dropped; 1 no such weight (NOT_FOUND) or fosd error; 2 bad command line.",
	};
	fos_err err = {0, ""};
	int rc = cli_parse_main(&cmd, argc, argv, &err);
	if (rc >= 0)
		return rc;
	if (cli_check_weight_name(cmd.pos[0], &err))
		return cli_report(&err, CLI_EXIT_USAGE);
	fos_client *c;
	if (cli_connect(g, &c, &err))
		return cli_report(&err, CLI_EXIT_FAIL);
	fos_status st;
	int code = fos_drop_weight(c, cmd.pos[0], &st);
	fos_close(c);
	if (code) {
		char what[200];
		snprintf(what, sizeof what, "drop-weight %s", cmd.pos[0]);
		cli_status_err(&st, what, &err);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	if (g->json && !g->quiet) {
		cli_jw jw;
		cli_json_begin(&jw, g, "drop-weight", 0, NULL);
		cli_jw_str(&jw, "weight", cmd.pos[0]);
		cli_jw_end(&jw, '}');
	} else {
		cli_summary(g, "dropped %s from fosd at %s", cmd.pos[0], g->server);
	}
	return cli_flush_stdout("drop-weight");
}

/* ---- list-weights ----------------------------------------------------------------------------- */

enum { LWF_JSON, LWF_COUNT };

int cli_list_weights_main(const cli_global *g, int argc, char **argv)
{
	cli_flag flags[LWF_COUNT] = {
		[LWF_JSON] = {"--json", NULL, "print {\"weights\": [...]} as JSON", 0, 0},
	};
	cli_cmd cmd = {
		.name = "list-weights",
		.synopsis = "[--json]",
		.summary = "List the weights in fosd's cache, in byte order of their names.",
		CLI_CMD_FLAGS(flags),
		.about = "fosd answers in pages of up to 1000 weights; all pages are fetched and listed.\n"
			 "DEVICES (--json: \"devices\") are the devices holding a copy, by their index in\n"
			 "`fos health`; BYTES and the parts are one copy's.",
	};
	fos_client *c;
	int ex;
	if (!cli_parse_connect(g, &cmd, argc, argv, &c, &ex))
		return ex;
	fos_err err = {0, ""};
	fos_weight_entry *list = NULL;
	size_t n = 0;
	fos_status st;
	int code = fos_list_weight_entries(c, &list, &n, &st);
	fos_close(c);
	if (code) {
		cli_status_err(&st, "list-weights", &err);
		return cli_report(&err, CLI_EXIT_FAIL);
	}
	if (g->quiet) {
		/* nothing on success */
	} else if (g->json) {
		cli_jw w;
		cli_jw_init(&w, stdout, 1);
		cli_jw_obj(&w, NULL);
		cli_jw_str(&w, "server", g->server);
		cli_jw_arr(&w, "weights");
		for (size_t i = 0; i < n; i++)
			cli_weight_json(&w, NULL, &list[i]);
		cli_jw_end(&w, ']');
		cli_jw_end(&w, '}');
	} else if (n == 0) {
		printf("no weights cached at %s\n", g->server);
	} else {
		printf("%-24s %8s %-14s %-6s %-4s %5s %10s %-8s %s\n", "NAME", "VERSION", "SHAPE (N, K)", "BLOCK", "ERR",
		       "BOUND", "BYTES", "DEVICES", "FLAGS");
		for (size_t i = 0; i < n; i++) {
			const fos_weight_info *wi = &list[i].info;
			char shape[64], bb[32], fl[320], cb[32], colb[32], mb[32], tb[32], fu[64] = "", dl[400];
			snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)wi->n, (long long)wi->k);
			for (int u = 0; u < 4; u++)
				if (wi->weight_uses & (1 << u))
					snprintf(fu + strlen(fu), sizeof fu - strlen(fu), "%s%s", fu[0] ? "," : "", use_names[u]);
			snprintf(fl, sizeof fl, "%s%s%suses=%llu idle=%.1fs for=%s codes=%s columnwise=%s master=%s tier=%s",
				 wi->pinned ? "pinned " : "", wi->has_master ? "master " : "",
				 wi->has_columnwise ? "columnwise " : "", (unsigned long long)wi->uses,
				 (double)wi->idle_ms / 1000.0, fu, cli_human_bytes(wi->codes_bytes, cb, sizeof cb),
				 cli_human_bytes(wi->columnwise_bytes, colb, sizeof colb),
				 cli_human_bytes(wi->master_bytes, mb, sizeof mb),
				 cli_human_bytes(wi->decoded_tier_bytes, tb, sizeof tb));
			printf("%-24s %8llu %-14s %-6s %-4s %5d %10s %-8s %s\n", wi->name, (unsigned long long)wi->version,
			       shape, cli_block_name(wi->weight_block, 1), cli_errmode_name(wi->err_mode),
			       wi->bound ? wi->bound : 256, cli_human_bytes(wi->bytes, bb, sizeof bb),
			       cli_devices_str(&list[i], dl, sizeof dl), fl);
		}
	}
	free(list);
	return cli_flush_stdout("list-weights");
}
