/* check_settings.c — unit tests of a worker's settings (client/settings.c),
 * read from a table instead of the process environment: the defaults of
 * the configuration table, values parsed with their units, HVD_* before
 * HOROVOD_* (an empty HVD_ value is unset), a job of one rank ignoring
 * what only a job with a daemon reads, and the exact error, naming the
 * variable and its value, for each value that is not valid. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "settings.h"

#define MS  UINT64_C(1000)
#define SEC UINT64_C(1000000)

/* A fake environment: NAME=VALUE strings, NULL-terminated. */
static const char *lookup(const char *name, void *userdata) {
        const char *const *env = userdata;
        size_t n = strlen(name);
        for (; *env; env++)
                if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
                        return *env + n + 1;
        return NULL;
}

static hvd_settings_t s;
static char err[1024];

static int read_env(const char *const *env) {
        err[0] = 0;
        return hvd_settings_read(&s, lookup, (void *) env, err, sizeof err);
}

/* A job of 4 ranks on 2 hosts, rank 1 (local rank 1 of 2 on host 0),
 * plus the variables in extra. */
#define JOB_ENV(...)                                                                                                   \
        ((const char *const[]){ "HVD_JOB_ID=job-7", "HVD_RANK=1", "HVD_SIZE=4", "HVD_LOCAL_RANK=1",                    \
                                "HVD_LOCAL_SIZE=2", "HVD_CROSS_RANK=0", "HVD_CROSS_SIZE=2", __VA_ARGS__, NULL })

static void assert_error(const char *const *env, const char *msg) {
        ck_assert_int_eq(read_env(env), -EINVAL);
        ck_assert_str_eq(err, msg);
}

START_TEST(test_settings_defaults) {
        /* nothing set: a job of one rank with the table's defaults */
        const char *env[] = { NULL };
        ck_assert_int_eq(read_env(env), 0);
        ck_assert(s.solo);
        ck_assert_ptr_null(s.job_id);
        ck_assert_int_eq(s.rank, 0);
        ck_assert_int_eq(s.size, 1);
        ck_assert_int_eq(s.local_rank, 0);
        ck_assert_int_eq(s.local_size, 1);
        ck_assert_int_eq(s.cross_rank, 0);
        ck_assert_int_eq(s.cross_size, 1);
        ck_assert_uint_eq(s.cycle_time_usec, HVD_DEFAULT_CYCLE_TIME_USEC);
        ck_assert_uint_eq(s.start_timeout_usec, 30 * SEC);
        ck_assert_ptr_null(s.timeline_file);
        ck_assert(s.fast_path);
        ck_assert_uint_eq(s.shm_chunk_bytes, 0);
        ck_assert(!s.tcp_send_thread);
        ck_assert(!s.has_gpu_device);
        ck_assert_ptr_null(s.gpu_module);
        ck_assert(!s.has_fusion_threshold);
        ck_assert_uint_eq(s.fusion_threshold, HVD_DEFAULT_FUSION_THRESHOLD);
}
END_TEST

