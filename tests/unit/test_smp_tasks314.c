/* test_smp_tasks314.c — Python 3.14's and 3.15's asyncio debug offsets
 * (tasks_314.c) over a fake memory image: the offsets checked against the
 * TaskObj layout (each broken relation refused), then the Tasks linked in
 * two thread states and in the interpreter found, with bad lists bounded,
 * then the whole reader over a fake 3.14 and 3.15 process (3.15's frame
 * states and await stack). The real interpreters are checked by
 * tests/integration/test_asyncio_tasks.py. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "tasks_int.h" /* sampling/internal/: on this test's include path only */
#include "check.h"

#define BASE 0x7f0000000000ull
#define SIZE 65536
#include "fake_remote.h"
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

/* The same values at 3.15's positions (its _Py_DebugOffsets is 888 bytes:
 * interpreter_frame and what follows moved). */
static void pydebug_blob315(unsigned char *p) {
  memset(p, 0, TK314_PYDEBUG_LEN);
  memcpy(p, "xdebugpy", 8);
  w64(p, 8, 0x030f02f0);
  w64(p, 312, 80);
  w64(p, 360, 64);
  w64(p, 792, 160);
  w64(p, 808, 72);
  w64(p, 816, 67);
  w64(p, 824, 0);
  w64(p, 672, 16);
  w64(p, 680, 24);
}

/* The 3.14 blobs as a real 3.14.0 writes them, parsed into o. */
static void parsed_blobs(unsigned char a[TK314_ASYNCIO_LEN], unsigned char p[TK314_PYDEBUG_LEN], tk314 *o) {
  const char *msg;
  asyncio_blob(a);
  pydebug_blob(p, 0x030e00f0);
  CHECK_EQ_INT(tk314_parse(a, TK314_ASYNCIO_LEN, p, TK314_PYDEBUG_LEN, o, &msg), 0);
}

static void test_parse(void) {
  unsigned char a[TK314_ASYNCIO_LEN], p[TK314_PYDEBUG_LEN];
  tk314 o;
  const char *msg;
  parsed_blobs(a, p, &o);
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
  CHECK_EQ_INT(o.minor, 14);
  CHECK(o.fs_await_lo == -1 && o.fs_await_hi == -1 && o.fs_exec == 0 && o.await_below == 0);
  /* 3.15: its own positions, renumbered frame states, a NULL over the
   * awaited object */
  pydebug_blob315(p);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), 0);
  CHECK(o.minor == 15 && o.gen_iframe == 72 && o.gen_frame_state == 67 && o.fr_stackpointer == 64);
  CHECK(o.long_tag == 16 && o.long_digit == 24);
  CHECK(o.fs_await_lo == 2 && o.fs_await_hi == 3 && o.fs_exec == 4 && o.await_below == 1);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, 760, &o, &msg), -EINVAL); /* 3.14's length */
  /* read at 3.14's positions, 3.15's values are refused */
  w64(p, 8, 0x030e00f0);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), -EINVAL);
  /* versions other than 3.14/3.15, free-threaded builds, short blobs */
  pydebug_blob(p, 0x031000a1);
  CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), -ENOTSUP);
  pydebug_blob(p, 0x030d00f0);
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
  parsed_blobs(a, p, &o);
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

/* ---- the whole reader over a fake 3.14 process ----
 * A _Py_DebugOffsets blob at _PyRuntime with self-consistent 3.14 values,
 * one thread state listing two C Tasks: "alpha" parked two coroutines deep
 * (outer -> inner -> a FutureIter), "beta" running. Stack references and
 * f_executable are tagged, as in 3.14. */

static const size_t dpos314[][2] = {
    /* position in _Py_DebugOffsets, value */
    {24, 1000}, {40, 800},                                   /* runtime: size, interpreters head */
    {48, 4096}, {64, 8}, {72, 72}, {88, 200}, {144, 300}, {152, 304}, /* interpreter */
    {176, 2048}, {192, 8}, {208, 56}, {216, 136}, {224, 144},         /* thread state */
    {248, 80}, {256, 8}, {264, 0}, {272, 56}, {280, 80}, {288, 74}, {296, 64}, /* frame */
    {312, 200}, {320, 112}, {328, 120}, {336, 128}, {344, 136}, {352, 48}, {384, 192}, /* code */
    {400, 16}, {408, 8}, {416, 400}, {424, 24},              /* object, type */
    {568, 32}, {576, 16}, {584, 24},                         /* long */
    {592, 40}, {600, 16}, {608, 32},                         /* bytes */
    {616, 64}, {624, 32}, {632, 16}, {640, 40},              /* unicode */
    {648, 16}, {656, 4},                                     /* gc */
    {664, 160}, {672, 16}, {680, 72}, {688, 67}, {696, 0},   /* gen, llist */
};

