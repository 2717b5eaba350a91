# tests/tf.mk: the pytest suite of hvd.tensorflow (tests/tf), run by every
# rank of a 2- and a 3-process job against a private daemon, with the
# Python configure built the op library against (else the environment of
# scripts/venv-tf.sh). Skipped (77), saying why, without the op library.
# test-venv-tf.sh checks scripts/venv-tf.sh without downloading.
tf_test_files = \
	%D%/tf/conftest.py \
	%D%/tf/test_tf_ops.py \
	%D%/tf/test_tf_grads.py \
	%D%/tf/test_tf_errors.py \
	%D%/tf/test_tf_training.py
tf_test_scripts = %D%/tf/run-np2.sh %D%/tf/run-np3.sh %D%/test-venv-tf.sh
tf_test_scripts += %D%/test-tf2-examples.sh
EXTRA_DIST += $(tf_test_files) $(tf_test_scripts) %D%/tf/run-pytest.sh scripts/venv-tf.sh
# the TensorFlow 2 examples, run by test-tf2-examples.sh
EXTRA_DIST += examples/tensorflow/tensorflow2_synthetic_benchmark.py examples/tensorflow/tensorflow2_digits.py \
	examples/tensorflow/README.md
AM_TESTS_ENVIRONMENT += HVD_TF_PYTHON='$(TF_PYTHON)'; export HVD_TF_PYTHON;
if HAVE_PYTHON
TESTS += $(tf_test_scripts)
endif
