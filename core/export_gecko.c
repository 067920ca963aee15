/* export_gecko.c — the Gecko profile format (what Firefox's own profiler
 * writes and profiler.firefox.com loads and upgrades): one thread object per
 * sampled thread with its own string, frame and stack tables in
 * schema + data form, and samples [stack, ms since meta.startTime, 0]. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exports.h"
#include "ident.h"
#include "jsonw.h"
#include "map.h"
#include "query.h"
#include "store_int.h"
#include "vec.h"

/* gecko format version written (docs-developer/CHANGELOG-formats.md: 27 drops
 * frameTable.optimizations, which we never write) */
#define GECKO_VERSION 30
/* a record standing for more samples is written as that many samples, up to this */
#define GECKO_MAX_REPEAT 1000

typedef struct gframe {
  int64_t fid, line; /* fid -1: no Python frame */
} gframe;

typedef struct gthread {
  bf_map3 fidx, sidx;     /* (fid, line) → frame; (prefix + 1, frame) → stack */
  bf_map3 bysid;          /* the store's stack id → its stack here (seen before) */
  gframe *frames;
  size_t nframes, fcap;
  int64_t *prefix, *frame; /* stack table */
  size_t nstacks, scap, scap2;
  char *samples;           /* the samples' JSON array */
  size_t samples_len;
  FILE *sf;
  bf_jw sw;                /* writing it on sf */
} gthread;

static void gthread_reset(gthread *t) {
  bf_map3_free(&t->fidx);
  bf_map3_free(&t->sidx);
  bf_map3_free(&t->bysid);
  free(t->frames);
  free(t->prefix);
  free(t->frame);
  if (t->sf) fclose(t->sf);
  free(t->samples);
  memset(t, 0, sizeof *t);
}