START_TEST(test_settings_job) {
        /* every variable of a job with a daemon, parsed */
        ck_assert_int_eq(
                read_env(JOB_ENV("HVD_JOB_SECRET=0aFF10", "HVD_CYCLE_TIME=5", "HVD_START_TIMEOUT=2min",
                                 "HVD_FUSION_THRESHOLD=16M", "HVD_HOSTS=node-a:2,node-b:2",
                                 "HVD_DATA_ADDR=gw.example:9000", "HVD_DATA_PORT=100-200",
                                 "HVD_STALL_CHECK_TIME_SECONDS=10", "HVD_STALL_SHUTDOWN_TIME_SECONDS=20",
                                 "HVD_RING_CHECKSUM=yes", "HVD_ROOT_PEER=tcp://node-a:7000", "HVD_HOSTNAME=node-a",
                                 "HVD_FAST_PATH=0", "HVD_SHM_CHUNK_BYTES=65536", "HVD_SHM_DIRECT_BYTES=4096",
                                 "HVD_GPU_DEVICE=3", "HVD_RUNTIME_DIR=/tmp/rt", "HVD_TCP_SEND_THREAD=1")),
                0);
        ck_assert(!s.solo);
        ck_assert_str_eq(s.job_id, "job-7");
        ck_assert_int_eq(s.rank, 1);
        ck_assert_int_eq(s.size, 4);
        ck_assert_int_eq(s.local_rank, 1);
        ck_assert_int_eq(s.local_size, 2);
        ck_assert_int_eq(s.cross_size, 2);
        ck_assert_uint_eq(s.secret_len, 3);
        ck_assert_uint_eq(s.secret[0], 0x0a);
        ck_assert_uint_eq(s.secret[1], 0xff);
        ck_assert_uint_eq(s.secret[2], 0x10);
        ck_assert_uint_eq(s.cycle_time_usec, 5 * MS);
        ck_assert_uint_eq(s.start_timeout_usec, 120 * SEC);
        ck_assert(s.has_fusion_threshold);
        ck_assert_uint_eq(s.fusion_threshold, UINT64_C(16) << 20);
        ck_assert_uint_eq(s.n_hosts, 2);
        ck_assert_str_eq(hvd_settings_host(&s, 0), "node-a");
        ck_assert_str_eq(hvd_settings_host(&s, 1), "node-b");
        ck_assert_str_eq(s.data_addr, "gw.example:9000");
        ck_assert_str_eq(s.data_addr_host, "gw.example");
        ck_assert_uint_eq(s.data_addr_port, 9000);
        ck_assert_uint_eq(s.data_port_lo, 100);
        ck_assert_uint_eq(s.data_port_hi, 200);
        ck_assert_uint_eq(s.stall_check_usec, 10 * SEC);
        ck_assert_uint_eq(s.stall_shutdown_usec, 20 * SEC);
        ck_assert(s.ring_checksum);
        ck_assert_str_eq(s.root_peer, "tcp://node-a:7000");
        ck_assert_str_eq(s.hostname, "node-a");
        ck_assert(!s.fast_path);
        ck_assert_uint_eq(s.shm_chunk_bytes, 65536);
        ck_assert_uint_eq(s.shm_direct_bytes, 4096);
        ck_assert(s.tcp_send_thread);
        ck_assert(s.has_gpu_device);
        ck_assert_int_eq(s.gpu_device, 3);
        char buf[256];
        ck_assert_str_eq(hvd_settings_coordinator(&s, buf, sizeof buf), "ipc:///tmp/rt/worker.sock");
}
END_TEST

START_TEST(test_settings_job_defaults) {
        /* a job with a daemon and nothing else set */
        ck_assert_int_eq(read_env(JOB_ENV("HVD_HOSTS=")), 0);
        ck_assert_uint_eq(s.secret_len, 0);
        ck_assert_uint_eq(s.stall_check_usec, 60 * SEC);
        ck_assert_uint_eq(s.stall_shutdown_usec, 0);
        ck_assert(!s.ring_checksum);
        ck_assert_uint_eq(s.n_hosts, 0);
        ck_assert_ptr_null(s.data_addr);
        ck_assert_uint_eq(s.data_port_lo, 0);
        ck_assert_uint_eq(s.data_port_hi, 0);
        ck_assert_ptr_null(s.root_peer);
        char buf[256];
        ck_assert_str_eq(hvd_settings_coordinator(&s, buf, sizeof buf),
                         "ipc://" HVD_DEFAULT_RUNTIME_DIR "/worker.sock");
        /* HVD_COORDINATOR is the endpoint itself */
        ck_assert_int_eq(read_env(JOB_ENV("HVD_COORDINATOR=tcp://127.0.0.1:5555")), 0);
        ck_assert_str_eq(hvd_settings_coordinator(&s, buf, sizeof buf), "tcp://127.0.0.1:5555");
        /* the stall inspector off: both times 0, whatever they say */
        ck_assert_int_eq(read_env(JOB_ENV("HOROVOD_STALL_CHECK_DISABLE=1", "HVD_STALL_SHUTDOWN_TIME_SECONDS=5")), 0);
        ck_assert_uint_eq(s.stall_check_usec, 0);
        ck_assert_uint_eq(s.stall_shutdown_usec, 0);
}
END_TEST

