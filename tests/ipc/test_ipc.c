/* Sharing memory between processes: this binary runs the tests, and again (argv[1] "importer")
 * as the other process, which it starts with fork and exec (a forked child may not use the CUDA
 * of its parent) and drives over a Unix-domain socket. Over the fake driver (the "model" run) the
 * memory is bookkeeping only, so the bytes are checked on a GPU alone. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static bool model; /* over the fake driver: no bytes to check */
static gpumem_allocator_t* vm_upstream;

/* ---- The importer ----------------------------------------------------------------------------- */

enum op { OP_OPEN, OP_CHECK, OP_WRITE, OP_CLOSE, OP_INFO, OP_CRASH, OP_EXIT };
struct request {
  int32_t op, index;
  uint8_t byte;
};
struct reply {
  int32_t status, index;
  uint64_t value, segments, segment_opens;
  char detail[256];
};

enum { MAX_OPENS = 4096 };

/* Whether the memory holds byte all through. */
static gpumem_status_t check_bytes(void* p, size_t size, uint8_t byte, uint64_t* bad) {
  uint8_t* host = malloc(size);
  gpumem_status_t s = host ? gpumem_copy(host, p, size) : GPUMEM_ERROR_OUT_OF_MEMORY;
  *bad = 0;
  for (size_t i = 0; s == GPUMEM_SUCCESS && i < size; ++i) *bad += host[i] != byte;
  free(host);
  return s;
}

static int importer(int sock) {
  static void* opened[MAX_OPENS];
  static size_t sizes[MAX_OPENS];
  int count = 0;
  for (;;) {
    struct request q;
    const ssize_t got = read(sock, &q, sizeof q);
    if (got != (ssize_t)sizeof q) {
      if (got != 0) fprintf(stderr, "importer: a request of %zd bytes (%s)\n", got, strerror(errno));
      return got != 0;
    }
    struct reply r = {0};
    switch (q.op) {
      case OP_OPEN:
        r.status = gpumem_ipc_receive(sock, &opened[count], &sizes[count]);
        r.index = count;
        r.value = sizes[count];
        if (r.status == GPUMEM_SUCCESS) ++count;
        break;
      case OP_CHECK:
        if (!model) r.status = check_bytes(opened[q.index], sizes[q.index], q.byte, &r.value);
        break;
      case OP_WRITE:
        if (!model) r.status = gpumem_memset(opened[q.index], q.byte, 1, sizes[q.index]);
        break;
      case OP_CLOSE:
        r.status = gpumem_ipc_close(opened[q.index]);
        break;
      case OP_INFO: {
        gpumem_ipc_info_t info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        r.status = gpumem_ipc_get_info(&info);
        r.value = info.imports;
        r.segments = info.open_segments;
        r.segment_opens = info.segment_opens;
        break;
      }
      case OP_CRASH:
        kill(getpid(), SIGKILL);
        break;
      default:
        return 0;
    }
    if (r.status != GPUMEM_SUCCESS) snprintf(r.detail, sizeof r.detail, "%s", gpumem_last_error_detail());
    if (write(sock, &r, sizeof r) != (ssize_t)sizeof r) {
      fprintf(stderr, "importer: answering: %s\n", strerror(errno));
      return 1;
    }
  }
}

/* ---- The exporter's end ----------------------------------------------------------------------- */

struct child {
  pid_t pid;
  int sock;
};

/* sees_one: the importer sees only the first device (CUDA_VISIBLE_DEVICES, or the fake's count). */
static struct child start_importer_seeing(bool sees_one) {
  int fds[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (sees_one) {
      setenv("CUDA_VISIBLE_DEVICES", "0", 1);
      setenv("FAKE_CUDA_DEVICE_COUNT", "1", 1);
    }
    char fd[16];
    snprintf(fd, sizeof fd, "%d", dup(fds[1])); /* dup drops close-on-exec */
    execl("/proc/self/exe", "test_ipc", "importer", fd, (char*)NULL);
    _exit(127);
  }
  close(fds[1]);
  return (struct child){pid, fds[0]};
}
static struct child start_importer(void) { return start_importer_seeing(false); }

static struct reply ask(struct child c, int op, int index, uint8_t byte) {
  struct request q = {op, index, byte};
  assert_int_equal(write(c.sock, &q, sizeof q), sizeof q);
  struct reply r;
  assert_int_equal(read(c.sock, &r, sizeof r), sizeof r);
  return r;
}

