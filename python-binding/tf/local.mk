# python-binding/tf: hvd.tensorflow — the package (python-binding/hvd/
# tensorflow/, installed whenever the Python binding is, with its Keras
# frontends hvd.tensorflow.keras and hvd.keras over hvd/_keras/) and its op library
# hvd_tf_ops.so, asynchronous CPU kernels over libhvd in C against
# TensorFlow's C API, built when configure finds a TensorFlow
# (--with-tensorflow=PYTHON). `make` puts both into the build-tree package:
#     PYTHONPATH=$(builddir)/python-binding/pkg $(TF_PYTHON) -c 'import hvd.tensorflow'

hvd_tf_py_sources = \
	python-binding/hvd/tensorflow/__init__.py \
	python-binding/hvd/tensorflow/compression.py \
	python-binding/hvd/tensorflow/elastic.py \
	python-binding/hvd/tensorflow/functions.py \
	python-binding/hvd/tensorflow/gradient_tape.py \
	python-binding/hvd/tensorflow/hooks.py \
	python-binding/hvd/tensorflow/mpi_ops.py \
	python-binding/hvd/tensorflow/optimizer.py \
	python-binding/hvd/tensorflow/sync_batch_norm.py
hvd_tf_keras_py_sources = \
	python-binding/hvd/tensorflow/keras/__init__.py \
	python-binding/hvd/tensorflow/keras/callbacks.py \
	python-binding/hvd/tensorflow/keras/elastic.py
hvd_keras_shared_py_sources = \
	python-binding/hvd/_keras/__init__.py \
	python-binding/hvd/_keras/aggregation.py \
	python-binding/hvd/_keras/api.py \
	python-binding/hvd/_keras/callbacks_impl.py \
	python-binding/hvd/_keras/compat.py \
	python-binding/hvd/_keras/elastic.py \
	python-binding/hvd/_keras/exports.py \
	python-binding/hvd/_keras/optimizer.py
hvd_keras_py_sources = \
	python-binding/hvd/keras/__init__.py \
	python-binding/hvd/keras/callbacks.py \
	python-binding/hvd/keras/elastic.py
hvd_tf_all_py_sources = $(hvd_tf_py_sources) $(hvd_tf_keras_py_sources) $(hvd_keras_shared_py_sources) \
	$(hvd_keras_py_sources)
hvd_tf_ops_sources = %D%/ops.c %D%/kernels.c %D%/complete.c %D%/outbuf.c %D%/done.cc %D%/tf_ops.h \
	python-binding/kept.c python-binding/kept.h

EXTRA_DIST += $(hvd_tf_all_py_sources) $(hvd_tf_ops_sources) docs/KERAS.md

hvd_tf_pkg_deps =
hvd_tf_ops_built =
if HAVE_PYTHON
hvdtfexecdir = $(pyexecdir)/hvd/tensorflow
hvdtfexec_PYTHON = $(hvd_tf_py_sources)
hvdtfkerasexecdir = $(pyexecdir)/hvd/tensorflow/keras
hvdtfkerasexec_PYTHON = $(hvd_tf_keras_py_sources)
hvdkerassharedexecdir = $(pyexecdir)/hvd/_keras
hvdkerassharedexec_PYTHON = $(hvd_keras_shared_py_sources)
hvdkerasexecdir = $(pyexecdir)/hvd/keras
hvdkerasexec_PYTHON = $(hvd_keras_py_sources)

if HAVE_TENSORFLOW
hvdtfexec_LTLIBRARIES = %D%/hvd_tf_ops.la
%C%_hvd_tf_ops_la_SOURCES = $(hvd_tf_ops_sources)
%C%_hvd_tf_ops_la_CPPFLAGS = $(AM_CPPFLAGS) $(TF_CFLAGS)
# TensorFlow finds the ops through the library's constructor: nothing is
# exported but what hvd.tensorflow calls (hvd_tf_names_reset, and
# hvd_tf_output_counts for its tests)
%C%_hvd_tf_ops_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
%C%_hvd_tf_ops_la_CXXFLAGS = -std=c++17 -Wall -Wextra -fvisibility=hidden $(SANITIZER_FLAGS)
%C%_hvd_tf_ops_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shrext .so
%C%_hvd_tf_ops_la_LIBADD = client/libhvd.la $(TF_LIBS)
hvd_tf_pkg_deps += %D%/hvd_tf_ops.la
hvd_tf_ops_built += %D%/.libs/hvd_tf_ops.so
endif

# The build-tree package gets hvd/tensorflow (and hvd/_keras, hvd/keras)
# after python-binding/local.mk has made hvd/ (which it remakes from
# scratch): each source linked at its path below python-binding/hvd/.
all-local: python-binding-tf-pkg
python-binding-tf-pkg: python-binding/pkg/hvd/tensorflow/.stamp
python-binding/pkg/hvd/tensorflow/.stamp: python-binding/pkg/.stamp $(hvd_tf_all_py_sources) $(hvd_tf_pkg_deps)
	$(AM_V_GEN)set -e; \
	$(MKDIR_P) $(@D); \
	for f in $(hvd_tf_all_py_sources); do \
		dest=python-binding/pkg/hvd/$${f#python-binding/hvd/}; \
		$(MKDIR_P) "$${dest%/*}"; \
		if test -f "$$f"; then src="$(abs_builddir)/$$f"; else src="$(abs_srcdir)/$$f"; fi; \
		ln -sf "$$src" "$$dest"; \
	done; \
	rm -f $(@D)/hvd_tf_ops.so; \
	for f in $(hvd_tf_ops_built); do cp -f "$$f" $(@D)/; done; \
	touch $@

# Installed, the op library carries no libtool archive (so uninstall names it).
install-exec-hook: python-binding-tf-install-exec-hook
python-binding-tf-install-exec-hook:
	rm -f $(DESTDIR)$(hvdtfexecdir)/hvd_tf_ops.la
uninstall-local: python-binding-tf-uninstall-local
python-binding-tf-uninstall-local:
	rm -f $(DESTDIR)$(hvdtfexecdir)/hvd_tf_ops.so

.PHONY: python-binding-tf-pkg python-binding-tf-install-exec-hook python-binding-tf-uninstall-local
endif
