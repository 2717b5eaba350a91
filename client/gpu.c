/* gpu.c — libhvd's side of the GPU data plane: loading the module
 * (gpu_module.h), opening the job's communicator, handing it fused
 * operations and completing their entries when their events fire, and
 * freeing device outputs. Everything but hvd_free_output and the module's
 * loading runs on the background thread; device memory is never freed
 * under G.lock (the module's mem_free waits for the GPU to be idle). */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "settings.h"

void hvd_gpu_load(const hvd_settings_t *s) {
        char buf[PATH_MAX];
        const char *path = s->gpu_module;
        if (G.gpu.mod)
                return;
        if (!path) {
                snprintf(buf, sizeof buf, "%s/libhvd-nccl.so", PKGLIBDIR);
                path = buf;
        }
        if (access(path, R_OK) < 0) {
                snprintf(G.gpu.why, sizeof G.gpu.why, "this hvd has no GPU backend (%.400s is not installed)", path);
                return;
        }
        G.gpu.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!G.gpu.dl) {
                snprintf(G.gpu.why, sizeof G.gpu.why, "cannot load the GPU backend: %s", dlerror());
                return;
        }
        const hvd_gpu_module_t *m = dlsym(G.gpu.dl, HVD_GPU_MODULE_SYMBOL);
        if (!m || m->abi != HVD_GPU_MODULE_ABI || !m->mem_alloc || !m->mem_free) {
                if (!m)
                        snprintf(G.gpu.why, sizeof G.gpu.why, "%.400s is not a GPU backend of hvd (no %s)", path,
                                 HVD_GPU_MODULE_SYMBOL);
                else
                        snprintf(G.gpu.why, sizeof G.gpu.why,
                                 "%.300s is a GPU backend of another hvd version (module ABI %u, this libhvd needs "
                                 "%u): install the libhvd-nccl.so built with this libhvd",
                                 path, m->abi, (unsigned) HVD_GPU_MODULE_ABI);
                dlclose(G.gpu.dl);
                G.gpu.dl = NULL;
                return;
        }
        G.gpu.mod = m;
        char err[400] = "";
        G.gpu.devices = m->probe(err, sizeof err);
        if (G.gpu.devices <= 0)
                snprintf(G.gpu.why, sizeof G.gpu.why, "GPU backend %s: %s", m->name, err[0] ? err : "no device");
}

bool hvd_gpu_unique_id(uint8_t id[HVD_NCCL_ID_BYTES]) {
        char gerr[400] = "";
        if (G.gpu.mod->unique_id(id, gerr, sizeof gerr) >= 0)
                return true;
        snprintf(G.gpu.why, sizeof G.gpu.why, "GPU backend: %s", gerr);
        return false;
}

void hvd_gpu_open(const hvd_topology_t *topo, const uint8_t *id, int device, uint64_t fusion_bytes) {
        uint8_t own[HVD_NCCL_ID_BYTES];
        char gerr[400] = "";
        hvd_assert(G.gpu.devices > 0);
        G.gpu.device = device;
        if ((!id && G.gpu.mod->unique_id(own, gerr, sizeof gerr) < 0) ||
            G.gpu.mod->open(topo, id ? id : own, device, fusion_bytes, &G.gpu.g, gerr, sizeof gerr) < 0)
                snprintf(G.gpu.why, sizeof G.gpu.why, "GPU backend: %s", gerr);
}

/* The communicator and what is pending on it; the module stays loaded. */
void hvd_gpu_close(void) {
        hvd_gpu_fail_pending(HVD_ESHUTDOWN, "hvd has been shut down");
        if (G.gpu.g)
                G.gpu.mod->close(&G.gpu.g);
        if (G.gpu.mod)
                hvd_gpu_free_garbage();
        free(G.gpu.pending);
        G.gpu.pending = NULL;
        G.gpu.cap_pending = 0;
}

void hvd_gpu_free_garbage(void) {
        pthread_mutex_lock(&G.lock);
        hvd_devmem_t *d = G.dev_garbage;
        G.dev_garbage = NULL;
        pthread_mutex_unlock(&G.lock);
        while (d) {
                hvd_devmem_t *next = d->next;
                hvd_assert(G.gpu.mod); /* only the module's mem_alloc makes device outputs */
                G.gpu.mod->mem_free(d->device, d->p);
                free(d);
                d = next;
        }
}