static uint64_t top = BASE + 0x2000; /* bump allocator over mem */
static uint64_t alloc(size_t n) {
  uint64_t a = top;
  top += (n + 15) & ~(size_t)15;
  if (top - BASE > SIZE) abort();
  return a;
}
static uint64_t cstr(const char *s) {
  uint64_t a = alloc(strlen(s) + 1);
  memcpy(mem + (a - BASE), s, strlen(s) + 1);
  return a;
}
static uint64_t type_named(const char *name) {
  uint64_t t = alloc(400);
  put(t + 24, cstr(name));
  return t;
}
static uint64_t pystr(uint64_t str_type, const char *s) { /* compact ASCII */
  uint64_t a = alloc(40 + strlen(s) + 1);
  put(a + 8, str_type);
  put(a + 16, strlen(s));
  put(a + 32, 1 << 2 | 1 << 5 | 1 << 6);
  memcpy(mem + (a + 40 - BASE), s, strlen(s));
  return a;
}
static uint64_t code_named(uint64_t str_type, const char *qualname) {
  uint64_t c = alloc(200 + 64);
  put(c + 112, pystr(str_type, "app.py"));
  put(c + 120, pystr(str_type, qualname));
  put(c + 128, pystr(str_type, qualname));
  put(c + 48, 10); /* firstlineno */
  return c;
}
static int v315; /* the fake process is a 3.15 one */

/* A coroutine at frame state st running code; its stack's top (tagged) is
 * awaits (0: empty stack); on 3.15 a NULL stack reference above it. */
static uint64_t coro(uint64_t coro_type, uint64_t code, int st, uint64_t awaits) {
  uint64_t g = alloc(160 + 64);
  uint64_t f = g + 72;
  put(g + 8, coro_type);
  mem[g + 67 - BASE] = (unsigned char)(signed char)st;
  put(f + 0, code | 1);        /* f_executable, tagged */
  put(f + 56, code + 192 + 4); /* instr_ptr: the third code unit */
  put(f + 80, awaits | 1);     /* localsplus[0], tagged */
  if (v315 && awaits) put(f + 88, 1); /* PyStackRef_NULL */
  put(f + 64, awaits ? f + 88 + 8 * (uint64_t)v315 : f + 80); /* stackpointer */
  return g;
}

/* Frame states of the fake process's version: awaiting, executing. */
static int st_await(void) { return v315 ? 2 : -1; }
static int st_exec(void) { return v315 ? 4 : 0; }

static const bf_smp_thread no_threads[1]; /* the sample's threads: none */

static const bf_smp_thread *thread_named(const bf_smp_thread *th, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (th[i].name && strcmp(th[i].name, name) == 0) return &th[i];
  return NULL;
}

static void check_stack(const bf_smp_thread *t, const char *const *want, size_t n) {
  CHECK(t != NULL);
  if (!t) return;
  CHECK_EQ_INT(t->nframes, n);
  for (size_t i = 0; i < n && i < t->nframes; i++) {
    const char *q = t->frames[i].code ? t->frames[i].code->qualname : "(null)";
    if (strcmp(q, want[i]) != 0) fprintf(stderr, "frame %zu: %s, want %s\n", i, q, want[i]);
    CHECK(strcmp(q, want[i]) == 0);
  }
}

/* The reader over a fake 3.14 process, or (315) a 3.15 one: the thread and
 * frame layout stays 3.14's, the task offsets come from a 3.15 blob. */
