/* test_trc_stack.c — the tracer's shadow stacks (tracing/trc_stack.c): calls,
 * primitive calls, self and total time per function and per edge for nesting,
 * recursion, generator resumes, out-of-order returns, focus subtrees and their
 * record ring, worked out by hand from the push/pop times below. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "trc_stack.h"

static int keys[8]; /* &keys[i]: the unique address of function i */
static trc_acct acct;
static int focus_calls[2]; /* on_focus(0) and on_focus(1) calls */

static void on_focus(void *ctx, int on) {
  CHECK(ctx == &acct);
  focus_calls[on ? 1 : 0]++;
}

static void setup(int focus, size_t ring) {
  trc_acct_free(&acct);
  memset(&acct, 0, sizeof acct);
  CHECK_EQ_INT(trc_acct_reset(&acct), 0);
  CHECK_EQ_INT(trc_acct_ring(&acct, ring), 0);
  acct.focus = focus;
  acct.on_focus = on_focus;
  acct.on_focus_ctx = &acct;
  focus_calls[0] = focus_calls[1] = 0;
}

static uint32_t fn(int i) {
  uint32_t fi = trc_func_find(&acct, &keys[i]);
  if (!fi) fi = trc_func_add(&acct, &keys[i], NULL, 0);
  CHECK(fi != 0);
  return fi;
}

static const bf_trc_edge *edge(uint32_t caller, uint32_t callee) {
  uint32_t ei = trc_map_get(&acct.edge_map, (uint64_t)caller << 32 | callee);
  CHECK(ei != 0);
  return &acct.edges[ei];
}

#define PUSH(t, i, flags, now) trc_push(&acct, (t), fn(i), &keys[i], (flags), (now))

static void test_nesting(void) {
  setup(0, 0);
  trc_thread *t = trc_thread_alloc();
  uint32_t a = fn(0), b = fn(1);
  PUSH(t, 0, 0, 0);
  PUSH(t, 1, 0, 10);
  trc_pop(&acct, t, 30);
  PUSH(t, 1, 0, 40);
  trc_pop(&acct, t, 45);
  trc_pop(&acct, t, 100);
  CHECK_EQ_INT(t->depth, 0);
  const bf_trc_func *fa = &acct.funcs[a], *fb = &acct.funcs[b];
  CHECK_EQ_INT(fa->calls, 1);
  CHECK_EQ_INT(fa->primitive_calls, 1);
  CHECK_EQ_INT(fa->self_ns, 75);
  CHECK_EQ_INT(fa->total_ns, 100);
  CHECK_EQ_INT(fb->calls, 2);
  CHECK_EQ_INT(fb->self_ns, 25);
  CHECK_EQ_INT(fb->total_ns, 25);
  const bf_trc_edge *ra = edge(0, a), *ab = edge(a, b);
  CHECK_EQ_INT(ra->calls, 1);
  CHECK_EQ_INT(ra->self_ns, 75);
  CHECK_EQ_INT(ra->total_ns, 100);
  CHECK_EQ_INT(ab->calls, 2);
  CHECK_EQ_INT(ab->primitive_calls, 2);
  CHECK_EQ_INT(ab->total_ns, 25);
  CHECK_EQ_INT(acct.nedges, 3); /* [0] unused */
  CHECK_EQ_INT(acct.mismatches, 0);
  trc_thread_free(t);
}

