# python-binding: the Python package `hvd` (numpy API), `hvd.torch` (the
# horovod.torch API) and their CPython extension hvd._core over libhvd.
# Built when configure finds Python headers; installed into
# $(pyexecdir)/hvd. `make` also assembles a usable copy of the package in
# the build tree:
#     PYTHONPATH=$(builddir)/python-binding/pkg $(PYTHON) -c 'import hvd.torch'

hvd_py_sources = \
	%D%/hvd/__init__.py \
	%D%/hvd/_warm.py
hvd_common_py_sources = \
	%D%/hvd/common/__init__.py \
	%D%/hvd/common/basics.py \
	%D%/hvd/common/elastic.py \
	%D%/hvd/common/exceptions.py \
	%D%/hvd/common/ops.py \
	%D%/hvd/common/process_sets.py
hvd_torch_py_sources = \
	%D%/hvd/torch/__init__.py \
	%D%/hvd/torch/_library.py \
	%D%/hvd/torch/_named.py \
	%D%/hvd/torch/_reuse.py \
	%D%/hvd/torch/adasum.py \
	%D%/hvd/torch/compression.py \
	%D%/hvd/torch/functions.py \
	%D%/hvd/torch/mpi_ops.py \
	%D%/hvd/torch/optimizer.py \
	%D%/hvd/torch/shared.py \
	%D%/hvd/torch/sync_batch_norm.py
hvd_torch_elastic_py_sources = \
	%D%/hvd/torch/elastic/__init__.py \
	%D%/hvd/torch/elastic/sampler.py \
	%D%/hvd/torch/elastic/state.py

# pyproject.toml and setup.py: `pip install ./python-binding` against an
# installed libhvd (pkg-config hvd), beside `make install`
EXTRA_DIST += $(hvd_py_sources) $(hvd_common_py_sources) $(hvd_torch_py_sources) $(hvd_torch_elastic_py_sources) \
	%D%/hvdmodule.c %D%/core.h %D%/handle.c %D%/prepared.c %D%/kept.c %D%/kept.h %D%/c10_counts.c %D%/c10_counts.h %D%/reuse_pick.c %D%/reuse_pick.h \
	%D%/pyproject.toml %D%/setup.py \
	%D%/README.md docs/HOROVOD.md examples/python/README.md examples/python/train_mnist.py \
	examples/python/pytorch_synthetic_benchmark.py

if HAVE_PYTHON
# The extension and the modules go to one directory (pyexecdir): the
# package holds platform code, so it must not be split across
# pythondir and pyexecdir.
hvdexecdir = $(pyexecdir)/hvd
hvdexec_LTLIBRARIES = %D%/_core.la
hvdexec_PYTHON = $(hvd_py_sources)
hvdcommonexecdir = $(pyexecdir)/hvd/common
hvdcommonexec_PYTHON = $(hvd_common_py_sources)
hvdtorchexecdir = $(pyexecdir)/hvd/torch
hvdtorchexec_PYTHON = $(hvd_torch_py_sources)
hvdtorchelasticexecdir = $(pyexecdir)/hvd/torch/elastic
hvdtorchelasticexec_PYTHON = $(hvd_torch_elastic_py_sources)

%C%__core_la_SOURCES = %D%/hvdmodule.c %D%/core.h %D%/handle.c %D%/prepared.c %D%/kept.c %D%/kept.h %D%/c10_counts.c %D%/c10_counts.h %D%/reuse_pick.c %D%/reuse_pick.h
# NCCL_CFLAGS and CUDA_CFLAGS (empty without NCCL) find nccl.h, for its version
%C%__core_la_CPPFLAGS = $(AM_CPPFLAGS) $(PYTHON_CFLAGS) $(NCCL_CFLAGS) $(CUDA_CFLAGS)
%C%__core_la_CFLAGS = $(AM_CFLAGS) -fno-strict-aliasing
%C%__core_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shrext $(PYTHON_EXT_SUFFIX) \
	-export-symbols-regex '^PyInit__core$$'
%C%__core_la_LIBADD = client/libhvd.la

# The build-tree package: symlinks to the sources (edits show at once) and
# a copy of the extension, under python-binding/pkg/hvd.
all-local: python-binding-pkg
python-binding-pkg: %D%/pkg/.stamp
%D%/pkg/.stamp: $(hvd_py_sources) $(hvd_common_py_sources) $(hvd_torch_py_sources) $(hvd_torch_elastic_py_sources) \
		%D%/_core.la
	$(AM_V_GEN)set -e; \
	rm -rf $(@D)/hvd; \
	for f in $(hvd_py_sources) $(hvd_common_py_sources) $(hvd_torch_py_sources) $(hvd_torch_elastic_py_sources); do \
		dest=$(@D)/hvd/$${f#%D%/hvd/}; \
		$(MKDIR_P) "$${dest%/*}"; \
		if test -f "$$f"; then src="$(abs_builddir)/$$f"; else src="$(abs_srcdir)/$$f"; fi; \
		ln -s "$$src" "$$dest"; \
	done; \
	cp -f %D%/.libs/_core$(PYTHON_EXT_SUFFIX) $(@D)/hvd/; \
	touch $@

# Installed packages carry no libtool archive (so uninstall names the module).
install-exec-hook: python-binding-install-exec-hook
python-binding-install-exec-hook:
	rm -f $(DESTDIR)$(hvdexecdir)/_core.la
uninstall-local: python-binding-uninstall-local
python-binding-uninstall-local:
	rm -f $(DESTDIR)$(hvdexecdir)/_core$(PYTHON_EXT_SUFFIX)

clean-local: python-binding-clean-local
python-binding-clean-local:
	rm -rf %D%/pkg

.PHONY: python-binding-pkg python-binding-install-exec-hook python-binding-uninstall-local \
	python-binding-clean-local
endif