void hvd_gpu_fail_pending(int code, const char *msg) {
        for (size_t i = 0; i < G.gpu.n_pending; i++) {
                pthread_mutex_lock(&G.lock);
                for (size_t k = 0; k < G.gpu.pending[i].n; k++)
                        if (G.gpu.pending[i].entries[k]) {
                                hvd_entry_complete(G.gpu.pending[i].entries[k], code, msg);
                                hvd_handle_unref(G.gpu.pending[i].entries[k]->h);
                        }
                pthread_mutex_unlock(&G.lock);
                free(G.gpu.pending[i].entries);
        }
        G.gpu.n_pending = 0;
}

bool hvd_gpu_poll(void) {
        char err[ERRLEN];
        size_t k = 0;
        for (size_t i = 0; i < G.gpu.n_pending; i++) {
                hvd_gpu_pending_t *p = &G.gpu.pending[i];
                int r = G.gpu.mod->poll(G.gpu.g, p->op, err, sizeof err);
                if (r == 0) {
                        G.gpu.pending[k++] = *p;
                        continue;
                }
                pthread_mutex_lock(&G.lock);
                for (size_t e = 0; e < p->n; e++)
                        if (p->entries[e]) {
                                hvd_entry_complete(p->entries[e], r < 0 ? r : 0, r < 0 ? err : NULL);
                                hvd_handle_unref(p->entries[e]->h);
                        }
                pthread_mutex_unlock(&G.lock);
                free(p->entries);
                if (r < 0) {
                        /* NCCL failed: the communicator is unusable for everyone */
                        G.gpu.n_pending = k;
                        hvd_job_abort(r, err);
                        return false;
                }
        }
        G.gpu.n_pending = k;
        return k > 0;
}

int hvd_gpu_enqueue(const hvd_xop_t *x, hvd_entry_t **em, char *err, size_t err_len) {
        if (!G.gpu.g) {
                snprintf(err, err_len, "%s: %s", x->name, G.gpu.why[0] ? G.gpu.why : "no GPU data plane");
                return HVD_ENODEVICE;
        }
        if (G.gpu.n_pending == G.gpu.cap_pending) {
                size_t cap = G.gpu.cap_pending ? G.gpu.cap_pending * 2 : 16;
                hvd_gpu_pending_t *np = realloc(G.gpu.pending, cap * sizeof *np);
                if (!np)
                        return -ENOMEM;
                G.gpu.pending = np;
                G.gpu.cap_pending = cap;
        }
        hvd_gpu_pending_t *p = &G.gpu.pending[G.gpu.n_pending];
        p->entries = calloc(x->n ? x->n : 1, sizeof *p->entries);
        if (!p->entries)
                return -ENOMEM;
        memcpy(p->entries, em, x->n * sizeof *em);
        p->n = x->n;
        int r = G.gpu.mod->enqueue(G.gpu.g, x, &p->op, err, err_len);
        if (r < 0) {
                free(p->entries);
                return r;
        }
        pthread_mutex_lock(&G.lock);
        for (size_t k = 0; k < p->n; k++)
                if (p->entries[k])
                        p->entries[k]->h->refs++;
        pthread_mutex_unlock(&G.lock);
        G.gpu.n_pending++;
        return 0;
}

int hvd_free_output(void *data, int device) {
        if (!data)
                return 0;
        if (device == HVD_DEVICE_CPU) {
                free(data);
                return 0;
        }
        if (device < 0)
                return hvd_error(-EINVAL, "hvd_free_output: invalid device %d", device);
        /* the module stays loaded after hvd_shutdown(): outputs may outlive the job */
        if (!G.gpu.mod)
                return hvd_error(HVD_ENODEVICE,
                                 "hvd_free_output: no GPU backend is loaded, so %p on device %d "
                                 "cannot be memory hvd allocated",
                                 data, device);
        G.gpu.mod->mem_free(device, data);
        return 0;
}