START_TEST(test_settings_horovod_names) {
        /* HVD_ wins; HOROVOD_ counts when HVD_ is unset or empty; names
         * Horovod does not have are not read under HOROVOD_ */
        const char *both[] = { "HVD_CYCLE_TIME=2", "HOROVOD_CYCLE_TIME=9", NULL };
        ck_assert_int_eq(read_env(both), 0);
        ck_assert_uint_eq(s.cycle_time_usec, 2 * MS);
        const char *horovod[] = { "HVD_CYCLE_TIME=", "HOROVOD_CYCLE_TIME=9", "HOROVOD_FUSION_THRESHOLD=1K", NULL };
        ck_assert_int_eq(read_env(horovod), 0);
        ck_assert_uint_eq(s.cycle_time_usec, 9 * MS);
        ck_assert_uint_eq(s.fusion_threshold, 1024);
        ck_assert_int_eq(read_env(JOB_ENV("HOROVOD_START_TIMEOUT=4", "HOROVOD_STALL_CHECK_TIME_SECONDS=3",
                                          "HOROVOD_RING_CHECKSUM=maybe", "HOROVOD_FAST_PATH=0")),
                         0);
        ck_assert_uint_eq(s.start_timeout_usec, 4 * SEC);
        ck_assert_uint_eq(s.stall_check_usec, 3 * SEC);
        ck_assert(!s.ring_checksum);
        ck_assert(s.fast_path);
        /* horovodrun's topology */
        const char *topo[] = { "HVD_JOB_ID=j", "HOROVOD_RANK=2", "HOROVOD_SIZE=3", NULL };
        ck_assert_int_eq(read_env(topo), 0);
        ck_assert_int_eq(s.rank, 2);
        ck_assert_int_eq(s.size, 3);
        ck_assert_int_eq(s.local_rank, 2); /* defaults: the rank and size */
        ck_assert_int_eq(s.local_size, 3);
}
END_TEST

START_TEST(test_settings_solo) {
        /* without HVD_JOB_ID the topology is rank 0 of 1, and what only a
         * job with a daemon reads is not looked at; a bad fusion threshold
         * gives the default (it sizes the GPU buffer alone) */
        const char *env[] = { "HVD_RANK=3",
                              "HVD_SIZE=8",
                              "HVD_RING_CHECKSUM=maybe",
                              "HVD_JOB_SECRET=xyz",
                              "HVD_DATA_PORT=oops",
                              "HVD_FUSION_THRESHOLD=lots",
                              "HVD_GPU_MODULE=",
                              NULL };
        ck_assert_int_eq(read_env(env), 0);
        ck_assert(s.solo);
        ck_assert_int_eq(s.rank, 0);
        ck_assert_int_eq(s.size, 1);
        ck_assert(s.has_fusion_threshold);
        ck_assert_uint_eq(s.fusion_threshold, HVD_DEFAULT_FUSION_THRESHOLD);
        /* the module's path counts also when empty */
        ck_assert_str_eq(s.gpu_module, "");
        const char *nccl[] = { "HVD_NCCL_MODULE=/opt/m.so", NULL };
        ck_assert_int_eq(read_env(nccl), 0);
        ck_assert_str_eq(s.gpu_module, "/opt/m.so");
        /* the cross-host pair is checked even then */
        const char *cross[] = { "HVD_CROSS_RANK=1", NULL };
        assert_error(cross, "HVD_CROSS_RANK/HVD_CROSS_SIZE are inconsistent");
}
END_TEST

START_TEST(test_settings_timeline) {
        /* rank 0 records; the other ranks read neither variable */
        const char *r0[] = { "HOROVOD_TIMELINE=/tmp/tl.json", "HVD_TIMELINE_MARK_CYCLES=on", NULL };
        ck_assert_int_eq(read_env(r0), 0);
        ck_assert_str_eq(s.timeline_file, "/tmp/tl.json");
        ck_assert(s.timeline_mark_cycles);
        ck_assert_int_eq(read_env(JOB_ENV("HVD_TIMELINE=/tmp/tl.json", "HVD_TIMELINE_MARK_CYCLES=maybe")), 0);
        ck_assert_ptr_null(s.timeline_file);
        const char *bad[] = { "HVD_TIMELINE=/tmp/tl.json", "HVD_TIMELINE_MARK_CYCLES=maybe", NULL };
        assert_error(bad, "HVD_TIMELINE_MARK_CYCLES='maybe' is not a boolean");
}
END_TEST

