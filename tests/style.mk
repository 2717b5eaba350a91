# The tree's habits, checked by the suite: the C sources are what
# clang-format writes (test-format.sh), the shell scripts are clean under
# shellcheck (test-shellcheck.sh). `make format` rewrites the C sources;
# `make check-format` and `make check-shell` run the two checks alone.
TESTS += %D%/test-format.sh %D%/test-shellcheck.sh
EXTRA_DIST += %D%/test-format.sh %D%/test-shellcheck.sh

format:
	$(SHELL) $(top_srcdir)/scripts/format.sh
check-format:
	$(SHELL) $(top_srcdir)/scripts/format.sh --check
check-shell:
	$(SHELL) $(top_srcdir)/scripts/check-shell.sh
