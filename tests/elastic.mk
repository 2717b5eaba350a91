# tests/elastic.mk: elastic jobs (daemon/elastic.c, hvd.elastic, hvdrun's
# elastic mode) on emulated hosts (test-elastic-ssh.sh: on network
# namespaces, over an ssh stand-in), with tests/elastic/train.py; skipped
# (77) when torch is missing. test-elastic-tf.sh: hvd.tensorflow.elastic
# with tests/elastic/train_tf.py, test-elastic-keras-fit.sh: model.fit with
# hvd.keras's elastic callbacks (tests/elastic/fit_keras.py), both skipped
# without TensorFlow's op library.
elastic_tests = %D%/test-elastic-fail.sh %D%/test-elastic-host.sh %D%/test-elastic-limits.sh \
	%D%/test-elastic-grow.sh %D%/test-elastic-tune.sh %D%/test-elastic-tf.sh \
	%D%/test-elastic-hang.sh %D%/test-elastic-timeline.sh %D%/test-elastic-join.sh \
	%D%/test-elastic-warm.sh %D%/test-elastic-ssh.sh %D%/test-elastic-keras-fit.sh
EXTRA_DIST += $(elastic_tests) %D%/elastic/lib.sh %D%/elastic/train.py %D%/elastic/train_tf.py %D%/elastic/fit_keras.py %D%/elastic/tf_python.sh %D%/elastic/discover.sh docs/ELASTIC.md
if HAVE_PYTHON
TESTS += $(elastic_tests)
endif