/* Sends ptr's handle to the importer, which opens it; returns its index there. */
/* Sends ptr's handle to the importer, which opens it; returns its answer. */
static struct reply offer(struct child c, gpumem_allocator_t* a, void* ptr) {
  gpumem_ipc_handle_t h;
  size_t fds = 0;
  assert_ok(gpumem_ipc_export(a, ptr, &h, &fds));
  assert_true(fds >= 1);
  struct request q = {OP_OPEN, 0, 0};
  assert_int_equal(write(c.sock, &q, sizeof q), sizeof q);
  assert_ok(gpumem_ipc_send(c.sock, &h));
  struct reply r;
  if (read(c.sock, &r, sizeof r) != (ssize_t)sizeof r) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    print_error("the importer ended (wait status %#x) instead of answering\n", status);
    fail();
  }
  return r;
}

/* offer(), which must succeed; returns the index of the open there. */
static int send_to(struct child c, gpumem_allocator_t* a, void* ptr, size_t size) {
  const struct reply r = offer(c, a, ptr);
  if (r.status != GPUMEM_SUCCESS) print_error("importer: %s\n", r.detail);
  assert_int_equal(r.status, GPUMEM_SUCCESS);
  assert_int_equal(r.value, size);
  return r.index;
}

static void expect_ok(struct reply r) {
  if (r.status != GPUMEM_SUCCESS) print_error("importer: %s\n", r.detail);
  assert_int_equal(r.status, GPUMEM_SUCCESS);
}

static void stop_importer(struct child c) {
  struct request q = {OP_EXIT, 0, 0};
  assert_int_equal(write(c.sock, &q, sizeof q), sizeof q);
  int status = 0;
  assert_int_equal(waitpid(c.pid, &status, 0), c.pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(c.sock);
}

static gpumem_ipc_info_t info_here(void) {
  gpumem_ipc_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_ipc_get_info(&info));
  return info;
}

/* The allocators under test: a pool over the device allocator (classic segments), a pool over the
 * VM allocator, the VM allocator itself and the device pool (NULL). */
enum kind { CLASSIC_POOL, VM_POOL, VM_DIRECT, DEVICE_POOL };
static gpumem_allocator_t* classic_upstream;
static gpumem_allocator_t* make(enum kind k) {
  if (k == DEVICE_POOL) return NULL;
  if (k == VM_DIRECT) return vm_upstream;
  gpumem_pool_params_t p = GPUMEM_POOL_PARAMS_INIT;
  p.upstream = vm_upstream;
  if (k == CLASSIC_POOL) {
    if (model) {
      print_message("the fake driver has no cuMemAlloc memory\n");
      skip();
    }
    assert_ok(gpumem_allocator_create_device(0, &classic_upstream));
    p.upstream = classic_upstream;
  }
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_pool_create(&p, &a));
  return a;
}
static void unmake(enum kind k, gpumem_allocator_t* a) {
  if (k != CLASSIC_POOL && k != VM_POOL) return;
  assert_ok(gpumem_allocator_destroy(a));
  if (k == CLASSIC_POOL) assert_ok(gpumem_allocator_destroy(classic_upstream));
}

/* Bytes written by one process are read by the other, both ways, for an allocation of each kind
 * and a sub-allocation beside another. */
static void both_ways(enum kind k) {
  require_gpu();
  gpumem_allocator_t* a = make(k);
  const size_t size = (3u << 20) + 4096; /* across units of 2 MiB */
  void *first = NULL, *p = NULL;
  assert_ok(gpumem_alloc(a, 4096, NULL, &first));
  assert_ok(gpumem_alloc(a, size, NULL, &p));
  if (!model) assert_ok(gpumem_memset(p, 0x5a, 1, size));
  struct child c = start_importer();
  const int i = send_to(c, a, p, size);
  struct reply r = ask(c, OP_CHECK, i, 0x5a);
  expect_ok(r);
  assert_int_equal(r.value, 0); /* no byte differs */
  expect_ok(ask(c, OP_WRITE, i, 0xc3));
  uint64_t bad = 0;
  if (!model) {
    assert_ok(check_bytes(p, size, 0xc3, &bad));
    assert_int_equal(bad, 0);
  }
  expect_ok(ask(c, OP_CLOSE, i, 0));
  assert_int_equal(ask(c, OP_INFO, 0, 0).segments, 0);
  stop_importer(c);
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_free(a, first, NULL));
  assert_int_equal(info_here().exported, 0);
  unmake(k, a);
}
static void test_ipc_classic_pool_both_ways(void** state) { (void)state, both_ways(CLASSIC_POOL); }
static void test_ipc_vm_pool_both_ways(void** state) { (void)state, both_ways(VM_POOL); }
static void test_ipc_vm_direct_both_ways(void** state) { (void)state, both_ways(VM_DIRECT); }
static void test_ipc_device_pool_both_ways(void** state) { (void)state, both_ways(DEVICE_POOL); }

