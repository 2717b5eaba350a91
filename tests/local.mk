# Tests: Check unit tests, multi-process integration tests, pytest.
AM_TESTS_ENVIRONMENT = \
	HVD_BUILDDIR='$(abs_top_builddir)'; export HVD_BUILDDIR; \
	HVD_SRCDIR='$(abs_top_srcdir)'; export HVD_SRCDIR; \
	PYTHON='$(PYTHON)'; export PYTHON;

include %D%/reduce.mk
include %D%/unit.mk
include %D%/integration.mk
include %D%/tools.mk
include %D%/python.mk
