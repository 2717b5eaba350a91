# check_reduce: the CPU reduction kernels (portable and AVX2) against an
# independent scalar reference. Included from tests/local.mk.
if HAVE_CHECK
check_PROGRAMS += %D%/check_reduce
TESTS += %D%/check_reduce
%C%_check_reduce_SOURCES = %D%/check_reduce.c
%C%_check_reduce_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
%C%_check_reduce_LDADD = common/libhvdcommon.la $(CHECK_LIBS)

# check_crc32c: the ring checksum (common/crc32c.c): published check
# values, the CPU instruction against the portable code.
check_PROGRAMS += %D%/check_crc32c
TESTS += %D%/check_crc32c
%C%_check_crc32c_SOURCES = %D%/check_crc32c.c
%C%_check_crc32c_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
%C%_check_crc32c_LDADD = common/libhvdcommon.la $(CHECK_LIBS)
endif