START_TEST(test_settings_small_values) {
        /* HVD_SHM_CHUNK_BYTES below 4096 or not a number: the data plane's
         * choice; HVD_FAST_PATH not a boolean: on */
        const char *small[] = { "HVD_SHM_CHUNK_BYTES=4095", "HVD_FAST_PATH=perhaps", NULL };
        ck_assert_int_eq(read_env(small), 0);
        ck_assert_uint_eq(s.shm_chunk_bytes, 0);
        ck_assert(s.fast_path);
        const char *junk[] = { "HVD_SHM_CHUNK_BYTES=64k", "HVD_SHM_DIRECT_BYTES=1M", NULL };
        ck_assert_int_eq(read_env(junk), 0);
        ck_assert_uint_eq(s.shm_chunk_bytes, 0);
        ck_assert_uint_eq(s.shm_direct_bytes, 0);
        const char *zero[] = { "HVD_SHM_DIRECT_BYTES=0", NULL };
        ck_assert_int_eq(read_env(zero), 0);
        ck_assert_uint_eq(s.shm_direct_bytes, 0);
        /* HVD_SHM_ZERO_COPY_BYTES: unset is the data plane's choice, 0 off */
        ck_assert_uint_eq(s.shm_zero_copy_bytes, 0);
        const char *zc[] = { "HVD_SHM_ZERO_COPY_BYTES=4096", NULL };
        ck_assert_int_eq(read_env(zc), 0);
        ck_assert_uint_eq(s.shm_zero_copy_bytes, 4096);
        const char *zc_off[] = { "HVD_SHM_ZERO_COPY_BYTES=0", NULL };
        ck_assert_int_eq(read_env(zc_off), 0);
        ck_assert_uint_eq(s.shm_zero_copy_bytes, UINT64_MAX);
        const char *zc_junk[] = { "HVD_SHM_ZERO_COPY_BYTES=1M", NULL };
        ck_assert_int_eq(read_env(zc_junk), 0);
        ck_assert_uint_eq(s.shm_zero_copy_bytes, 0);
        /* HVD_SHM_SLOT_STREAM: unset, auto or not a boolean measured (0),
         * on 1, off 2 */
        ck_assert_int_eq(s.shm_slot_stream, 0);
        const char *ss_on[] = { "HVD_SHM_SLOT_STREAM=on", NULL };
        ck_assert_int_eq(read_env(ss_on), 0);
        ck_assert_int_eq(s.shm_slot_stream, 1);
        const char *ss_off[] = { "HVD_SHM_SLOT_STREAM=0", NULL };
        ck_assert_int_eq(read_env(ss_off), 0);
        ck_assert_int_eq(s.shm_slot_stream, 2);
        const char *ss_auto[] = { "HVD_SHM_SLOT_STREAM=auto", NULL };
        ck_assert_int_eq(read_env(ss_auto), 0);
        ck_assert_int_eq(s.shm_slot_stream, 0);
        const char *ss_junk[] = { "HVD_SHM_SLOT_STREAM=sometimes", NULL };
        ck_assert_int_eq(read_env(ss_junk), 0);
        ck_assert_int_eq(s.shm_slot_stream, 0);
        /* a single port; one host needs no HVD_HOSTS and reads no ports */
        ck_assert_int_eq(read_env(JOB_ENV("HVD_DATA_PORT=7000")), 0);
        ck_assert_uint_eq(s.data_port_lo, 7000);
        ck_assert_uint_eq(s.data_port_hi, 7000);
        const char *one_host[] = { "HVD_JOB_ID=j", "HVD_SIZE=2", "HVD_DATA_PORT=oops", "HVD_HOSTS=a,b,c", NULL };
        ck_assert_int_eq(read_env(one_host), 0);
        ck_assert_uint_eq(s.n_hosts, 0);
}
END_TEST