static void test_reader(int v) {
  v315 = v;
  memset(mem, 0, sizeof mem);
  top = BASE + 0x2000;
  unsigned char p[TK314_PYDEBUG_LEN], a[TK314_ASYNCIO_LEN];
  pydebug_blob(p, 0x030e00f0);
  for (size_t i = 0; i < sizeof dpos314 / sizeof dpos314[0]; i++) w64(p, dpos314[i][0], dpos314[i][1]);
  asyncio_blob(a);
  uint64_t rt = BASE;
  memcpy(mem, p, sizeof p);
  smp_layout l;
  int ft;
  const char *msg;
  CHECK_EQ_INT(smp_layout_from_debug_offsets(p, sizeof p, &l, &ft, &msg), 0);
  tk314 o;
  if (v315) {
    unsigned char p5[TK314_PYDEBUG_LEN];
    pydebug_blob315(p5);
    CHECK_EQ_INT(tk314_parse(a, sizeof a, p5, sizeof p5, &o, &msg), 0);
  } else {
    CHECK_EQ_INT(tk314_parse(a, sizeof a, p, sizeof p, &o, &msg), 0);
  }
  uint64_t interp = alloc(4096), ts = alloc(2048);
  put(rt + 800, interp);
  put(interp + 72, ts);
  put(interp + 1024, interp + 1024); /* no tasks of finished threads */
  uint64_t t_str = type_named("str"), t_coro = type_named("coroutine"), t_task = type_named("_asyncio.Task"),
           t_iter = type_named("_asyncio.FutureIter");
  uint64_t fut_iter = alloc(32), future = alloc(64);
  put(fut_iter + 8, t_iter);
  uint64_t c_inner = coro(t_coro, code_named(t_str, "inner"), st_await(), fut_iter);
  uint64_t c_outer = coro(t_coro, code_named(t_str, "outer"), st_await(), c_inner);
  uint64_t c_run = coro(t_coro, code_named(t_str, "run"), st_exec(), 0);
  uint64_t ta = alloc(168), tb = alloc(168);
  put(ta + 8, t_task);
  put(ta + 120, future);
  put(ta + 128, c_outer);
  put(ta + 136, pystr(t_str, "alpha"));
  put(tb + 8, t_task);
  put(tb + 128, c_run);
  put(tb + 136, pystr(t_str, "beta"));
  uint64_t head = ts + 1016;
  put(head, ta + 152);
  put(ta + 152, tb + 152);
  put(tb + 152, head);

  bf_smp *h = bf_smp_new();
  smp_set_reader(h, fake_readv, NULL);
  smp_set_layout(h, &l, rt);
  h->now_ns = 1000000000;
  bf_smp_tasks *tk = bf_smp_tasks_new(h);
  CHECK(strstr(bf_smp_tasks_status(tk), "not verified") == NULL);
  tk_use_314(tk, &o);
  for (int round = 0; round < 2; round++) { /* the second from the chain cache */
    const bf_smp_thread *out;
    size_t n = 0;
    bf_smp_tasks_sample(tk, no_threads, 0, &out, &n);
    CHECK_EQ_INT(n, 2);
    const bf_smp_thread *alpha = thread_named(out, n, "task:alpha"), *beta = thread_named(out, n, "task:beta");
    static const char *const wa[] = {"inner", "outer", "alpha"}, *const wb[] = {"run", "beta"};
    check_stack(alpha, wa, 3);
    check_stack(beta, wb, 2);
    CHECK(alpha && (alpha->flags & BF_SMP_TASK_WAITING) && (alpha->flags & BF_SMP_IDLE));
    CHECK(beta && (beta->flags & BF_SMP_TASK_RUNNING));
    CHECK(alpha && strcmp(alpha->frames[2].code->filename, BF_SMP_TASK_FILE) == 0);
    h->now_ns += 1000000;
  }
  /* inner is running now (a torn moment): alpha's chain stops at outer;
   * a Task whose coroutine is not a coroutine is left out */
  mem[c_inner + 67 - BASE] = (unsigned char)(signed char)st_exec();
  put(tb + 128, fut_iter);
  h->now_ns += 200000000; /* past the chain cache's life */
  const bf_smp_thread *out;
  size_t n = 0;
  bf_smp_tasks_sample(tk, no_threads, 0, &out, &n);
  static const char *const wa2[] = {"outer", "alpha"};
  check_stack(thread_named(out, n, "task:alpha"), wa2, 2);
  CHECK(thread_named(out, n, "task:beta") == NULL || thread_named(out, n, "task:beta")->nframes == 1);
  /* a Task torn down while still listed (its name already cleared, as
   * TaskObj_clear does before the memory is freed): left out. It once gave
   * the recorder a frame without code (the name table's empty slot 0) */
  put(tb + 128, c_run);
  put(tb + 136, 0);
  h->now_ns += 1000000;
  n = 0;
  bf_smp_tasks_sample(tk, no_threads, 0, &out, &n);
  CHECK_EQ_INT(n, 1);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < out[i].nframes; k++) CHECK(out[i].frames[k].code != NULL);
  for (size_t i = 0; i < n; i++) CHECK(out[i].name != NULL);
  bf_smp_tasks_free(tk);
  bf_smp_free(h);
}

int main(void) {
  test_parse();
  test_lists();
  test_reader(0);
  test_reader(1);
  return CHECK_DONE();
}