static int frame_of(gthread *t, int64_t fid, int64_t line, int64_t *out) {
  int64_t *hit = bf_map3_get(&t->fidx, fid, line, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  if (bf_vec_grow((void **)&t->frames, &t->fcap, t->nframes + 1, sizeof *t->frames, 64)) return -ENOMEM;
  t->frames[t->nframes] = (gframe){fid, line};
  *out = (int64_t)t->nframes++;
  return bf_map3_put(&t->fidx, fid, line, 0, *out) ? -ENOMEM : 0;
}

static int stack_of(gthread *t, int64_t prefix, int64_t frame, int64_t *out) {
  int64_t *hit = bf_map3_get(&t->sidx, prefix + 1, frame, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  if (bf_vec_grow((void **)&t->prefix, &t->scap, t->nstacks + 1, sizeof *t->prefix, 64) ||
      bf_vec_grow((void **)&t->frame, &t->scap2, t->nstacks + 1, sizeof *t->frame, 64))
    return -ENOMEM;
  t->prefix[t->nstacks] = prefix;
  t->frame[t->nstacks] = frame;
  *out = (int64_t)t->nstacks++;
  return bf_map3_put(&t->sidx, prefix + 1, frame, 0, *out) ? -ENOMEM : 0;
}

/* An object {"schema":{names[i]:i,...},"data":[ left open for the rows. */
static void table_open(bf_jw *w, const char *key, const char *const *names, size_t n) {
  bf_jw_key(w, key);
  bf_jw_obj(w);
  bf_jw_key(w, "schema");
  bf_jw_obj(w);
  for (size_t i = 0; i < n; i++) bf_jw_kint(w, names[i], (long long)i);
  bf_jw_end(w);
  bf_jw_key(w, "data");
  bf_jw_arr(w);
}

static const char *const marker_cols[] = {"name", "startTime", "endTime", "phase", "category", "data"};
static const char *const sample_cols[] = {"stack", "time", "eventDelay"};
static const char *const frame_cols[] = {"location", "relevantForJS", "innerWindowID", "implementation",
                                         "line",     "column",        "category",      "subcategory"};
static const char *const stack_cols[] = {"prefix", "frame"};
#define NCOLS(a) (sizeof a / sizeof *a)

/* One thread object; the string table holds each frame's location, in frame order. */
static int write_thread(bf_store *s, gthread *t, const bf_thread_ref *th, int64_t pid, bf_jw *w) {
  bf_jw_end(&t->sw);
  fflush(t->sf);
  char tname[160];
  if (th && th->name) snprintf(tname, sizeof tname, "%s", th->name);
  else snprintf(tname, sizeof tname, "thread %lld", th ? (long long)th->native_tid : 0LL);
  bf_jw_pad(w, "\n");
  bf_jw_obj(w);
  bf_jw_kstr(w, "name", tname);
  bf_jw_kint(w, "registerTime", 0);
  bf_jw_knull(w, "unregisterTime");
  bf_jw_kstr(w, "processType", "default");
  bf_jw_kstr(w, "processName", "python");
  bf_jw_kint(w, "tid", th ? (long long)th->native_tid : 0LL);
  bf_jw_kint(w, "pid", pid);
  table_open(w, "markers", marker_cols, NCOLS(marker_cols));
  bf_jw_end(w);
  bf_jw_end(w);
  bf_jw_key(w, "samples");
  bf_jw_obj(w);
  bf_jw_key(w, "schema");
  bf_jw_obj(w);
  for (size_t i = 0; i < NCOLS(sample_cols); i++) bf_jw_kint(w, sample_cols[i], (long long)i);
  bf_jw_end(w);
  bf_jw_key(w, "data");
  bf_jw_raw(w, t->samples && !t->sw.err ? t->samples : "[]");
  bf_jw_end(w);
  bf_jw_pad(w, "\n");
  table_open(w, "frameTable", frame_cols, NCOLS(frame_cols));
  for (size_t i = 0; i < t->nframes; i++) {
    bf_jw_arr(w);
    bf_jw_int(w, (long long)i);
    bf_jw_bool(w, 0);
    bf_jw_null(w);
    bf_jw_null(w);
    bf_jw_int(w, t->frames[i].fid >= 0 && t->frames[i].line > 0 ? (long long)t->frames[i].line : 0LL);
    bf_jw_null(w);
    bf_jw_int(w, t->frames[i].fid >= 0 ? 0 : 1);
    bf_jw_int(w, 0);
    bf_jw_end(w);
  }
  bf_jw_end(w);
  bf_jw_end(w);
  bf_jw_pad(w, "\n");
  table_open(w, "stackTable", stack_cols, NCOLS(stack_cols));
  for (size_t i = 0; i < t->nstacks; i++) {
    bf_jw_arr(w);
    if (t->prefix[i] < 0) bf_jw_null(w);
    else bf_jw_int(w, t->prefix[i]);
    bf_jw_int(w, t->frame[i]);
    bf_jw_end(w);
  }
  bf_jw_end(w);
  bf_jw_end(w);
  bf_jw_pad(w, "\n");
  bf_jw_key(w, "stringTable");
  bf_jw_arr(w);
  for (size_t i = 0; i < t->nframes; i++) {
    char loc[2048];
    if (t->frames[i].fid < 0) {
      snprintf(loc, sizeof loc, "%s", BF_NO_PYTHON_FRAME);
    } else {
      bf_function_ref ref;
      int rc = bf_store_function_get(s, t->frames[i].fid, &ref);
      if (rc) return rc;
      /* "name (file:line)": the profiler shows the file as the frame's origin */
      if (bf_ident_is_unknown(ref.file, ref.firstlineno)) snprintf(loc, sizeof loc, "%s", ref.qualname);
      else snprintf(loc, sizeof loc, "%s (%s:%lld)", ref.qualname, ref.file, (long long)ref.firstlineno);
    }
    bf_jw_str(w, loc);
  }
  bf_jw_end(w);
  bf_jw_end(w);
  return 0;
}

/* The profile's meta object (what the profiler asks of every profile). */
static void write_meta(bf_jw *w, const bf_session_info *info, int64_t session_id) {
  double interval_ms = info->rate_hz > 0 ? 1e3 / info->rate_hz : 1;
  bf_jw_key(w, "meta");
  bf_jw_obj(w);
  bf_jw_kint(w, "version", GECKO_VERSION);
  bf_jw_key(w, "startTime");
  bf_jw_numf(w, "%.3f", (double)info->start_ns / 1e6);
  bf_jw_knull(w, "shutdownTime");
  bf_jw_key(w, "interval");
  bf_jw_numf(w, "%.6g", interval_ms);
  bf_jw_key(w, "categories");
  bf_jw_arr(w);
  static const char *const cats[][2] = {{"Python", "yellow"}, {"Other", "grey"}};
  for (size_t i = 0; i < 2; i++) {
    bf_jw_obj(w);
    bf_jw_kstr(w, "name", cats[i][0]);
    bf_jw_kstr(w, "color", cats[i][1]);
    bf_jw_key(w, "subcategories");
    bf_jw_arr(w);
    bf_jw_str(w, "Other");
    bf_jw_end(w);
    bf_jw_end(w);
  }
  bf_jw_end(w);
  bf_jw_key(w, "markerSchema");
  bf_jw_arr(w);
  bf_jw_end(w);
  static const char *const zero[] = {"stackwalk", "debug", "gcpoison", "asyncstack", "processType"};
  for (size_t i = 0; i < NCOLS(zero); i++) bf_jw_kint(w, zero[i], 0);
  bf_jw_kstr(w, "platform", "Linux");
  static const char *const blank[] = {"oscpu", "misc", "abi", "toolkit"};
  for (size_t i = 0; i < NCOLS(blank); i++) bf_jw_kstr(w, blank[i], "");
  char product[160];
  snprintf(product, sizeof product, "bifocal session %lld (python %s, %s clock)", (long long)session_id,
           info->python_version ? info->python_version : "?", info->clock ? info->clock : "?");
  bf_jw_kstr(w, "product", product);
  bf_jw_kstr(w, "appBuildID", "");
  bf_jw_kstr(w, "sourceURL", "");
  bf_jw_kint(w, "physicalCPUs", 0);
  bf_jw_kint(w, "logicalCPUs", 0);
  bf_jw_kbool(w, "symbolicated", 1);
  bf_jw_end(w);
  static const char *const none[] = {"libs", "pages", "pausedRanges", "processes"};
  for (size_t i = 0; i < NCOLS(none); i++) {
    bf_jw_key(w, none[i]);
    bf_jw_arr(w);
    bf_jw_end(w);
  }
}

int bf_export_gecko(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_session_info *info = NULL;
  int rc = bf_store_session_get(s, session_id, &info);
  if (rc) return rc;
  bf_thread_ref *th = NULL;
  size_t nth = 0;
  bf_q_cursor *c = NULL;
  bf_q_frames *fc = NULL;
  gthread t = {0};
  bf_jw w;
  bf_jw_init(&w, out);
  bf_jw_hold(&w); /* nothing else writes to out until the last '\n' */
  if (bf_q_kind_of(info) != BF_Q_SAMPLED) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld is %s: the gecko export needs a sampled session (samples with times)",
                       (long long)session_id, bf_q_kind_of(info) == BF_Q_TRACED ? "traced" : "imported");
    goto out;
  }
  if ((rc = bf_store_threads(s, session_id, &th, &nth))) goto out;
  if ((rc = bf_q_timeline_open(s, session_id, f, &c))) goto out;
  bf_jw_obj(&w);
  write_meta(&w, info, session_id);
  bf_jw_key(&w, "threads");
  bf_jw_arr(&w);
  const bf_sample *smp;
  int64_t thread = -1;
  long long pid = info->pid > 0 ? (long long)info->pid : 0;
  while ((rc = bf_q_timeline_next(c, &smp)) == 1) {
    if (smp->thread_id != thread) {
      if (thread >= 0) {
        const bf_thread_ref *tr = NULL;
        for (size_t k = 0; k < nth; k++)
          if (th[k].id == thread) tr = &th[k];
        if ((rc = write_thread(s, &t, tr, pid, &w))) goto out;
        gthread_reset(&t);
      }
      thread = smp->thread_id;
      if (!(t.sf = open_memstream(&t.samples, &t.samples_len))) {
        rc = -ENOMEM;
        goto out;
      }
      bf_jw_init(&t.sw, t.sf);
      bf_jw_hold(&t.sw); /* sf is read once the array is closed */
      bf_jw_arr(&t.sw);
    }
    /* a stack seen before in this thread is one lookup, not one per frame
     * (the per-frame lookups missed the cache and were 80% of an export of
     * 20,000 distinct stacks); the walk adds nothing the second time, so
     * the tables come out the same */
    int64_t stack = -1, fr, *seen = bf_map3_get(&t.bysid, smp->stack_id, 0, 0);
    if (seen) {
      stack = *seen;
    } else {
      const int64_t *fids, *lines;
      size_t nf;
      if ((rc = bf_q_frames_get(s, &fc, smp->stack_id, &fids, &lines, &nf))) goto out;
      if (nf == 0) {
        if ((rc = frame_of(&t, -1, 0, &fr)) || (rc = stack_of(&t, -1, fr, &stack))) goto out;
      }
      for (size_t d = 0; d < nf; d++)
        if ((rc = frame_of(&t, fids[d], lines[d], &fr)) || (rc = stack_of(&t, stack, fr, &stack))) goto out;
      if (bf_map3_put(&t.bysid, smp->stack_id, 0, 0, stack)) {
        rc = -ENOMEM;
        goto out;
      }
    }
    uint32_t n = smp->count ? smp->count : 1;
    if (n > GECKO_MAX_REPEAT) n = GECKO_MAX_REPEAT;
    for (uint32_t k = 0; k < n; k++) {
      bf_jw_arr(&t.sw);
      bf_jw_int(&t.sw, stack);
      bf_jw_numf(&t.sw, "%.3f", (double)smp->ts_ns / 1e6);
      bf_jw_int(&t.sw, 0);
      bf_jw_end(&t.sw);
    }
  }
  if (rc < 0) goto out;
  rc = 0;
  if (thread >= 0) {
    const bf_thread_ref *tr = NULL;
    for (size_t k = 0; k < nth; k++)
      if (th[k].id == thread) tr = &th[k];
    if ((rc = write_thread(s, &t, tr, pid, &w))) goto out;
  }
  bf_jw_end(&w);
  bf_jw_end(&w);
  fputc('\n', out);
out:
  bf_jw_flush(&w);
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  gthread_reset(&t);
  bf_q_timeline_close(c);
  bf_q_frames_free(fc);
  bf_thread_refs_free(th, nth);
  bf_session_info_free(info);
  return rc;
}