START_TEST(test_settings_errors) {
        const char *ct[] = { "HVD_CYCLE_TIME=fast", NULL };
        assert_error(ct, "HVD_CYCLE_TIME/HOROVOD_CYCLE_TIME='fast' is not a duration in ms");
        const char *st[] = { "HOROVOD_START_TIMEOUT=-3", NULL };
        assert_error(st, "HVD_START_TIMEOUT='-3' is not a duration in seconds");
        const char *rank[] = { "HVD_JOB_ID=j", "HVD_RANK=4", "HVD_SIZE=4", NULL };
        assert_error(rank, "HVD_RANK/HVD_SIZE/HVD_LOCAL_RANK/HVD_LOCAL_SIZE are inconsistent");
        const char *neg[] = { "HVD_JOB_ID=j", "HVD_LOCAL_RANK=x", NULL };
        assert_error(neg, "HVD_RANK/HVD_SIZE/HVD_LOCAL_RANK/HVD_LOCAL_SIZE are inconsistent");
        const char *cross[] = { "HVD_JOB_ID=j", "HVD_CROSS_RANK=2", "HVD_CROSS_SIZE=2", NULL };
        assert_error(cross, "HVD_CROSS_RANK/HVD_CROSS_SIZE are inconsistent");
        assert_error(JOB_ENV("HVD_JOB_SECRET=abc"), "HVD_JOB_SECRET is not a hex string of at most 256 bytes");
        assert_error(JOB_ENV("HVD_JOB_SECRET=zz"), "HVD_JOB_SECRET is not a hex string of at most 256 bytes");
        char long_id[HVD_WIRE_MAX_JOB_ID + 16] = "HVD_JOB_ID=";
        memset(long_id + strlen(long_id), 'j', HVD_WIRE_MAX_JOB_ID + 1);
        const char *id[] = { long_id, NULL };
        assert_error(id, "HVD_JOB_ID is longer than 128 bytes");
        assert_error(JOB_ENV("HVD_DATA_ADDR=gw:0"), "HVD_DATA_ADDR='gw:0' is not HOST or HOST:PORT (PORT 1-65535)");
        assert_error(JOB_ENV("HVD_DATA_ADDR=:80"), "HVD_DATA_ADDR=':80' is not HOST or HOST:PORT (PORT 1-65535)");
        assert_error(JOB_ENV("HVD_DATA_PORT=12-"),
                     "HVD_DATA_PORT='12-' is not a port or a range LO-HI of ports 1-65535");
        assert_error(JOB_ENV("HVD_DATA_PORT=200-100"),
                     "HVD_DATA_PORT='200-100' is not a port or a range LO-HI of ports 1-65535");
        assert_error(JOB_ENV("HVD_FUSION_THRESHOLD=lots"),
                     "HVD_FUSION_THRESHOLD/HOROVOD_FUSION_THRESHOLD='lots' is not a size in bytes");
        assert_error(JOB_ENV("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=soon"),
                     "HVD_STALL_CHECK_TIME_SECONDS/HVD_STALL_SHUTDOWN_TIME_SECONDS must be seconds");
        assert_error(JOB_ENV("HVD_RING_CHECKSUM=maybe"), "HVD_RING_CHECKSUM='maybe' is not a boolean");
        assert_error(JOB_ENV("HVD_HOSTS=a,b,c"), "HVD_HOSTS lists 3 hosts, HVD_CROSS_SIZE is 2");
        /* the first bad value, in the order of the table's checks */
        assert_error(JOB_ENV("HVD_RING_CHECKSUM=maybe", "HVD_DATA_PORT=0", "HVD_JOB_SECRET=1"),
                     "HVD_JOB_SECRET is not a hex string of at most 256 bytes");
        assert_error(JOB_ENV("HVD_FUSION_THRESHOLD=lots", "HVD_DATA_PORT=0"),
                     "HVD_DATA_PORT='0' is not a port or a range LO-HI of ports 1-65535");
}
END_TEST

START_TEST(test_settings_process_environment) {
        /* a NULL lookup reads the process environment */
        setenv("HVD_CYCLE_TIME", "3ms", 1);
        setenv("HOROVOD_FUSION_THRESHOLD", "2M", 1);
        unsetenv("HVD_FUSION_THRESHOLD");
        unsetenv("HVD_JOB_ID");
        ck_assert_int_eq(hvd_settings_read(&s, NULL, NULL, err, sizeof err), 0);
        ck_assert_uint_eq(s.cycle_time_usec, 3 * MS);
        ck_assert_uint_eq(s.fusion_threshold, UINT64_C(2) << 20);
        unsetenv("HVD_CYCLE_TIME");
        unsetenv("HOROVOD_FUSION_THRESHOLD");
}
END_TEST

