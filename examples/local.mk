# examples: small programs that show libhvd in use. Built by `make`, never installed.
# train_mlp is the "main job": a data-parallel MLP trained on handwritten
# digits (see its --help); it reads them through zlib when configure found it.
noinst_PROGRAMS += %D%/train_mlp
%C%_train_mlp_SOURCES = %D%/train_mlp.c %D%/dataset.c %D%/dataset.h %D%/rng.h
%C%_train_mlp_LDADD = client/libhvd.la $(ZLIB_LIBS) -lm
%C%_train_mlp_CFLAGS = $(AM_CFLAGS) $(ZLIB_CFLAGS)
