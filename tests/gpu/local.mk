# `make check-gpu`: libhvd-nccl on real GPUs, driven through gpu_module.h
# by tests/gpu/gpu_harness (ranks as processes, one GPU each). Every case
# skips with its reason without enough GPUs; see docs/GPU.md. The harness
# is built by `make check` too, so it always compiles, and
# tests/test-gpu-module.sh uses its `probe` command.
#
# `make check` also runs the same harness and the real client/nccl_module.c
# over a host mock of the CUDA runtime and NCCL (check_gpu_mock: ranks as
# threads, streams run by a "device" thread), which needs no GPU and links
# no CUDA library. Included from tests/gpu.mk.
#
# test-gpu-libhvd.sh runs the real libhvd over that mock, built as a module
# (libhvd-nccl-mock.so, loaded through HVD_GPU_MODULE): libhvd's routing of
# device tensors and its device outputs, in a job of one rank.
EXTRA_DIST += %D%/run-gpu-tests.sh %D%/test-gpu-mock.sh %D%/test-gpu-libhvd.sh %D%/gpu_libhvd.c %D%/gpu_dlpack.py \
	%D%/old_abi_module.c

if HAVE_NCCL
check_PROGRAMS += %D%/gpu_harness %D%/check_gpu_mock
%C%_gpu_harness_SOURCES = %D%/gpu_harness.c %D%/gpu_launch.c %D%/gpu_launch.h
%C%_gpu_harness_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS) $(CUDA_CFLAGS)
%C%_gpu_harness_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_gpu_harness_LDADD = common/libhvdcommon.la $(CUDA_LIBS) -ldl -lm

%C%_check_gpu_mock_SOURCES = %D%/gpu_harness.c %D%/gpu_launch.c %D%/gpu_launch.h \
	%D%/mock_cuda.c %D%/mock_cuda.h %D%/mock_kernels.c \
	client/nccl_module.c client/nccl_kernels.h client/gpu_plan.c client/gpu_plan.h
%C%_check_gpu_mock_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS) -DGPU_LAUNCH_MOCK $(NCCL_CFLAGS) $(CUDA_CFLAGS)
%C%_check_gpu_mock_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_check_gpu_mock_LDADD = common/libhvdcommon.la -ldl -lm
TESTS += %D%/test-gpu-mock.sh

# -rpath makes libtool build real shared objects, which are never installed
check_LTLIBRARIES += %D%/libhvd-nccl-mock.la %D%/libhvd-gpu-oldabi.la
%C%_libhvd_nccl_mock_la_SOURCES = %D%/mock_cuda.c %D%/mock_cuda.h %D%/mock_kernels.c \
	client/nccl_module.c client/nccl_kernels.h client/gpu_plan.c client/gpu_plan.h
%C%_libhvd_nccl_mock_la_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS) $(NCCL_CFLAGS) $(CUDA_CFLAGS)
%C%_libhvd_nccl_mock_la_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_libhvd_nccl_mock_la_LIBADD = common/libhvdcommon.la -lpthread
%C%_libhvd_nccl_mock_la_LDFLAGS = -module -avoid-version -shared -rpath $(abs_builddir)
%C%_libhvd_gpu_oldabi_la_SOURCES = %D%/old_abi_module.c
%C%_libhvd_gpu_oldabi_la_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_libhvd_gpu_oldabi_la_LDFLAGS = -module -avoid-version -shared -rpath $(abs_builddir)

check_PROGRAMS += %D%/gpu_libhvd
%C%_gpu_libhvd_SOURCES = %D%/gpu_libhvd.c
%C%_gpu_libhvd_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_gpu_libhvd_LDADD = client/libhvd.la -ldl
TESTS += %D%/test-gpu-libhvd.sh

check-gpu: %D%/gpu_harness client/libhvd-nccl.la
	@HVD_BUILDDIR='$(abs_top_builddir)'; export HVD_BUILDDIR; \
	HVD_SRCDIR='$(abs_top_srcdir)'; export HVD_SRCDIR; \
	$(SHELL) $(srcdir)/%D%/run-gpu-tests.sh
.PHONY: check-gpu
else
check-gpu:
	@echo "check-gpu: SKIP: hvd was configured without CUDA/NCCL (configure --with-cuda[=DIR] --with-nccl[=DIR])"
.PHONY: check-gpu
endif
CLEANFILES += %D%/*.log