START_TEST(test_settings_launchers) {
        /* Open MPI, one node: the job id is mpirun's */
        const char *ompi[] = { "OMPI_COMM_WORLD_RANK=1",       "OMPI_COMM_WORLD_SIZE=2",
                               "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                               "OMPI_MCA_ess_base_jobid=4242", "PMIX_RANK=1",
                               "OMPI_MCA_orte_num_nodes=1",    NULL };
        ck_assert_int_eq(read_env(ompi), 0);
        ck_assert_str_eq(s.rank_source, "Open MPI");
        ck_assert(!s.solo && s.from_launcher);
        ck_assert_str_eq(s.job_id, "ompi-4242");
        ck_assert_int_eq(s.rank, 1);
        ck_assert_int_eq(s.size, 2);
        ck_assert_int_eq(s.local_rank, 1);
        ck_assert_int_eq(s.cross_size, 1);
        ck_assert_uint_eq(s.root_port, 7100);
        /* HVD_* wins over a launcher: hvdrun under mpirun */
        const char *hvdrun[] = { "HVD_JOB_ID=job-1", "HVD_RANK=0", "HVD_SIZE=1", "OMPI_COMM_WORLD_RANK=3", NULL };
        ck_assert_int_eq(read_env(hvdrun), 0);
        ck_assert_str_eq(s.rank_source, "hvdrun");
        ck_assert(!s.from_launcher);
        /* mpirun -np 1: a job of one rank */
        const char *one[] = { "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1", "OMPI_COMM_WORLD_LOCAL_RANK=0",
                              "OMPI_COMM_WORLD_LOCAL_SIZE=1", NULL };
        ck_assert_int_eq(read_env(one), 0);
        ck_assert(s.solo);
        ck_assert_str_eq(s.rank_source, "Open MPI");
        /* torchrun on 2 nodes of 2: node from GROUP_RANK, root MASTER_ADDR */
        const char *torch[] = { "RANK=3",
                                "WORLD_SIZE=4",
                                "LOCAL_RANK=1",
                                "LOCAL_WORLD_SIZE=2",
                                "GROUP_RANK=1",
                                "MASTER_ADDR=n1",
                                "MASTER_PORT=29500",
                                "TORCHELASTIC_RUN_ID=r7",
                                NULL };
        ck_assert_int_eq(read_env(torch), 0);
        ck_assert_str_eq(s.rank_source, "torchrun");
        ck_assert_str_eq(s.job_id, "torchrun-r7@n1:29500");
        ck_assert_str_eq(s.root_host, "n1");
        ck_assert_int_eq(s.cross_rank, 1);
        ck_assert_int_eq(s.cross_size, 2);
        /* srun -n 7 on node[01-03] with 2(x3),1 tasks: rank 5 is local 1 on node 2 */
        const char *slurm[] = { "SLURM_PROCID=5",
                                "SLURM_STEP_NUM_TASKS=7",
                                "SLURM_NTASKS=99",
                                "SLURM_LOCALID=1",
                                "SLURM_NODEID=2",
                                "SLURM_STEP_NODELIST=node[01-03],x9",
                                "SLURM_STEP_TASKS_PER_NODE=2(x3),1",
                                "SLURM_JOB_ID=77",
                                "SLURM_STEP_ID=3",
                                "HVD_ROOT_PORT=7200",
                                NULL };
        ck_assert_int_eq(read_env(slurm), 0);
        ck_assert_str_eq(s.rank_source, "Slurm");
        ck_assert_str_eq(s.job_id, "slurm-77.3");
        ck_assert_int_eq(s.size, 7);
        ck_assert_int_eq(s.local_size, 2);
        ck_assert_int_eq(s.cross_rank, 2);
        ck_assert_int_eq(s.cross_size, 4);
        ck_assert_str_eq(s.root_host, "node01");
        ck_assert_uint_eq(s.n_hosts, 4);
        ck_assert_str_eq(hvd_settings_host(&s, 2), "node03");
        ck_assert_str_eq(hvd_settings_host(&s, 3), "x9");
        ck_assert_uint_eq(s.root_port, 7200);
        /* a batch script (no step) is one process */
        const char *batch[] = { "SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_ID=77", NULL };
        ck_assert_int_eq(read_env(batch), 0);
        ck_assert(s.solo);
        ck_assert_str_eq(s.rank_source, "none");
        /* mpirun inside an allocation: Slurm's step is mpirun's daemons */
        const char *nested[] = { "OMPI_COMM_WORLD_RANK=2",
                                 "OMPI_COMM_WORLD_SIZE=4",
                                 "OMPI_COMM_WORLD_LOCAL_RANK=0",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                                 "OMPI_MCA_orte_num_nodes=2",
                                 "OMPI_MCA_ess_base_jobid=9",
                                 "SLURM_PROCID=1",
                                 "SLURM_STEP_ID=0",
                                 "SLURM_NTASKS=2",
                                 NULL };
        ck_assert_int_eq(read_env(nested), 0);
        ck_assert_str_eq(s.rank_source, "Open MPI");
        ck_assert_int_eq(s.cross_rank, 1);
}
END_TEST

