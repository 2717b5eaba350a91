/* done.cc — keeps an asynchronous kernel's done callback alive past its
 * compute function. TensorFlow passes TF_AsyncOpKernelDoneCallback as a
 * pointer to a std::function<void()> (AsyncOpKernel::DoneCallback) that
 * lives on the stack of its ComputeAsync: a kernel that completes later, on
 * another thread, must run a copy. No TensorFlow header is needed: the
 * struct is only ever that std::function (TF_RunAsyncOpKernelDoneCallback
 * calls it as one). */
#include <functional>

#include "tf_ops.h"

struct TF_AsyncOpKernelDoneCallback {
        std::function<void()> done;
};

extern "C" hvd_tf_done_t *hvd_tf_done_copy(TF_AsyncOpKernelDoneCallback *cb) {
        try {
                return reinterpret_cast<hvd_tf_done_t *>(new TF_AsyncOpKernelDoneCallback{ cb->done });
        } catch (...) {
                return nullptr;
        }
}

extern "C" void hvd_tf_done_run(hvd_tf_done_t **done) {
        auto *cb = reinterpret_cast<TF_AsyncOpKernelDoneCallback *>(*done);
        *done = nullptr;
        cb->done();
        delete cb;
}
