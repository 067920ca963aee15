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
  gframe *frames;
  size_t nframes, fcap;
  int64_t *prefix, *frame; /* stack table */
  size_t nstacks, scap, scap2;
  char *samples;           /* the samples' JSON rows */
  size_t samples_len;
  FILE *sf;
  size_t nsamples;
} gthread;

static void gthread_reset(gthread *t) {
  bf_map3_free(&t->fidx);
  bf_map3_free(&t->sidx);
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

/* One thread object; the string table holds each frame's location, in frame order. */
static int write_thread(bf_store *s, gthread *t, const bf_thread_ref *th, int64_t pid, int first, FILE *out) {
  fflush(t->sf);
  char tname[160];
  if (th && th->name) snprintf(tname, sizeof tname, "%s", th->name);
  else snprintf(tname, sizeof tname, "thread %lld", th ? (long long)th->native_tid : 0LL);
  fputs(first ? "\n{\"name\":" : ",\n{\"name\":", out);
  bf_json_str(out, tname);
  fprintf(out,
          ",\"registerTime\":0,\"unregisterTime\":null,\"processType\":\"default\",\"processName\":\"python\","
          "\"tid\":%lld,\"pid\":%lld,"
          "\"markers\":{\"schema\":{\"name\":0,\"startTime\":1,\"endTime\":2,\"phase\":3,\"category\":4,\"data\":5},"
          "\"data\":[]},"
          "\"samples\":{\"schema\":{\"stack\":0,\"time\":1,\"eventDelay\":2},\"data\":[",
          th ? (long long)th->native_tid : 0LL, (long long)pid);
  if (t->samples_len) fwrite(t->samples, 1, t->samples_len, out);
  fputs("]},\n\"frameTable\":{\"schema\":{\"location\":0,\"relevantForJS\":1,\"innerWindowID\":2,"
        "\"implementation\":3,\"line\":4,\"column\":5,\"category\":6,\"subcategory\":7},\"data\":[",
        out);
  for (size_t i = 0; i < t->nframes; i++)
    fprintf(out, "%s[%zu,false,null,null,%lld,null,%d,0]", i ? "," : "", i,
            t->frames[i].fid >= 0 && t->frames[i].line > 0 ? (long long)t->frames[i].line : 0LL,
            t->frames[i].fid >= 0 ? 0 : 1);
  fputs("]},\n\"stackTable\":{\"schema\":{\"prefix\":0,\"frame\":1},\"data\":[", out);
  for (size_t i = 0; i < t->nstacks; i++) {
    if (t->prefix[i] < 0) fprintf(out, "%s[null,%lld]", i ? "," : "", (long long)t->frame[i]);
    else fprintf(out, "%s[%lld,%lld]", i ? "," : "", (long long)t->prefix[i], (long long)t->frame[i]);
  }
  fputs("]},\n\"stringTable\":[", out);
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
    if (i) fputc(',', out);
    bf_json_str(out, loc);
  }
  fputs("]}", out);
  return 0;
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
  if (bf_q_kind_of(info) != BF_Q_SAMPLED) {
    rc = bf_store_fail(s, -ENODATA,
                       "session %lld is %s: the gecko export needs a sampled session (samples with times)",
                       (long long)session_id, bf_q_kind_of(info) == BF_Q_TRACED ? "traced" : "imported");
    goto out;
  }
  if ((rc = bf_store_threads(s, session_id, &th, &nth))) goto out;
  if ((rc = bf_q_timeline_open(s, session_id, f, &c))) goto out;
  double interval_ms = info->rate_hz > 0 ? 1e3 / info->rate_hz : 1;
  fprintf(out, "{\"meta\":{\"version\":%d,\"startTime\":%.3f,\"shutdownTime\":null,\"interval\":%.6g,",
          GECKO_VERSION, (double)info->start_ns / 1e6, interval_ms);
  fputs("\"categories\":[{\"name\":\"Python\",\"color\":\"yellow\",\"subcategories\":[\"Other\"]},"
        "{\"name\":\"Other\",\"color\":\"grey\",\"subcategories\":[\"Other\"]}],"
        "\"markerSchema\":[],\"stackwalk\":0,\"debug\":0,\"gcpoison\":0,\"asyncstack\":0,\"processType\":0,"
        "\"platform\":\"Linux\",\"oscpu\":\"\",\"misc\":\"\",\"abi\":\"\",\"toolkit\":\"\",\"product\":",
        out);
  char product[160];
  snprintf(product, sizeof product, "bifocal session %lld (python %s, %s clock)", (long long)session_id,
           info->python_version ? info->python_version : "?", info->clock ? info->clock : "?");
  bf_json_str(out, product);
  fputs(",\"appBuildID\":\"\",\"sourceURL\":\"\",\"physicalCPUs\":0,\"logicalCPUs\":0,\"symbolicated\":true},"
        "\"libs\":[],\"pages\":[],\"pausedRanges\":[],\"processes\":[],\"threads\":[",
        out);
  const bf_sample *smp;
  int64_t thread = -1;
  int nthreads_out = 0;
  long long pid = info->pid > 0 ? (long long)info->pid : 0;
  while ((rc = bf_q_timeline_next(c, &smp)) == 1) {
    if (smp->thread_id != thread) {
      if (thread >= 0) {
        const bf_thread_ref *tr = NULL;
        for (size_t k = 0; k < nth; k++)
          if (th[k].id == thread) tr = &th[k];
        if ((rc = write_thread(s, &t, tr, pid, nthreads_out++ == 0, out))) goto out;
        gthread_reset(&t);
      }
      thread = smp->thread_id;
      if (!(t.sf = open_memstream(&t.samples, &t.samples_len))) {
        rc = -ENOMEM;
        goto out;
      }
    }
    const int64_t *fids, *lines;
    size_t nf;
    if ((rc = bf_q_frames_get(s, &fc, smp->stack_id, &fids, &lines, &nf))) goto out;
    int64_t stack = -1, fr;
    if (nf == 0) {
      if ((rc = frame_of(&t, -1, 0, &fr)) || (rc = stack_of(&t, -1, fr, &stack))) goto out;
    }
    for (size_t d = 0; d < nf; d++)
      if ((rc = frame_of(&t, fids[d], lines[d], &fr)) || (rc = stack_of(&t, stack, fr, &stack))) goto out;
    uint32_t n = smp->count ? smp->count : 1;
    if (n > GECKO_MAX_REPEAT) n = GECKO_MAX_REPEAT;
    for (uint32_t k = 0; k < n; k++)
      fprintf(t.sf, "%s[%lld,%.3f,0]", t.nsamples++ ? "," : "", (long long)stack, (double)smp->ts_ns / 1e6);
  }
  if (rc < 0) goto out;
  rc = 0;
  if (thread >= 0) {
    const bf_thread_ref *tr = NULL;
    for (size_t k = 0; k < nth; k++)
      if (th[k].id == thread) tr = &th[k];
    if ((rc = write_thread(s, &t, tr, pid, nthreads_out++ == 0, out))) goto out;
  }
  fputs("]}\n", out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  gthread_reset(&t);
  bf_q_timeline_close(c);
  bf_q_frames_free(fc);
  bf_thread_refs_free(th, nth);
  bf_session_info_free(info);
  return rc;
}
