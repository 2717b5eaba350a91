# examples: small programs that show libhvd in use. Built by `make`, never installed.
# train_mlp is the "main job": a data-parallel MLP training run (see its --help).
noinst_PROGRAMS += %D%/train_mlp
%C%_train_mlp_SOURCES = %D%/train_mlp.c
%C%_train_mlp_LDADD = client/libhvd.la -lm
