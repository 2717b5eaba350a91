# tests/python.mk: the pytest suite of the Python binding (hvd, hvd.torch),
# run by every rank of a 2- and a 3-process job against a private daemon
# (tests/lib/launch.sh), its Adasum tests by a 4-process job, and most of
# it by a job of 2 emulated hosts of 2 ranks (tests/lib/launch-multi.sh).
# Skipped (77) when torch or pytest is missing.
python_test_files = \
	%D%/python/conftest.py \
	%D%/python/test_basics.py \
	%D%/python/test_jobs.py \
	%D%/python/test_numpy.py \
	%D%/python/test_torch_ops.py \
	%D%/python/test_torch_outputs.py \
	%D%/python/test_torch_reuse.py \
	%D%/python/test_torch_unnamed.py \
	%D%/python/test_torch_errors.py \
	%D%/python/test_torch_autograd.py \
	%D%/python/test_torch_grads.py \
	%D%/python/test_torch_compat.py \
	%D%/python/test_torch_training.py \
	%D%/python/test_torch_compile.py \
	%D%/python/test_process_sets.py \
	%D%/python/test_torch_join.py \
	%D%/python/test_torch_elastic.py \
	%D%/python/test_torch_cuda.py \
	%D%/python/test_torch_adasum.py \
	%D%/python/test_torch_shared.py \
	%D%/python/test_hosts.py
python_test_scripts = %D%/python/run-np2.sh %D%/python/run-np3.sh %D%/python/run-np4-adasum.sh \
	%D%/python/run-hosts.sh
EXTRA_DIST += $(python_test_files) $(python_test_scripts) %D%/python/run-pytest.sh
if HAVE_PYTHON
TESTS += $(python_test_scripts)
endif

# the Python benchmarks' scripts: their refusals and a tiny real run
EXTRA_DIST += %D%/test-bench-python.sh
if HAVE_PYTHON
TESTS += %D%/test-bench-python.sh
endif

# the training-step benchmark's tabulation of tuned points beside the grid
EXTRA_DIST += %D%/test-bench-step.sh
if HAVE_PYTHON
TESTS += %D%/test-bench-step.sh
endif