/* A calls A calls A: one primitive call; total time of the outermost only. */
static void test_recursion(void) {
  setup(0, 0);
  trc_thread *t = trc_thread_alloc();
  uint32_t a = fn(0);
  PUSH(t, 0, 0, 0);
  PUSH(t, 0, 0, 1);
  PUSH(t, 0, 0, 2);
  trc_pop(&acct, t, 3);
  trc_pop(&acct, t, 5);
  trc_pop(&acct, t, 10);
  CHECK_EQ_INT(acct.funcs[a].calls, 3);
  CHECK_EQ_INT(acct.funcs[a].primitive_calls, 1);
  CHECK_EQ_INT(acct.funcs[a].self_ns, 10);
  CHECK_EQ_INT(acct.funcs[a].total_ns, 10);
  const bf_trc_edge *aa = edge(a, a);
  CHECK_EQ_INT(aa->calls, 2);
  CHECK_EQ_INT(aa->primitive_calls, 1);
  CHECK_EQ_INT(aa->self_ns, 4);
  CHECK_EQ_INT(aa->total_ns, 4);
  /* deep enough to grow the stack and both active-count arrays */
  for (int i = 0; i < 1000; i++) PUSH(t, 0, 0, 100 + i);
  CHECK_EQ_INT(t->depth, 1000);
  trc_thread_unwind(&acct, t, 2000);
  CHECK_EQ_INT(t->depth, 0);
  CHECK_EQ_INT(acct.funcs[a].calls, 1003);
  CHECK_EQ_INT(acct.funcs[a].primitive_calls, 2);
  CHECK_EQ_INT(acct.funcs[a].total_ns, 10 + 1900);
  CHECK_EQ_INT(acct.error, 0);
  trc_thread_free(t);
}

/* Resumes count as resumes (not calls) but their time counts. Each thread has
 * its own active counts: the same function on two threads is primitive twice. */
static void test_resume_and_threads(void) {
  setup(0, 0);
  trc_thread *t1 = trc_thread_alloc(), *t2 = trc_thread_alloc();
  uint32_t g = fn(2), a = fn(0);
  PUSH(t1, 2, TRC_FR_RESUME, 0);
  trc_pop(&acct, t1, 5);
  CHECK_EQ_INT(acct.funcs[g].resumes, 1);
  CHECK_EQ_INT(acct.funcs[g].calls, 0);
  CHECK_EQ_INT(acct.funcs[g].self_ns, 5);
  CHECK_EQ_INT(edge(0, g)->calls, 0);
  PUSH(t1, 0, 0, 10);
  PUSH(t2, 0, 0, 11);
  trc_pop(&acct, t2, 13);
  trc_pop(&acct, t1, 20);
  CHECK_EQ_INT(acct.funcs[a].calls, 2);
  CHECK_EQ_INT(acct.funcs[a].primitive_calls, 2);
  CHECK_EQ_INT(acct.funcs[a].total_ns, 12);
  /* a clock that went backwards is clamped at zero */
  PUSH(t1, 0, 0, 50);
  trc_pop(&acct, t1, 40);
  CHECK_EQ_INT(acct.funcs[a].total_ns, 12);
  trc_thread_free(t1);
  trc_thread_free(t2);
}

/* Returns out of order: frames above are popped and counted as mismatches. */
static void test_leave_resync(void) {
  setup(0, 0);
  trc_thread *t = trc_thread_alloc();
  uint32_t a = fn(0), b = fn(1);
  PUSH(t, 0, 0, 0);
  PUSH(t, 1, 0, 1);
  trc_leave(&acct, t, &keys[0], 4);
  CHECK_EQ_INT(t->depth, 0);
  CHECK_EQ_INT(acct.mismatches, 1);
  CHECK_EQ_INT(acct.funcs[b].total_ns, 3);
  CHECK_EQ_INT(acct.funcs[a].total_ns, 4);
  CHECK_EQ_INT(acct.funcs[a].self_ns, 1);
  trc_leave(&acct, t, &keys[5], 5); /* empty stack: entered before tracing */
  CHECK_EQ_INT(acct.mismatches, 1);
  PUSH(t, 0, 0, 10);
  trc_leave(&acct, t, &keys[5], 11); /* not on the stack at all */
  CHECK_EQ_INT(acct.mismatches, 2);
  CHECK_EQ_INT(t->depth, 1);
  trc_leave(&acct, t, &keys[0], 12);
  CHECK_EQ_INT(t->depth, 0);
  CHECK_EQ_INT(acct.funcs[a].calls, 2);
  /* the edge cache of a caller alternating callees */
  uint32_t c = fn(3);
  PUSH(t, 0, 0, 0);
  for (int i = 0; i < 3; i++) {
    PUSH(t, i == 1 ? 3 : 1, 0, 10 * i);
    trc_pop(&acct, t, 10 * i + 1);
  }
  trc_pop(&acct, t, 100);
  CHECK_EQ_INT(edge(a, b)->calls, 3); /* 1 above + 2 here */
  CHECK_EQ_INT(edge(a, c)->calls, 1);
  trc_thread_free(t);
}

