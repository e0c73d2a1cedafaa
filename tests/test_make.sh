#!/bin/sh
# test_make.sh: the Makefile's behaviour a newcomer and a packager meet first, checked without
# building anything (make -n, and make's own flags as a recipe sees them):
#   sh tests/test_make.sh BUILD            (make test-make; part of `make test`)
# * jobs: a plain `make` runs one job per CPU (-jN, N = nproc), `make -j1` one at a time, `make -j2`
#   two, and MAKEFLAGS=-j3 in the environment three: the flags a recipe sees.
# * install-prefix: `make -n install PREFIX=$T` writes nothing outside $T (every directory made,
#   file installed, link made, file redirected into or chmod'ed is under it) and runs no ldconfig;
#   fos.pc then carries -Wl,-rpath,$T/lib, and the output says how a program finds libfos.so.N.
# * install-sysconf: SYSCONFDIR=/etc given on purpose is honoured (the unit and the example config
#   go there), and PREFIX=/usr/local keeps /etc (the system layout).
# Counts: with FOS_TALLY=FILE one line "PASSED FAILED SKIPPED [names]" is appended to FILE (exit 0),
# else "N passed, N failed, N skipped" (exit 1 on a failure).
BUILD="${1:-build}"
passed=0; failed=0; skipped=0; broken=""
ok() { passed=$((passed + 1)); echo "[       OK ] $1"; }
bad() { failed=$((failed + 1)); broken="$broken make:$1"; echo "[  FAILED  ] $1: $2"; }

T=$(mktemp -d "${TMPDIR:-/tmp}/fos-make.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
echo "== test_make ($BUILD)"
unset MAKEFLAGS MAKELEVEL MFLAGS
# the build's own settings (CUDA, SAN), so that make -n shows the install steps, not a rebuild
MKARGS="${CUDA:+CUDA=$CUDA} ${SAN:+SAN=$SAN}"

# ---- jobs: what MAKEFLAGS a recipe of the Makefile sees (a rule read after it from stdin) ------
mk() { make --no-print-directory -f Makefile -f "$T/show.mk" $MKARGS "$@"; }
N=$(nproc)
printf 'fos-test-show-jobs:\n\t@echo "flags: $(MAKEFLAGS)"\n' >"$T/show.mk"
plain=$(mk BUILD="$BUILD" fos-test-show-jobs 2>&1 | sed -n 's/^flags: .* -j\([0-9][0-9]*\).*/\1/p')
one=$(mk -j1 BUILD="$BUILD" fos-test-show-jobs 2>&1 | sed -n 's/^flags: .* -j\([0-9][0-9]*\).*/\1/p')
two=$(mk -j2 BUILD="$BUILD" fos-test-show-jobs 2>&1 | sed -n 's/^flags: .* -j\([0-9][0-9]*\).*/\1/p')
three=$(MAKEFLAGS=-j3 mk BUILD="$BUILD" fos-test-show-jobs 2>&1 | sed -n 's/^flags: .* -j\([0-9][0-9]*\).*/\1/p')
if [ "$plain" = "$N" ] && [ "${one:-1}" = 1 ] && [ "$two" = 2 ] && [ "$three" = 3 ]; then
	ok "jobs (make: -j$N, make -j1: serial, make -j2: -j2, MAKEFLAGS=-j3: -j3)"
else
	bad "jobs" "want make -> -j$N (nproc), -j1 -> 1, -j2 -> 2, MAKEFLAGS=-j3 -> 3; got '${plain}' '${one}' '${two}' '${three}'"
fi

# ---- install into a private prefix: nothing outside it -----------------------------------------
P="$T/prefix"
make --no-print-directory -n $MKARGS BUILD="$BUILD" PREFIX="$P" install >"$T/install.n" 2>&1
# every path an install step writes: install's destination (every argument of install -d), ln's
# link, chmod's files, a redirection's target, mkdir's directories; one per line
outside=$(tr '\\' ' ' <"$T/install.n" | tr -s ' \t' ' ' | awk -v P="$P" '
	function check(p) { if (substr(p, 1, 1) == "/" && index(p, P) != 1) print p }
	{
		for (i = 1; i <= NF; i++) {
			w = $i
			if (w ~ /^>/) { sub(/^>+/, "", w); if (w == "" && i < NF) w = $(i + 1); check(w) }
			if (w == "ldconfig" || w ~ /[ \/;]ldconfig$/) print "ldconfig"
		}
		if ($1 == "install" || $1 == "ln" || $1 == "chmod" || $1 == "mkdir") {
			dir = 0; n = 0
			for (i = 2; i <= NF; i++) {
				if ($i == "-d") dir = 1
				if ($i ~ /^-/ || $i == "644" || $i == "755") continue
				args[++n] = $i
			}
			if (dir || $1 == "chmod" || $1 == "mkdir") { for (i = 1; i <= n; i++) check(args[i]) }
			else if (n) check(args[n])
		}
	}' | sort -u | tr '\n' ' ')
if ! grep -q "install -m 755 .*$P/bin/" "$T/install.n"; then
	bad "install-prefix" "make -n install PREFIX=$P shows no install into $P/bin: $(tail -5 "$T/install.n")"
elif [ -n "$outside" ]; then
	bad "install-prefix" "make -n install PREFIX=$P writes outside it: $outside"
elif ! grep -qF -- '-Wl,-rpath,${libdir}' "$T/install.n" || ! grep -q "LD_LIBRARY_PATH=$P/lib" "$T/install.n"; then
	bad "install-prefix" "no rpath in fos.pc or no hint on finding libfos.so.N: $(grep -n 'fos.pc\|loader' "$T/install.n")"
else
	ok "install-prefix (make -n install PREFIX=\$T: nothing outside \$T, no ldconfig, fos.pc with rpath)"
fi

make --no-print-directory -n $MKARGS BUILD="$BUILD" PREFIX="$P" SYSCONFDIR=/etc install >"$T/etc.n" 2>&1
make --no-print-directory -n $MKARGS BUILD="$BUILD" PREFIX=/usr/local DESTDIR="$T/root" install >"$T/sys.n" 2>&1
if grep -q "install -m 644 deploy/fosd.conf.example /etc/fosd/" "$T/etc.n" &&
	grep -q "install -m 644 deploy/fosd.conf.example $T/root/etc/fosd/" "$T/sys.n" &&
	grep -q 'fos.pc.in' "$T/sys.n" && ! grep 'fos.pc.in' "$T/sys.n" | grep -q -- '-Wl,-rpath'; then
	ok "install-sysconf (SYSCONFDIR=/etc honoured; PREFIX=/usr/local keeps /etc, no rpath)"
else
	bad "install-sysconf" "$(grep -h 'fosd.conf.example\|rpath' "$T/etc.n" "$T/sys.n" | tr '\n' ' ')"
fi

if [ -n "$FOS_TALLY" ]; then
	echo "$passed $failed $skipped$broken" >>"$FOS_TALLY"
	exit 0
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
