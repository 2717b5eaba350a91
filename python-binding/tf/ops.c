/* ops.c — registers hvd's TensorFlow ops and their CPU kernels when
 * tf.load_op_library opens the library: the op definitions (inputs,
 * outputs, attributes, shape functions) and, for each, an asynchronous
 * kernel (kernels.c). The collectives are stateless, so that TensorFlow
 * runs independent ones at once (a stateful op is ordered after every
 * other stateful op of its function); join and barrier are stateful. */
#include "config.h"

#include <stdbool.h>
#include <stddef.h>

/* kernels.h defines TF_InputRange_Args_STRUCT_SIZE, a constant of external
 * linkage in C, and kernels.c includes it too: this file's copy gets a name
 * of its own. ops.h names its structs without typedefs, which C needs. */
#define TF_InputRange_Args_STRUCT_SIZE hvd_tf_ops_input_range_args_size
typedef struct TF_DimensionHandle TF_DimensionHandle;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeHandle TF_ShapeHandle;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;
#include <tensorflow/c/kernels.h>
#include <tensorflow/c/ops.h>

#include "tf_ops.h"

#define TYPES "{uint8, int8, int16, int32, int64, half, bfloat16, float, double, bool}"

/* Every output has the shape of the input of the same index. */
static void shape_like_inputs(TF_ShapeInferenceContext *ctx, TF_Status *st) {
        TF_ShapeHandle *h = TF_NewShapeHandle();
        int64_t n = TF_ShapeInferenceContextNumInputs(ctx);
        for (int64_t i = 0; i < n && TF_GetCode(st) == TF_OK; i++) {
                TF_ShapeInferenceContextGetInput(ctx, (int) i, h, st);
                if (TF_GetCode(st) == TF_OK)
                        TF_ShapeInferenceContextSetOutput(ctx, (int) i, h, st);
        }
        TF_DeleteShapeHandle(h);
}

/* A first dimension that varies by rank: left to the Python wrappers. */
static void shape_unknown(TF_ShapeInferenceContext *ctx, TF_Status *st) {
        TF_ShapeInferenceContextSetUnknownShape(ctx, st);
}

static void shape_scalar(TF_ShapeInferenceContext *ctx, TF_Status *st) {
        TF_ShapeHandle *h = TF_ShapeInferenceContextScalar(ctx);
        TF_ShapeInferenceContextSetOutput(ctx, 0, h, st);
        TF_DeleteShapeHandle(h);
}

#define CREATE(fn, kind)                                                                                               \
        static void *fn(TF_OpKernelConstruction *ctx) {                                                                \
                return hvd_tf_kernel_new(ctx, kind);                                                                   \
        }
CREATE(create_allreduce, HVD_TF_ALLREDUCE)
CREATE(create_grouped_allreduce, HVD_TF_GROUPED_ALLREDUCE)
CREATE(create_allgather, HVD_TF_ALLGATHER)
CREATE(create_broadcast, HVD_TF_BROADCAST)
CREATE(create_alltoall, HVD_TF_ALLTOALL)
CREATE(create_reducescatter, HVD_TF_REDUCESCATTER)
CREATE(create_grouped_allgather, HVD_TF_GROUPED_ALLGATHER)
CREATE(create_grouped_reducescatter, HVD_TF_GROUPED_REDUCESCATTER)
CREATE(create_size, HVD_TF_SIZE)
CREATE(create_rank, HVD_TF_RANK)
CREATE(create_local_size, HVD_TF_LOCAL_SIZE)
CREATE(create_local_rank, HVD_TF_LOCAL_RANK)
CREATE(create_process_set_included, HVD_TF_PROCESS_SET_INCLUDED)
CREATE(create_join, HVD_TF_JOIN)
CREATE(create_barrier, HVD_TF_BARRIER)

typedef struct op_spec {
        hvd_tf_kind_t kind;
        void *(*create)(TF_OpKernelConstruction *);
        const char *attrs[8];
        const char *inputs[3];
        const char *outputs[3];
        void (*shape)(TF_ShapeInferenceContext *, TF_Status *);
        bool stateful;
} op_spec_t;

#define REDUCE_ATTRS "reduce_op: int = 1", "prescale: float = 1.0", "postscale: float = 1.0"
#define NAME_ATTRS   "process_set: int = 0", "tensor_name: string = ''"

