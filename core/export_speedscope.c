/* export_speedscope.c — speedscope's JSON file format: shared frames (one per
 * function). Sampled and imported sessions: one time-ordered "sampled"
 * profile per thread (consecutive samples of one stack merged, weights in ns,
 * or samples for imports; samples without a Python frame are empty stacks),
 * and one per asyncio task of `record --async` ("task NAME", logical stacks).
 * Traced sessions: one "evented" profile per thread from focus-mode call
 * records, else one "sampled" profile of paths rebuilt from edges. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"
#include "jsonw.h"
#include "query.h"
#include "store_int.h"
#include "views_int.h"
#include "vec.h"

/* ---- shared frames: one per function, in first-use order ---------------- */

typedef struct frames {
  bf_map3 idx;
  int64_t *order;
  size_t n, cap;
} frames;

static int64_t frame_of(frames *fr, int64_t fid) {
  int64_t *hit = bf_map3_get(&fr->idx, fid, 0, 0);
  if (hit) return *hit;
  if (bf_vec_grow((void **)&fr->order, &fr->cap, fr->n + 1, sizeof *fr->order, 256)) return -1;
  fr->order[fr->n] = fid;
  if (bf_map3_put(&fr->idx, fid, 0, 0, (int64_t)fr->n)) return -1;
  return (int64_t)fr->n++;
}

/* The elements of shared.frames, one per fr->order entry. */
static int write_frames(bf_store *s, bf_jw *w, const frames *fr) {
  for (size_t i = 0; i < fr->n; i++) {
    bf_function_ref ref;
    int rc = bf_store_function_get(s, fr->order[i], &ref);
    if (rc) return rc;
    bf_jw_obj(w);
    bf_jw_kstr(w, "name", ref.qualname);
    bf_jw_kstr(w, "file", ref.file);
    if (ref.firstlineno > 0) bf_jw_kint(w, "line", ref.firstlineno);
    bf_jw_end(w);
  }
  return 0;
}

/* The file's head up to its first key after activeProfileIndex. */
static void write_file_head(bf_jw *w, const char *name) {
  bf_jw_obj(w);
  bf_jw_kstr(w, "$schema", "https://www.speedscope.app/file-format-schema.json");
  bf_jw_kstr(w, "name", name);
  bf_jw_kstr(w, "exporter", "bifocal " BF_VERSION);
  bf_jw_kint(w, "activeProfileIndex", 0);
}

/* A profile's object up to its values: type, name, unit. */
static void profile_head(bf_jw *w, const char *type, const char *name, const char *unit) {
  bf_jw_obj(w);
  bf_jw_kstr(w, "type", type);
  bf_jw_kstr(w, "name", name);
  bf_jw_kstr(w, "unit", unit);
}

/* w as one "sampled" profile per thread of its distinct stacks (memory
 * stacks, w->unit "bytes": weights in bytes of growth). Frees w. */
