# GPU data plane tests. Included from tests/local.mk.
# - check_gpu_plan: the GPU planner (client/gpu_plan.c, pure C), in every build
# - test-gpu-module.sh: link facts (libhvd never links CUDA; the module links
#   NCCL and cudart and exports one symbol) and the no-device error path
# - tests/gpu/: `make check-gpu`, the tests that need GPUs
if HAVE_CHECK
check_PROGRAMS += %D%/check_gpu_plan
TESTS += %D%/check_gpu_plan
%C%_check_gpu_plan_SOURCES = %D%/check_gpu_plan.c client/gpu_plan.c client/gpu_plan.h
%C%_check_gpu_plan_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_gpu_plan_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_check_gpu_plan_LDADD = $(CHECK_LIBS) -lm
endif

TESTS += %D%/test-gpu-module.sh
EXTRA_DIST += %D%/test-gpu-module.sh

include %D%/gpu/local.mk