/* Thousands of small allocations of one pool: the importer maps what holds them once. */
static void many_small(enum kind k) {
  require_gpu();
  gpumem_allocator_t* a = make(k);
  enum { N = 2000 };
  static void* p[N];
  /* A classic pool cuts small allocations out of a block it caches, else takes each from the
   * upstream at its size: one block of them all, freed first. */
  void* block = NULL;
  assert_ok(gpumem_alloc(a, N * 512, NULL, &block));
  assert_ok(gpumem_free(a, block, NULL));
  for (int i = 0; i < N; ++i) assert_ok(gpumem_alloc(a, 512, NULL, &p[i]));
  struct child c = start_importer();
  for (int i = 0; i < N; ++i) assert_int_equal(send_to(c, a, p[i], 512), i);
  struct reply r = ask(c, OP_INFO, 0, 0);
  expect_ok(r);
  assert_int_equal(r.value, N);
  /* 2000 x 512 bytes lie in one segment, or one 2 MiB unit (two if they cross one) */
  assert_in_range(r.segments, 1, 2);
  assert_int_equal(r.segment_opens, r.segments);
  for (int i = 0; i < N; ++i) expect_ok(ask(c, OP_CLOSE, i, 0));
  assert_int_equal(ask(c, OP_INFO, 0, 0).segments, 0);
  stop_importer(c);
  for (int i = 0; i < N; ++i) assert_ok(gpumem_free(a, p[i], NULL));
  unmake(k, a);
}
static void test_ipc_classic_many_small(void** state) { (void)state, many_small(CLASSIC_POOL); }
static void test_ipc_vm_many_small(void** state) { (void)state, many_small(VM_POOL); }

/* Freed while open elsewhere: the pool keeps the memory (in use) until the importer closes it. */
static void test_ipc_free_while_imported(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = make(VM_POOL);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 1 << 20, NULL, &p));
  if (!model) assert_ok(gpumem_memset(p, 0x77, 1, 1 << 20));
  struct child c = start_importer();
  const int i = send_to(c, a, p, 1 << 20);
  assert_ok(gpumem_free(a, p, NULL));
  assert_status(gpumem_free(a, p, NULL), GPUMEM_ERROR_NOT_OWNED); /* once is enough */
  assert_detail_contains("kept for the processes that opened it");
  gpumem_ipc_info_t info = info_here();
  assert_int_equal(info.held, 1);
  assert_int_equal(info.held_bytes, 1 << 20);
  assert_int_equal(stats_of(a).bytes_in_use, 1 << 20);
  void* q = NULL; /* a new allocation does not get the held memory */
  assert_ok(gpumem_alloc(a, 1 << 20, NULL, &q));
  assert_ptr_not_equal(q, p);
  if (!model) assert_ok(gpumem_memset(q, 0x11, 1, 1 << 20));
  struct reply r = ask(c, OP_CHECK, i, 0x77);
  expect_ok(r);
  assert_int_equal(r.value, 0);
  uint64_t freed = 1;
  assert_ok(gpumem_ipc_collect(&freed));
  assert_int_equal(freed, 0); /* still open there */
  expect_ok(ask(c, OP_CLOSE, i, 0));
  assert_ok(gpumem_ipc_collect(&freed));
  assert_int_equal(freed, 1 << 20);
  assert_int_equal(info_here().held, 0);
  assert_int_equal(stats_of(a).bytes_in_use, 1 << 20); /* q alone */
  stop_importer(c);
  assert_ok(gpumem_free(a, q, NULL));
  unmake(VM_POOL, a);
}

