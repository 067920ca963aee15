/* test_smp_tasks314.c — Python 3.14's asyncio debug offsets (tasks_314.c)
 * over a fake memory image: the offsets checked against the TaskObj layout
 * (each broken relation refused), then the Tasks linked in two thread
 * states and in the interpreter found, with bad lists bounded. No 3.14
 * interpreter was available: this is the only check the reader gets. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "tasks_int.h" /* sampling/internal/: on this test's include path only */
#include "check.h"

#define BASE 0x7f0000000000ull
#define SIZE 65536
static unsigned char mem[SIZE];

static ssize_t fake_readv(void *ud, const struct iovec *l, size_t nl, const struct iovec *r, size_t nr) {
  (void)ud;
  (void)nl;
  ssize_t total = 0;
  for (size_t i = 0; i < nr; i++) {
    uint64_t a = (uint64_t)(uintptr_t)r[i].iov_base;
    if (a < BASE || a - BASE + r[i].iov_len > SIZE) {
      if (total) return total;
      errno = EFAULT;
      return -1;
    }
    memcpy(l[i].iov_base, mem + (a - BASE), r[i].iov_len);
    total += (ssize_t)r[i].iov_len;
  }
  return total;
}

static void put(uint64_t addr, uint64_t v) { memcpy(mem + (addr - BASE), &v, 8); }
static void w64(unsigned char *b, size_t off, uint64_t v) { memcpy(b + off, &v, 8); }

/* The 3.14 values, as _asynciomodule.c's offsetof gives them for TaskObj
 * (awaited_by 96, state 104, is_task 108, fut_waiter 120, coro 128, name
 * 136, node 152, size 168). */
static void asyncio_blob(unsigned char *a) {
  memset(a, 0, TK314_ASYNCIO_LEN);
  uint64_t v[13] = {168, 136, 96, 108, 109, 128, 152, /* task */
                    4096, 1024,                        /* interpreter: size, tasks head */
                    2048, 1000, 1008, 1016};           /* thread: size, loop, task, tasks head */
  for (int i = 0; i < 13; i++) w64(a, (size_t)i * 8, v[i]);
}

static void pydebug_blob(unsigned char *p, uint64_t version) {
  memset(p, 0, TK314_PYDEBUG_LEN);
  memcpy(p, "xdebugpy", 8);
  w64(p, 8, version);
  w64(p, 248, 80);  /* _PyInterpreterFrame size */
  w64(p, 296, 64);  /* stackpointer */
  w64(p, 664, 160); /* PyGenObject size */
  w64(p, 680, 72);  /* gi_iframe */
  w64(p, 688, 67);  /* gi_frame_state */
  w64(p, 696, 0);   /* llist_node.next */
  w64(p, 576, 16);  /* PyLongObject lv_tag */
  w64(p, 584, 24);  /* ob_digit */
}

static void test_parse(void) {
  unsigned char a[TK314_ASYNCIO_LEN], p[TK314_PYDEBUG_LEN];
  tk314 o;
  const char *msg;
  asyncio_blob(a);
  pydebug_blob(p, 0x030e00f0);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), 0);
  CHECK_EQ_INT(o.task_size, 168);
  CHECK_EQ_INT(o.task_fut_state, 104);
  CHECK_EQ_INT(o.task_fut_waiter, 120);
  CHECK_EQ_INT(o.task_coro, 128);
  CHECK_EQ_INT(o.task_name, 136);
  CHECK_EQ_INT(o.task_node, 152);
  CHECK_EQ_INT(o.is_tasks_head, 1024);
  CHECK_EQ_INT(o.ts_tasks_head, 1016);
  CHECK_EQ_INT(o.gen_iframe, 72);
  CHECK_EQ_INT(o.fr_stackpointer, 64);
  CHECK_EQ_INT(o.long_tag, 16);
  CHECK_EQ_INT(o.long_digit, 24);
  /* versions other than 3.14, free-threaded builds, short blobs */
  pydebug_blob(p, 0x030f00a1);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), -ENOTSUP);
  pydebug_blob(p, 0x030e00f0);
  w64(p, 16, 1);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), -ENOTSUP);
  pydebug_blob(p, 0x030e00f0);
  CHECK_EQ_INT(tk314_parse(a, sizeof a - 8, p, sizeof p, &o, &msg), -EINVAL);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, 700, &o, &msg), -EINVAL);
  p[0] = 'y';
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), -EINVAL);
  /* each broken relation of the layout is refused */
  static const struct { int blob; size_t off; uint64_t v; } bad[] = {
      {0, 8, 144},    /* name not right after coro */
      {0, 24, 112},   /* is_task not after awaited_by + state */
      {0, 32, 111},   /* awaited_by_is_set not after is_task */
      {0, 48, 164},   /* node past the end */
      {0, 0, 4096},   /* absurd Task size */
      {0, 64, 4090},  /* interpreter head outside its size */
      {0, 96, 2040},  /* thread head outside its size */
      {1, 688, 66},   /* frame state not just before the frame */
      {1, 296, 76},   /* stackpointer past what a frame read covers */
      {1, 680, 100},  /* frame past the generator's end */
      {1, 696, 24},   /* llist next */
      {1, 584, 16},   /* digits over the tag */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    asyncio_blob(a);
    pydebug_blob(p, 0x030e00f0);
    w64(bad[i].blob ? p : a, bad[i].off, bad[i].v);
    int rc = tk314_parse(a, sizeof a, p, sizeof p, &o, &msg);
    if (rc != -EINVAL) fprintf(stderr, "bad[%zu] accepted\n", i);
    CHECK_EQ_INT(rc, -EINVAL);
  }
}

