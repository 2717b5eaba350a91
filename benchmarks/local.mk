# Benchmarks build only for `make bench` (EXTRA_PROGRAMS), never for `make`.
EXTRA_PROGRAMS =
include %D%/reduce.mk