/* Focus mode: only subtrees of focus functions count; each focused call is a
 * record, the hook fires when the first subtree opens and the last closes. */
static void test_focus(void) {
  setup(1, 16);
  trc_thread *t = trc_thread_alloc();
  uint32_t f = fn(2), g = fn(3);
  acct.funcs[f].focus = 1;
  PUSH(t, 3, 0, 0); /* outside every subtree: not counted */
  CHECK_EQ_INT(t->depth, 0);
  PUSH(t, 2, 0, 1);
  CHECK_EQ_INT(focus_calls[1], 1);
  PUSH(t, 3, 0, 2);
  trc_pop(&acct, t, 3);
  PUSH(t, 2, 0, 4); /* nested focused call: recorded too */
  trc_pop(&acct, t, 6);
  trc_pop(&acct, t, 10);
  CHECK_EQ_INT(focus_calls[0], 1);
  CHECK_EQ_INT(acct.funcs[g].calls, 1);
  CHECK_EQ_INT(acct.funcs[f].calls, 2);
  CHECK_EQ_INT(acct.rec_count, 2);
  CHECK_EQ_INT(acct.recs[0].func, f);
  CHECK_EQ_INT(acct.recs[0].parent, f);
  CHECK_EQ_INT(acct.recs[0].start_ns, 4);
  CHECK_EQ_INT(acct.recs[0].duration_ns, 2);
  CHECK_EQ_INT(acct.recs[1].parent, 0);
  CHECK_EQ_INT(acct.recs[1].start_ns, 1);
  CHECK_EQ_INT(acct.recs[1].duration_ns, 9);
  CHECK_EQ_INT(acct.funcs[f].records_kept, 2);
  /* a resumed focused generator is one more slice, not a record */
  PUSH(t, 2, TRC_FR_RESUME, 20);
  trc_pop(&acct, t, 21);
  CHECK_EQ_INT(acct.rec_count, 2);
  CHECK_EQ_INT(acct.funcs[f].resumes, 1);
  CHECK_EQ_INT(focus_calls[1], 2);
  CHECK_EQ_INT(focus_calls[0], 2);
  /* returns of frames focus mode never pushed are not mismatches */
  trc_leave(&acct, t, &keys[3], 30);
  CHECK_EQ_INT(acct.mismatches, 0);
  trc_thread_free(t);

  /* a full ring drops the oldest record */
  setup(1, 2);
  t = trc_thread_alloc();
  f = fn(2);
  acct.funcs[f].focus = 1;
  int64_t at[3][2] = {{0, 1}, {2, 4}, {5, 8}};
  for (int i = 0; i < 3; i++) {
    PUSH(t, 2, 0, at[i][0]);
    trc_pop(&acct, t, at[i][1]);
  }
  CHECK_EQ_INT(acct.rec_count, 2);
  CHECK_EQ_INT(acct.funcs[f].records_kept, 2);
  CHECK_EQ_INT(acct.funcs[f].records_dropped, 1);
  const bf_trc_rec *oldest = &acct.recs[acct.rec_head];
  CHECK_EQ_INT(oldest->start_ns, 2);
  CHECK_EQ_INT(oldest->duration_ns, 2);
  CHECK_EQ_INT(acct.recs[(acct.rec_head + 1) % acct.rec_cap].start_ns, 5);
  trc_thread_free(t);
}

int main(void) {
  test_nesting();
  test_recursion();
  test_resume_and_threads();
  test_leave_resync();
  test_focus();
  trc_acct_free(&acct);
  return CHECK_DONE();
}