static void test_lists(void) {
  unsigned char a[TK314_ASYNCIO_LEN], p[TK314_PYDEBUG_LEN];
  tk314 o;
  const char *msg;
  asyncio_blob(a);
  pydebug_blob(p, 0x030e00f0);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), 0);
  smp_layout l;
  memset(&l, 0, sizeof l);
  l.is_tstate_head = 72;
  l.ts_next = 8;
  bf_smp *h = bf_smp_new();
  smp_set_reader(h, fake_readv, NULL);
  smp_set_layout(h, &l, BASE);
  uint64_t interp = BASE + 0x1000, ts1 = BASE + 0x3000, ts2 = BASE + 0x4000;
  uint64_t t1 = BASE + 0x6000, t2 = BASE + 0x6100, t3 = BASE + 0x6200;
  memset(mem, 0, sizeof mem);
  put(interp + 72, ts1);
  put(ts1 + 8, ts2);
  put(ts2 + 8, 0);
  /* ts1: head -> t1 -> t2 -> head; ts2: empty; interpreter: t3 */
  uint64_t h1 = ts1 + 1016, h2 = ts2 + 1016, hi = interp + 1024;
  put(h1, t1 + 152);
  put(t1 + 152, t2 + 152);
  put(t2 + 152, h1);
  put(h2, h2);
  put(hi, t3 + 152);
  put(t3 + 152, hi);
  uint64_t addrs[16];
  size_t n = 0;
  CHECK_EQ_INT(tk314_tasks(h, &o, interp, addrs, 16, &n), 0);
  CHECK_EQ_INT(n, 3);
  CHECK(n == 3 && addrs[0] == t1 && addrs[1] == t2 && addrs[2] == t3);
  /* a list that never comes back to its head stops at max */
  put(t2 + 152, t1 + 152);
  n = 0;
  CHECK_EQ_INT(tk314_tasks(h, &o, interp, addrs, 16, &n), 0);
  CHECK_EQ_INT(n, 16);
  /* an unreadable node ends its list; the next list is still walked */
  put(t1 + 152, 0x10);
  n = 0;
  CHECK_EQ_INT(tk314_tasks(h, &o, interp, addrs, 16, &n), 0);
  CHECK(n == 2 && addrs[0] == t1 && addrs[1] == t3);
  put(t1 + 152, BASE + SIZE + 0x1000);
  n = 0;
  CHECK_EQ_INT(tk314_tasks(h, &o, interp, addrs, 16, &n), 0);
  CHECK_EQ_INT(n, 3); /* t1, the unreadable one's Task address, t3 */
  /* no interpreter, or one that cannot be read */
  n = 0;
  CHECK_EQ_INT(tk314_tasks(h, &o, 0, addrs, 16, &n), -EIO);
  CHECK_EQ_INT(tk314_tasks(h, &o, 0x1000, addrs, 16, &n), -EIO);
  CHECK_EQ_INT(n, 0);
  bf_smp_free(h);
}

int main(void) {
  test_parse();
  test_lists();
  return CHECK_DONE();
}
