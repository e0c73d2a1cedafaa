/* fos_version.h: the one version number of fosd, libfos and the fos CLI (semantic versioning:
 * MAJOR changes break the wire or the C ABI, MINOR adds to them, PATCH fixes). Included by fos.h
 * (installed beside it) and by fosd; FOS_VERSION is the string form of the three numbers. */
#ifndef FOS_VERSION_H
#define FOS_VERSION_H

#define FOS_VERSION_MAJOR 0
#define FOS_VERSION_MINOR 2
#define FOS_VERSION_PATCH 0

/* libfos's C ABI: the shared library's SONAME is libfos.so.FOS_SOVERSION (the Makefile reads it
 * here). Raised, with the symbol version of client/libfos/libfos.map, when a change breaks
 * programs linked against an older libfos; additions keep it. */
#define FOS_SOVERSION 1

#define FOS_VERSION_STR_(x) #x
#define FOS_VERSION_STR(x) FOS_VERSION_STR_(x)
/* "MAJOR.MINOR.PATCH" */
#define FOS_VERSION                                                                              \
	FOS_VERSION_STR(FOS_VERSION_MAJOR) "." FOS_VERSION_STR(FOS_VERSION_MINOR) "." FOS_VERSION_STR( \
		FOS_VERSION_PATCH)

#endif
