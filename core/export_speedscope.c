/* export_speedscope.c — speedscope's JSON file format: shared frames (one per
 * function), one "sampled" profile per thread with aggregated stacks and
 * weights (ns, or samples for imports). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "util.h"
#include "views.h"
#include "views_int.h"

int bf_export_speedscope(bf_store *s, int64_t session_id, const bf_sample_filter *f, FILE *out) {
  bf_wstacks *w = NULL;
  int rc = bf_wstacks_load(s, session_id, f, &w);
  if (rc) return rc;
  bf_map3 fidx = {0};
  int64_t *order = NULL;
  size_t nfn = 0, cap = 0;
  /* frame index per function, in first-seen order */
  for (size_t i = 0; i < w->nf; i++) {
    if (bf_map3_get(&fidx, w->fids[i], 0, 0)) continue;
    if (nfn == cap) {
      cap = cap ? cap * 2 : 256;
      int64_t *no = realloc(order, cap * sizeof *no);
      if (!no) {
        rc = -ENOMEM;
        goto out;
      }
      order = no;
    }
    order[nfn] = w->fids[i];
    if (bf_map3_put(&fidx, w->fids[i], 0, 0, (int64_t)nfn)) {
      rc = -ENOMEM;
      goto out;
    }
    nfn++;
  }
  int ns = !bf_session_is(w->info, "imported"); /* sampled and traced weights are ns; imports count */
  fputs("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"name\":", out);
  char name[128];
  snprintf(name, sizeof name, "bifocal session %lld%s%s", (long long)session_id, w->info->label ? " — " : "",
           w->info->label ? w->info->label : "");
  bf_json_str(out, name);
  fputs(",\"exporter\":\"bifocal " BF_VERSION "\",\"activeProfileIndex\":0,\"shared\":{\"frames\":[", out);
  for (size_t i = 0; i < nfn; i++) {
    bf_function_ref ref;
    if ((rc = bf_store_function_get(s, order[i], &ref))) goto out;
    if (i) fputc(',', out);
    fputs("{\"name\":", out);
    bf_json_str(out, ref.qualname);
    fputs(",\"file\":", out);
    bf_json_str(out, ref.file);
    if (ref.firstlineno > 0) fprintf(out, ",\"line\":%lld", (long long)ref.firstlineno);
    fputc('}', out);
  }
  fputs("]},\"profiles\":[", out);
  int first = 1;
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
    if (!first) fputc(',', out);
    first = 0;
    fputs("{\"type\":\"sampled\",\"name\":", out);
    bf_json_str(out, lb);
    fprintf(out, ",\"unit\":\"%s\",\"startValue\":0,\"endValue\":", ns ? "nanoseconds" : "none");
    bf_json_num(out, end);
    fputs(",\"samples\":[", out);
    int fs = 1;
    for (size_t i = 0; i < w->n; i++) {
      const bf_wstack *st = &w->v[i];
      if (st->thread != (int32_t)t) continue;
      if (!fs) fputc(',', out);
      fs = 0;
      fputc('[', out);
      for (uint32_t d = 0; d < st->depth; d++)
        fprintf(out, d ? ",%lld" : "%lld", (long long)*bf_map3_get(&fidx, w->fids[st->off + d], 0, 0));
      fputc(']', out);
    }
    fputs("],\"weights\":[", out);
    fs = 1;
    for (size_t i = 0; i < w->n; i++) {
      const bf_wstack *st = &w->v[i];
      if (st->thread != (int32_t)t) continue;
      if (!fs) fputc(',', out);
      fs = 0;
      bf_json_num(out, ns ? st->weight : (double)st->count);
    }
    fputs("]}", out);
  }
  fputs("]}\n", out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_map3_free(&fidx);
  free(order);
  bf_wstacks_free(w);
  return rc;
}