static int export_wstacks(bf_store *s, int64_t session_id, bf_wstacks *w, FILE *out) {
  int rc = 0;
  frames fr = {0};
  /* frame index per function, in first-seen order */
  for (size_t i = 0; i < w->nf; i++)
    if (frame_of(&fr, w->fids[i]) < 0) {
      rc = -ENOMEM;
      goto out;
    }
  /* sampled and traced weights are ns, memory bytes; imports count */
  int ns = !(bf_q_kind_of(w->info) == BF_Q_IMPORTED) || w->unit;
  char name[128];
  snprintf(name, sizeof name, "bifocal session %lld%s%s", (long long)session_id, w->info->label ? " — " : "",
           w->info->label ? w->info->label : "");
  bf_jw jw;
  bf_jw_init(&jw, out);
  write_file_head(&jw, name);
  bf_jw_key(&jw, "shared");
  bf_jw_obj(&jw);
  bf_jw_key(&jw, "frames");
  bf_jw_arr(&jw);
  if ((rc = write_frames(s, &jw, &fr))) goto out;
  bf_jw_end(&jw);
  bf_jw_end(&jw);
  bf_jw_key(&jw, "profiles");
  bf_jw_arr(&jw);
  for (size_t t = 0; t < w->nthreads; t++) {
    double end = 0;
    size_t cnt = 0;
    for (size_t i = 0; i < w->n; i++)
      if (w->v[i].thread == (int32_t)t) {
        end += ns ? w->v[i].weight : (double)w->v[i].count;
        cnt++;
      }
    if (!cnt) continue;
    char lb[256];
    bf_wthread_label(&w->threads[t], lb, sizeof lb);
    profile_head(&jw, "sampled", lb, w->unit ? w->unit : ns ? "nanoseconds" : "none");
    bf_jw_kint(&jw, "startValue", 0);
    bf_jw_knum(&jw, "endValue", end);
    bf_jw_key(&jw, "samples");
    bf_jw_arr(&jw);
    for (size_t i = 0; i < w->n; i++) {
      const bf_wstack *st = &w->v[i];
      if (st->thread != (int32_t)t) continue;
      bf_jw_arr(&jw);
      for (uint32_t d = 0; d < st->depth; d++) bf_jw_int(&jw, *bf_map3_get(&fr.idx, w->fids[st->off + d], 0, 0));
      bf_jw_end(&jw);
    }
    bf_jw_end(&jw);
    bf_jw_key(&jw, "weights");
    bf_jw_arr(&jw);
    for (size_t i = 0; i < w->n; i++) {
      const bf_wstack *st = &w->v[i];
      if (st->thread == (int32_t)t) bf_jw_num(&jw, ns ? st->weight : (double)st->count);
    }
    bf_jw_end(&jw);
    bf_jw_end(&jw);
  }
  bf_jw_end(&jw);
  bf_jw_end(&jw);
  fputc('\n', out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_map3_free(&fr.idx);
  free(fr.order);
  bf_wstacks_free(w);
  return rc;
}

static int export_paths(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_wstacks *w = NULL;
  bf_sample_filter fk = f ? *f : (bf_sample_filter){0};
  fk.kernel_leaf = 1; /* the kernel lens's state as a leaf frame (record --kernel) */
  int rc = bf_wstacks_load(s, session_id, &fk, &w);
  return rc ? rc : export_wstacks(s, session_id, w, out);
}

int bf_export_speedscope_memory(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load_memory(s, session_id, f, 0, &w);
  return rc ? rc : export_wstacks(s, session_id, w, out);
}

/* note: appended to the file's name (speedscope shows it as the title), or "". */
static int write_head(bf_jw *w, int64_t session_id, const bf_session_info *info, const char *note) {
  char name[512];
  snprintf(name, sizeof name, "bifocal session %lld%s%.256s%s", (long long)session_id, info->label ? " — " : "",
           info->label ? info->label : "", note);
  write_file_head(w, name);
  bf_jw_key(w, "profiles");
  bf_jw_arr(w);
  return 0;
}

/* the shared frames go last: JSON objects are unordered, and only then are all known */
static int write_tail(bf_store *s, bf_jw *w, const frames *fr) {
  bf_jw_end(w); /* profiles */
  bf_jw_key(w, "shared");
  bf_jw_obj(w);
  bf_jw_key(w, "frames");
  bf_jw_arr(w);
  int rc = write_frames(s, w, fr);
  if (rc) return rc;
  bf_jw_end(w);
  bf_jw_end(w);
  bf_jw_end(w);
  fputc('\n', w->f);
  return 0;
}

static void thread_label(const bf_thread_ref *th, size_t nth, int64_t thread_id, char *buf, size_t len) {
  for (size_t i = 0; i < nth; i++)
    if (th[i].id == thread_id && bf_task_name(th[i].name, th[i].native_tid)) {
      /* an asyncio task: its own profile, named after it (its id is no tid) */
      snprintf(buf, len, "task %s", bf_task_name(th[i].name, th[i].native_tid));
      return;
    } else if (th[i].id == thread_id) {
      bf_wthread t = {.id = th[i].id, .native_tid = th[i].native_tid, .name = th[i].name};
      bf_wthread_label(&t, buf, len);
      return;
    }
  snprintf(buf, len, "thread %lld", (long long)thread_id);
}

/* ---- sampled / imported: time-ordered per thread --------------------------- */

typedef struct run {
  int64_t stack_id;
  int64_t kleaf; /* the kernel lens's leaf frame (bf_q_kleaf_of), 0 none */
  double weight;
} run;

typedef struct timeline {
  bf_store *s;
  bf_jw *w;
  frames fr;
  bf_q_frames *fc;
  run *runs;
  size_t n, cap;
  int64_t thread_id;
  int ns;
  bf_thread_ref *th;
  size_t nth;
} timeline;

static int flush_thread(timeline *t) {
  if (t->n == 0) return 0;
  char lb[256];
  thread_label(t->th, t->nth, t->thread_id, lb, sizeof lb);
  double end = 0;
  for (size_t i = 0; i < t->n; i++) end += t->runs[i].weight;
  profile_head(t->w, "sampled", lb, t->ns ? "nanoseconds" : "none");
  bf_jw_kint(t->w, "startValue", 0);
  bf_jw_knum(t->w, "endValue", end);
  bf_jw_key(t->w, "samples");
  bf_jw_arr(t->w);
  for (size_t i = 0; i < t->n; i++) {
    const int64_t *fids, *lines;
    size_t nf;
    int rc = bf_q_frames_get(t->s, &t->fc, t->runs[i].stack_id, &fids, &lines, &nf);
    if (rc) return rc;
    bf_jw_arr(t->w);
    for (size_t d = 0; d < nf; d++) {
      int64_t k = frame_of(&t->fr, fids[d]);
      if (k < 0) return -ENOMEM;
      bf_jw_int(t->w, k);
    }
    if (t->runs[i].kleaf && nf) {
      int64_t k = frame_of(&t->fr, t->runs[i].kleaf);
      if (k < 0) return -ENOMEM;
      bf_jw_int(t->w, k);
    }
    bf_jw_end(t->w);
  }
  bf_jw_end(t->w);
  bf_jw_key(t->w, "weights");
  bf_jw_arr(t->w);
  for (size_t i = 0; i < t->n; i++) bf_jw_num(t->w, t->runs[i].weight);
  bf_jw_end(t->w);
  bf_jw_end(t->w);
  t->n = 0;
  return 0;
}

static int export_timeline(bf_store *s, int64_t session_id, const bf_session_info *info, const bf_sample_filter *f,
                           FILE *out) {
  bf_jw jw;
  bf_jw_init(&jw, out);
  timeline t = {.s = s, .w = &jw, .thread_id = -1};
  bf_q_cursor *c = NULL;
  int rc = bf_store_threads(s, session_id, &t.th, &t.nth);
  if (rc) return rc;
  /* weights in ns when the session has them (sampled); else sample counts */
  t.ns = bf_q_kind_of(info) != BF_Q_IMPORTED;
  if ((rc = bf_q_timeline_open(s, session_id, f, &c))) goto out;
  write_head(&jw, session_id, info, "");
  const bf_sample *smp;
  while ((rc = bf_q_timeline_next(c, &smp)) == 1) {
    if (smp->thread_id != t.thread_id) {
      if ((rc = flush_thread(&t))) goto out;
      t.thread_id = smp->thread_id;
    }
    double w = t.ns ? (double)smp->weight : (double)(smp->count ? smp->count : 1);
    int64_t stack = smp->stack_id > 0 ? smp->stack_id : 0, kleaf = bf_q_kleaf_of(smp);
    if (t.n && t.runs[t.n - 1].stack_id == stack && t.runs[t.n - 1].kleaf == kleaf) {
      t.runs[t.n - 1].weight += w;
      continue;
    }
    if (bf_vec_grow((void **)&t.runs, &t.cap, t.n + 1, sizeof *t.runs, 4096)) {
      rc = -ENOMEM;
      goto out;
    }
    t.runs[t.n++] = (run){stack, kleaf, w};
  }
  if (rc < 0) goto out;
  if ((rc = flush_thread(&t))) goto out;
  rc = write_tail(s, &jw, &t.fr);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_q_timeline_close(c);
  bf_q_frames_free(t.fc);
  bf_map3_free(&t.fr.idx);
  free(t.fr.order);
  free(t.runs);
  bf_thread_refs_free(t.th, t.nth);
  return rc;
}

/* ---- traced with call records: evented, per thread -------------------------- */




#define EV_MAX_DEPTH 4096

/* One evented profile's event: O(pen) or C(lose) of frame at ns. */
static void event(bf_jw *w, const char *type, int64_t frame, int64_t at_ns) {
  bf_jw_obj(w);
  bf_jw_kstr(w, "type", type);
  bf_jw_kint(w, "frame", frame);
  bf_jw_kint(w, "at", at_ns);
  bf_jw_end(w);
}

static int sum_dropped(void *ud, const bf_trace_func *tf) {
  if (tf->records_dropped > 0) *(int64_t *)ud += tf->records_dropped;
  return 0;
}

static int export_evented(bf_store *s, int64_t session_id, const bf_session_info *info, const bf_q_records *a, FILE *out) {
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  frames fr = {0};
  int rc = bf_store_threads(s, session_id, &th, &nth);
  if (rc) return rc;
  struct open {
    int64_t frame, end;
  } *st = malloc(EV_MAX_DEPTH * sizeof *st);
  if (!st) {
    rc = -ENOMEM;
    goto out;
  }
  int64_t dropped = 0; /* focus calls the ring could not keep: not on the timeline */
  char note[128] = "";
  if (bf_store_trace_funcs_foreach(s, session_id, sum_dropped, &dropped) == 0 && dropped > 0)
    snprintf(note, sizeof note, " (%lld focus calls dropped: not on this timeline)", (long long)dropped);
  bf_jw jw;
  bf_jw_init(&jw, out);
  write_head(&jw, session_id, info, note);
  for (size_t i = 0; i < a->n;) {
    size_t j = i;
    while (j < a->n && a->v[j].thread_id == a->v[i].thread_id) j++;
    char lb[256];
    thread_label(th, nth, a->v[i].thread_id, lb, sizeof lb);
    int64_t start = a->v[i].start_ns, end = start;
    for (size_t k = i; k < j; k++)
      if (a->v[k].start_ns + a->v[k].duration_ns > end) end = a->v[k].start_ns + a->v[k].duration_ns;
    profile_head(&jw, "evented", lb, "nanoseconds");
    bf_jw_kint(&jw, "startValue", start);
    bf_jw_kint(&jw, "endValue", end);
    bf_jw_key(&jw, "events");
    bf_jw_arr(&jw);
    size_t depth = 0;
    for (size_t k = i; k <= j; k++) {
      /* close what ended before this call starts (everything at the end) */
      int64_t at = k < j ? a->v[k].start_ns : INT64_MAX;
      while (depth && st[depth - 1].end <= at) {
        depth--;
        event(&jw, "C", st[depth].frame, st[depth].end);
      }
      if (k == j) break;
      if (depth == EV_MAX_DEPTH) continue;
      int64_t e = a->v[k].start_ns + a->v[k].duration_ns;
      if (depth && e > st[depth - 1].end) e = st[depth - 1].end; /* keep events nested */
      int64_t frame = frame_of(&fr, a->v[k].function_id);
      if (frame < 0) {
        rc = -ENOMEM;
        goto out;
      }
      st[depth++] = (struct open){frame, e};
      event(&jw, "O", frame, a->v[k].start_ns);
    }
    bf_jw_end(&jw);
    bf_jw_end(&jw);
    i = j;
  }
  rc = write_tail(s, &jw, &fr);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  free(st);
  bf_map3_free(&fr.idx);
  free(fr.order);
  bf_thread_refs_free(th, nth);
  return rc;
}

int bf_export_speedscope(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  if (bf_q_kind_of(info) != BF_Q_TRACED) {
    rc = export_timeline(s, session_id, info, f, out);
  } else {
    bf_q_records a = {0};
    rc = bf_q_call_records_sorted(s, session_id, f, &a);
    if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
    if (!rc) rc = a.n ? export_evented(s, session_id, info, &a, out) : export_paths(s, session_id, f, out);
    free(a.v);
  }
  bf_session_info_free(info);
  return rc;
}
