/* test_smp_dbstat.c — helper of the sampler's integration tests (not a unit
 * test itself): print, per thread of a session, the sample count and the
 * status bits seen (idle, on CPU, GIL, GC) and the leaf functions, as JSON.
 * usage: test_smp_dbstat DB SESSION_ID
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

typedef struct leaf {
  int64_t frame_id;
  int64_t count, idle;
} leaf;

typedef struct th {
  int64_t id, tid;
  char *name;
  int64_t samples, idle, on_cpu, gil, gc, weight, native;
  leaf leaves[256];
  size_t nleaves;
} th;

typedef struct ctx {
  bf_store *st;
  th *t;
  size_t n;
} ctx;

static int on_sample(void *ud, const bf_sample *s) {
  ctx *c = ud;
  th *t = NULL;
  for (size_t i = 0; i < c->n; i++)
    if (c->t[i].id == s->thread_id) t = &c->t[i];
  if (!t) return 0;
  int64_t n = s->count ? s->count : 1;
  t->samples += n;
  t->weight += s->weight;
  if (s->flags & BF_SAMPLE_IDLE) t->idle += n;
  if (s->flags & BF_SAMPLE_ON_CPU) t->on_cpu += n;
  if (s->flags & BF_SAMPLE_GIL) t->gil += n;
  if (s->flags & BF_SAMPLE_GC) t->gc += n;
  if (s->flags & BF_SAMPLE_NATIVE) t->native += n;
  int64_t parent, frame = 0;
  if (s->stack_id && bf_store_stack_get(c->st, s->stack_id, &parent, &frame) < 0) frame = 0;
  size_t k;
  for (k = 0; k < t->nleaves; k++)
    if (t->leaves[k].frame_id == frame) break;
  if (k == t->nleaves) {
    if (k == 256) return 0;
    t->leaves[t->nleaves++] = (leaf){frame, 0, 0};
  }
  t->leaves[k].count += n;
  if (s->flags & BF_SAMPLE_IDLE) t->leaves[k].idle += n;
  return 0;
}

static void json_str(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') putchar('\\');
    if ((unsigned char)*s < 0x20) continue;
    putchar(*s);
  }
  putchar('"');
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_smp_dbstat DB SESSION_ID\n");
    return 2;
  }
  bf_store *st;
  bf_err msg = BF_ERR_INIT;
  if (bf_store_open(argv[1], BF_STORE_READONLY, &st, &msg) < 0) {
    fprintf(stderr, "dbstat: %s\n", msg.msg);
    return 1;
  }
  int64_t sid = atoll(argv[2]);
  bf_thread_ref *refs;
  size_t n;
  if (bf_store_threads(st, sid, &refs, &n) < 0) {
    fprintf(stderr, "dbstat: %s\n", bf_store_errmsg(st));
    return 1;
  }
  ctx c = {st, calloc(n ? n : 1, sizeof(th)), n};
  for (size_t i = 0; i < n; i++) {
    c.t[i].id = refs[i].id;
    c.t[i].tid = refs[i].native_tid;
    c.t[i].name = refs[i].name;
  }
  bf_sample_filter f = {0};
  if (bf_store_samples_foreach(st, sid, &f, on_sample, &c) < 0) {
    fprintf(stderr, "dbstat: %s\n", bf_store_errmsg(st));
    return 1;
  }
  printf("[");
  for (size_t i = 0; i < n; i++) {
    th *t = &c.t[i];
    printf("%s{\"tid\": %lld, \"name\": ", i ? ", " : "", (long long)t->tid);
    json_str(t->name);
    printf(", \"samples\": %lld, \"idle\": %lld, \"on_cpu\": %lld, \"gil\": %lld, \"gc\": %lld, "
           "\"weight\": %lld, \"native\": %lld, \"leaves\": [",
           (long long)t->samples, (long long)t->idle, (long long)t->on_cpu, (long long)t->gil,
           (long long)t->gc, (long long)t->weight, (long long)t->native);
    for (size_t k = 0; k < t->nleaves; k++) {
      int64_t fn = 0, line = 0;
      bf_function_ref fr = {0};
      if (t->leaves[k].frame_id) {
        bf_store_frame_get(st, t->leaves[k].frame_id, &fn, &line);
        bf_store_function_get(st, fn, &fr);
      }
      printf("%s{\"file\": ", k ? ", " : "");
      json_str(fr.file ? fr.file : "");
      printf(", \"qualname\": ");
      json_str(fr.qualname ? fr.qualname : "");
      printf(", \"firstlineno\": %lld, \"line\": %lld, \"count\": %lld, \"idle\": %lld}",
             (long long)fr.firstlineno, (long long)line, (long long)t->leaves[k].count,
             (long long)t->leaves[k].idle);
    }
    printf("]}");
  }
  printf("]\n");
  bf_thread_refs_free(refs, n);
  free(c.t);
  bf_store_close(st);
  return 0;
}