/* Sent, freed before it was opened: still opened whole. Opened, closed, then opened again: spent. */
static void test_ipc_freed_before_open_and_spent(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = make(VM_POOL);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 8192, NULL, &p));
  gpumem_ipc_handle_t h;
  size_t n = 0;
  assert_ok(gpumem_ipc_export(a, p, &h, &n));
  assert_int_equal(n, 2); /* the ledger and one unit */
  int fds[2];
  assert_ok(gpumem_ipc_export_fds(&h, fds, 2));
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(info_here().held, 1);
  uint64_t freed = 1;
  assert_ok(gpumem_ipc_collect(&freed));
  assert_int_equal(freed, 0); /* not opened yet: kept */
  /* Opened here, as another process would; this process's own memory opens where it is. */
  void* q = NULL;
  size_t size = 0;
  assert_ok(gpumem_ipc_open(&h, fds, 2, &q, &size));
  assert_ptr_equal(q, p);
  assert_int_equal(size, 8192);
  assert_ok(gpumem_ipc_close(q));
  assert_status(gpumem_ipc_close(q), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("is not open here");
  assert_ok(gpumem_ipc_collect(&freed));
  assert_int_equal(freed, 8192);
  assert_status(gpumem_ipc_open(&h, fds, 2, &q, &size), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("spent or its memory gone");
  assert_null(q);
  close(fds[0]);
  close(fds[1]);
  unmake(VM_POOL, a);
}

/* An importer that dies lets go of what it held; the exporter that dies leaves the importer's VM
 * memory readable. */
static void test_ipc_importer_killed(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = make(VM_POOL);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 65536, NULL, &p));
  struct child c = start_importer();
  send_to(c, a, p, 65536);
  assert_ok(gpumem_free(a, p, NULL));
  struct request q = {OP_CRASH, 0, 0};
  assert_int_equal(write(c.sock, &q, sizeof q), sizeof q);
  int status = 0;
  assert_int_equal(waitpid(c.pid, &status, 0), c.pid);
  assert_true(WIFSIGNALED(status));
  close(c.sock);
  uint64_t freed = 0;
  assert_ok(gpumem_ipc_collect(&freed));
  assert_int_equal(freed, 65536);
  assert_int_equal(stats_of(a).bytes_in_use, 0);
  unmake(VM_POOL, a);
}

static void test_ipc_exporter_killed(void** state) {
  (void)state;
  require_gpu();
  if (model) {
    print_message("the fake driver's imported memory holds no bytes to check\n");
    skip();
  }
  /* The roles turn: a child exports to this process, then is killed. */
  int fds[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char fd[16];
    snprintf(fd, sizeof fd, "%d", dup(fds[1]));
    execl("/proc/self/exe", "test_ipc", "exporter", fd, (char*)NULL);
    _exit(127);
  }
  close(fds[1]);
  void* p = NULL;
  size_t size = 0;
  assert_ok(gpumem_ipc_receive(fds[0], &p, &size));
  assert_int_equal(size, 3u << 20);
  kill(pid, SIGKILL);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  uint64_t bad = 1;
  assert_ok(check_bytes(p, size, 0x3c, &bad));
  assert_int_equal(bad, 0);
  assert_ok(gpumem_ipc_close(p));
  close(fds[0]);
}

/* The exporter's end of test_ipc_exporter_killed: a VM pool's allocation, sent, then wait. */
static int exporter(int sock) {
  void* p = NULL;
  if (gpumem_alloc(NULL, 3u << 20, NULL, &p) || gpumem_memset(p, 0x3c, 1, 3u << 20)) return 1;
  gpumem_ipc_handle_t h;
  if (gpumem_ipc_export(NULL, p, &h, NULL) || gpumem_ipc_send(sock, &h)) return 1;
  pause();
  return 0;
}

/* Memory of a device the importer does not see is refused there, and the exporter keeps nothing. */
static void test_ipc_device_not_seen(void** state) {
  (void)state;
  if (gpu_count() < 2) {
    print_message("needs two devices\n");
    skip();
  }
  gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  params.device = 1;
  gpumem_allocator_t* vm = NULL;
  assert_ok(gpumem_allocator_create_vm(&params, &vm));
  void* p = NULL;
  assert_ok(gpumem_alloc(vm, 4096, NULL, &p));
  struct child c = start_importer_seeing(true);
  const struct reply r = offer(c, vm, p);
  assert_int_equal(r.status, GPUMEM_ERROR_INVALID_DEVICE);
  assert_non_null(strstr(r.detail, "on a device this process does not see"));
  stop_importer(c);
  assert_ok(gpumem_free(vm, p, NULL)); /* sent, never opened: held */
  assert_int_equal(info_here().held, 1);
}

