# check_reduce: the CPU reduction kernels (portable and AVX2) against an
# independent scalar reference. Included from tests/local.mk.
if HAVE_CHECK
check_PROGRAMS += %D%/check_reduce
TESTS += %D%/check_reduce
%C%_check_reduce_SOURCES = %D%/check_reduce.c
%C%_check_reduce_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
%C%_check_reduce_LDADD = common/libhvdcommon.la $(CHECK_LIBS)
endif