START_TEST(test_settings_launcher_errors) {
        const char *half[] = { "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", NULL };
        assert_error(half, "Open MPI: OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_LOCAL_RANK is not; set all of "
                           "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, "
                           "OMPI_COMM_WORLD_LOCAL_SIZE");
        const char *big[] = { "RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", NULL };
        assert_error(big, "torchrun: RANK=2 is not below WORLD_SIZE=2");
        const char *local[] = { "PMI_RANK=1", "PMI_SIZE=4", "MPI_LOCALRANKID=3", "MPI_LOCALNRANKS=2", NULL };
        assert_error(local, "MPICH: MPI_LOCALRANKID=3 and MPI_LOCALNRANKS=2 do not fit PMI_RANK=1 of PMI_SIZE=4");
        const char *uneven[] = { "RANK=1", "WORLD_SIZE=3", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", NULL };
        assert_error(uneven, "torchrun: WORLD_SIZE=3 ranks with LOCAL_WORLD_SIZE=2 here do not make the same number "
                             "of ranks on every node, numbered node by node (RANK=1, LOCAL_RANK=1); hvd needs that "
                             "placement (mpirun --map-by slot)");
        const char *group[] = { "RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1", NULL };
        assert_error(group, "torchrun: GROUP_RANK=1, but RANK=1 with LOCAL_RANK=1 of LOCAL_WORLD_SIZE=2 is on node 0");
        const char *two[] = { "OMPI_COMM_WORLD_RANK=0",
                              "OMPI_COMM_WORLD_SIZE=2",
                              "OMPI_COMM_WORLD_LOCAL_RANK=0",
                              "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                              "OMPI_MCA_ess_base_jobid=1",
                              "RANK=1",
                              "WORLD_SIZE=2",
                              "LOCAL_RANK=1",
                              "LOCAL_WORLD_SIZE=2",
                              NULL };
        assert_error(two, "two launchers disagree: Open MPI says rank 0 of 2 (OMPI_COMM_WORLD_RANK, "
                          "OMPI_COMM_WORLD_SIZE), torchrun says rank 1 of 2 (RANK, WORLD_SIZE); unset one, or set "
                          "HVD_RANK and HVD_SIZE");
        const char *pmix[] = { "PMIX_RANK=0", NULL };
        assert_error(pmix, "PMIx: PMIX_RANK is set, but no launcher variable gives the job's size "
                           "(OMPI_COMM_WORLD_SIZE, SLURM_NTASKS); set HVD_RANK and HVD_SIZE");
        const char *pmix2[] = { "OMPI_COMM_WORLD_RANK=0",
                                "OMPI_COMM_WORLD_SIZE=2",
                                "OMPI_COMM_WORLD_LOCAL_RANK=0",
                                "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                                "PMIX_RANK=1",
                                NULL };
        assert_error(pmix2, "two launchers disagree: Open MPI says rank 0, PMIX_RANK=1");
        const char *noid[] = { "PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2", NULL };
        assert_error(noid, "MPICH started this rank but gives no job id: set HVD_JOB_ID to one value for all ranks");
        /* HVD_JOB_ID names the job of a launcher that gives no id */
        const char *named[] = { "PMI_RANK=1",        "PMI_SIZE=2",      "MPI_LOCALRANKID=1",
                                "MPI_LOCALNRANKS=2", "HVD_JOB_ID=mine", NULL };
        ck_assert_int_eq(read_env(named), 0);
        ck_assert_str_eq(s.rank_source, "MPICH");
        ck_assert_str_eq(s.job_id, "mine");
        ck_assert_int_eq(s.rank, 1);
        const char *nan[] = { "RANK=x", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", NULL };
        assert_error(nan, "torchrun: RANK='x' is not a number 0..2147483647");
        const char *slurm_fit[] = { "SLURM_PROCID=0",
                                    "SLURM_NTASKS=4",
                                    "SLURM_STEP_ID=0",
                                    "SLURM_LOCALID=0",
                                    "SLURM_NODEID=0",
                                    "SLURM_STEP_NODELIST=n[1-2]",
                                    "SLURM_STEP_TASKS_PER_NODE=2(x3)",
                                    NULL };
        assert_error(slurm_fit, "Slurm: SLURM_STEP_TASKS_PER_NODE='2(x3)' (3 nodes, 6 tasks) does not fit "
                                "SLURM_STEP_NODELIST='n[1-2]' (2 nodes), SLURM_NODEID=0 and 4 tasks");
        const char *slurm_list[] = { "SLURM_PROCID=0",
                                     "SLURM_NTASKS=4",
                                     "SLURM_STEP_ID=0",
                                     "SLURM_LOCALID=0",
                                     "SLURM_NODEID=0",
                                     "SLURM_STEP_NODELIST=n[1-2",
                                     "SLURM_STEP_TASKS_PER_NODE=2(x2)",
                                     NULL };
        assert_error(slurm_list, "Slurm: SLURM_STEP_NODELIST='n[1-2': a '[' without its ']'");
        const char *slurm_half[] = { "SLURM_PROCID=0", "SLURM_STEP_ID=0", NULL };
        assert_error(slurm_half, "Slurm: SLURM_NTASKS='' is not a number 0..2147483647");
        const char *slurm_local[] = { "SLURM_PROCID=1",
                                      "SLURM_NTASKS=2",
                                      "SLURM_STEP_ID=0",
                                      "SLURM_LOCALID=1",
                                      "SLURM_NODEID=0",
                                      "SLURM_STEP_NODELIST=n1",
                                      "SLURM_STEP_TASKS_PER_NODE=1",
                                      NULL };
        assert_error(slurm_local, "Slurm: SLURM_STEP_TASKS_PER_NODE='1' (1 nodes, 1 tasks) does not fit "
                                  "SLURM_STEP_NODELIST='n1' (1 nodes), SLURM_NODEID=0 and 2 tasks");
        const char *port[] = { "RANK=0",        "WORLD_SIZE=2",  "LOCAL_RANK=0",        "LOCAL_WORLD_SIZE=2",
                               "MASTER_ADDR=a", "MASTER_PORT=1", "HVD_ROOT_PORT=70000", NULL };
        assert_error(port, "HVD_ROOT_PORT='70000' is not a port 1-65535");
}
END_TEST

static Suite *settings_suite(void) {
        Suite *su = suite_create("settings");
        TCase *tc = tcase_create("read");
        tcase_add_test(tc, test_settings_defaults);
        tcase_add_test(tc, test_settings_job);
        tcase_add_test(tc, test_settings_job_defaults);
        tcase_add_test(tc, test_settings_horovod_names);
        tcase_add_test(tc, test_settings_solo);
        tcase_add_test(tc, test_settings_launchers);
        tcase_add_test(tc, test_settings_launcher_errors);
        tcase_add_test(tc, test_settings_timeline);
        tcase_add_test(tc, test_settings_small_values);
        tcase_add_test(tc, test_settings_errors);
        tcase_add_test(tc, test_settings_process_environment);
        suite_add_tcase(su, tc);
        return su;
}

int main(void) {
        SRunner *sr = srunner_create(settings_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