/* Bad input: a forged handle, a damaged one, wrong descriptors, closing what is not open, memory
 * that cannot be shared; each a clear error that changes nothing. */
static void test_ipc_bad_input(void** state) {
  (void)state;
  gpumem_ipc_handle_t h;
  memset(&h, 0x42, sizeof h);
  void* p = (void*)1;
  size_t size = 1;
  int fd = 0;
  assert_status(gpumem_ipc_open(&h, &fd, 1, &p, &size), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("not a gpumem IPC handle");
  assert_null(p);
  assert_int_equal(size, 0);
  assert_status(gpumem_ipc_close((void*)0x1000), GPUMEM_ERROR_NOT_OWNED);
  assert_status(gpumem_ipc_export_fds(&h, &fd, 1), GPUMEM_ERROR_INVALID_ARGUMENT);
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  assert_ok(gpumem_alloc(host, 64, NULL, &p));
  assert_status(gpumem_ipc_export(host, p, &h, &size), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("cannot be shared with another process");
  assert_int_equal(size, 0);
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_allocator_destroy(host));
  if (!gpu_available()) return;
  gpumem_allocator_t* a = make(VM_POOL);
  assert_ok(gpumem_alloc(a, 4096, NULL, &p));
  assert_status(gpumem_ipc_export(a, (char*)p + 512, &h, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_ok(gpumem_ipc_export(a, p, &h, &size));
  int fds[2];
  assert_ok(gpumem_ipc_export_fds(&h, fds, 2));
  void* q = NULL;
  assert_status(gpumem_ipc_open(&h, fds, 1, &q, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("needs 2 descriptors");
  h.bytes[40] ^= 1; /* damaged: the sum no longer matches */
  assert_status(gpumem_ipc_open(&h, fds, 2, &q, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("damaged");
  h.bytes[40] ^= 1;
  const int swapped[2] = {fds[1], fds[0]}; /* the ledger first */
  assert_status(gpumem_ipc_open(&h, swapped, 2, &q, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is not the exporter's IPC ledger");
  assert_int_equal(info_here().imports, 0);
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY); /* exported, in use */
  assert_ok(gpumem_free(a, p, NULL));                            /* never opened: held */
  assert_int_equal(info_here().held, 1);
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("exported to another process");
  /* Opened and closed (here, as another process would), it is spent, and the memory returns. */
  assert_ok(gpumem_ipc_open(&h, fds, 2, &q, NULL));
  assert_ok(gpumem_ipc_close(q));
  close(fds[0]);
  close(fds[1]);
  uint64_t freed = 0;
  assert_ok(gpumem_ipc_collect(&freed));
  assert_int_equal(freed, 4096);
  assert_int_equal(info_here().exported, 0);
  unmake(VM_POOL, a);
}

int main(int argc, char** argv) {
  model = getenv("GPUMEM_CUDA_DRIVER") != NULL;
  if (argc == 3 && strcmp(argv[1], "importer") == 0) return importer(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "exporter") == 0) return exporter(atoi(argv[2]));
  signal(SIGPIPE, SIG_IGN);
  gpumem_vm_params_t p = GPUMEM_VM_PARAMS_INIT;
  p.map_unit = 2u << 20;
  if (gpu_available() && gpumem_allocator_create_vm(&p, &vm_upstream) != GPUMEM_SUCCESS) {
    fprintf(stderr, "gpumem_allocator_create_vm: %s\n", gpumem_last_error_detail());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ipc_bad_input),
      cmocka_unit_test(test_ipc_classic_pool_both_ways),
      cmocka_unit_test(test_ipc_vm_pool_both_ways),
      cmocka_unit_test(test_ipc_vm_direct_both_ways),
      cmocka_unit_test(test_ipc_device_pool_both_ways),
      cmocka_unit_test(test_ipc_classic_many_small),
      cmocka_unit_test(test_ipc_vm_many_small),
      cmocka_unit_test(test_ipc_free_while_imported),
      cmocka_unit_test(test_ipc_freed_before_open_and_spent),
      cmocka_unit_test(test_ipc_importer_killed),
      cmocka_unit_test(test_ipc_exporter_killed),
      cmocka_unit_test(test_ipc_device_not_seen),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