static const op_spec_t specs[] = {
        { HVD_TF_ALLREDUCE,
          create_allreduce,
          { "T: " TYPES, REDUCE_ATTRS, NAME_ATTRS },
          { "tensor: T" },
          { "output: T" },
          shape_like_inputs,
          false },
        { HVD_TF_GROUPED_ALLREDUCE,
          create_grouped_allreduce,
          { "T: list(" TYPES ") >= 1", REDUCE_ATTRS, NAME_ATTRS },
          { "tensors: T" },
          { "outputs: T" },
          shape_like_inputs,
          false },
        { HVD_TF_ALLGATHER,
          create_allgather,
          { "T: " TYPES, NAME_ATTRS },
          { "tensor: T" },
          { "output: T" },
          shape_unknown,
          false },
        { HVD_TF_BROADCAST,
          create_broadcast,
          { "T: " TYPES, "root_rank: int = 0", NAME_ATTRS },
          { "tensor: T" },
          { "output: T" },
          shape_like_inputs,
          false },
        { HVD_TF_ALLTOALL,
          create_alltoall,
          { "T: " TYPES, NAME_ATTRS },
          { "tensor: T", "splits: int32" },
          { "output: T", "received_splits: int32" },
          shape_unknown,
          false },
        { HVD_TF_REDUCESCATTER,
          create_reducescatter,
          { "T: " TYPES, REDUCE_ATTRS, NAME_ATTRS },
          { "tensor: T" },
          { "output: T" },
          shape_unknown,
          false },
        { HVD_TF_GROUPED_ALLGATHER,
          create_grouped_allgather,
          { "T: list(" TYPES ") >= 1", NAME_ATTRS },
          { "tensors: T" },
          { "outputs: T" },
          shape_unknown,
          false },
        { HVD_TF_GROUPED_REDUCESCATTER,
          create_grouped_reducescatter,
          { "T: list(" TYPES ") >= 1", REDUCE_ATTRS, NAME_ATTRS },
          { "tensors: T" },
          { "outputs: T" },
          shape_unknown,
          false },
        { HVD_TF_SIZE, create_size, { "process_set: int = 0" }, { NULL }, { "size: int32" }, shape_scalar, false },
        { HVD_TF_RANK, create_rank, { "process_set: int = 0" }, { NULL }, { "rank: int32" }, shape_scalar, false },
        { HVD_TF_LOCAL_SIZE, create_local_size, { NULL }, { NULL }, { "local_size: int32" }, shape_scalar, false },
        { HVD_TF_LOCAL_RANK, create_local_rank, { NULL }, { NULL }, { "local_rank: int32" }, shape_scalar, false },
        { HVD_TF_PROCESS_SET_INCLUDED,
          create_process_set_included,
          { "process_set: int = 0" },
          { NULL },
          { "included: int32" },
          shape_scalar,
          false },
        { HVD_TF_JOIN, create_join, { NULL }, { NULL }, { "last_rank: int32" }, shape_scalar, true },
        { HVD_TF_BARRIER, create_barrier, { NULL }, { NULL }, { NULL }, NULL, true },
};

static void register_one(const op_spec_t *s, TF_Status *st) {
        const char *type = hvd_tf_op_types[s->kind];
        TF_OpDefinitionBuilder *b = TF_NewOpDefinitionBuilder(type);
        for (size_t i = 0; i < 8 && s->attrs[i]; i++)
                TF_OpDefinitionBuilderAddAttr(b, s->attrs[i]);
        for (size_t i = 0; i < 3 && s->inputs[i]; i++)
                TF_OpDefinitionBuilderAddInput(b, s->inputs[i]);
        for (size_t i = 0; i < 3 && s->outputs[i]; i++)
                TF_OpDefinitionBuilderAddOutput(b, s->outputs[i]);
        /* it sets the flag whatever the argument says: call it only to set it */
        if (s->stateful)
                TF_OpDefinitionBuilderSetIsStateful(b, true);
        if (s->shape)
                TF_OpDefinitionBuilderSetShapeInferenceFunction(b, s->shape);
        TF_RegisterOpDefinition(b, st);
        if (TF_GetCode(st) != TF_OK)
                return;
        TF_KernelBuilder *k;
        if (s->kind < HVD_TF_N_COLLECTIVES)
                k = TF_NewAsyncKernelBuilder(type, "CPU", s->create, hvd_tf_compute, hvd_tf_kernel_destroy);
        else if (s->kind == HVD_TF_JOIN || s->kind == HVD_TF_BARRIER)
                k = TF_NewAsyncKernelBuilder(type, "CPU", s->create, hvd_tf_compute_blocking, hvd_tf_kernel_destroy);
        else
                k = TF_NewKernelBuilder(type, "CPU", s->create, hvd_tf_compute_scalar, hvd_tf_kernel_destroy);
        TF_RegisterKernelBuilder(type, k, st);
}

/* Runs when tf.load_op_library opens the library; TensorFlow reports a
 * failed registration itself. */
__attribute__((constructor)) static void register_ops(void) {
        TF_Status *st = TF_NewStatus();
        for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
                TF_SetStatus(st, TF_OK, "");
                register_one(&specs[i], st);
        }
        TF_DeleteStatus(st);
}
