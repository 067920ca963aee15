/* view_flame_svg.c — the flame graph as one self-contained SVG, in the shape
 * of flamegraph.pl's and py-spy's: root at the bottom, one <rect> per function
 * path, a <title> per frame (samples, share, 95% interval), and inline JS for
 * search and click-to-zoom. Without JS (an <img>, a ticket) it is a plain image. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ident.h"
#include "map.h"
#include "opnames.h"
#include "profile.h"
#include "query.h"
#include "store_int.h"
#include "views.h"
#include "views_int.h"
#include "vec.h"

#define SVG_WIDTH 1200.0
#define SVG_PAD 10.0
#define FRAME_H 16.0
#define HEAD_H 60.0
#define FOOT_H 24.0
#define FONT_PX 12.0
#define CHAR_PX (FONT_PX * 0.59)
/* flamegraph.pl's --minwidth: narrower frames are left out (counted in the subtitle) */
#define MIN_WIDTH_PX 0.1

typedef struct snode {
  int64_t parent, fid; /* fid -1: the root; -2: samples without a Python frame */
  int64_t first_child, next;
  double self_v, total_v, self_c, total_c;
  int depth;
} snode;

typedef struct stree {
  snode *v;
  size_t n, cap;
  bf_map3 idx; /* (parent, fid) → node */
} stree;

static int child_of(stree *t, int64_t parent, int64_t fid, int64_t *out) {
  int64_t *hit = bf_map3_get(&t->idx, parent, fid, 0);
  if (hit) {
    *out = *hit;
    return 0;
  }
  if (bf_vec_grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v, 1024)) return -ENOMEM;
  int64_t i = (int64_t)t->n++;
  t->v[i] = (snode){parent, fid, -1, -1, 0, 0, 0, 0, parent >= 0 ? t->v[parent].depth + 1 : 0};
  if (parent >= 0) { /* append: children keep creation order */
    int64_t *link = &t->v[parent].first_child;
    while (*link >= 0) link = &t->v[*link].next;
    *link = i;
  }
  *out = i;
  return bf_map3_put(&t->idx, parent, fid, 0, i) ? -ENOMEM : 0;
}

/* Text for XML: & < > " ' as entities; bytes XML 1.0 cannot carry (controls
 * such as ESC and BEL, invalid or overlong UTF-8, surrogates, U+FFFE/FFFF)
 * become U+FFFD. At most max code points (0: all), "…" marks a cut. */
static void xml_str(FILE *out, const char *str, size_t max) {
  const unsigned char *s = (const unsigned char *)(str ? str : "");
  size_t cps = 0;
  while (*s) {
    if (max && cps + 1 >= max && s[0] && s[1]) {
      fputs("\xe2\x80\xa6", out);
      return;
    }
    unsigned c = s[0];
    size_t len = 1;
    uint32_t cp = c;
    int ok = 1;
    if (c >= 0x80) {
      len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
      if (!len || c > 0xF4) {
        ok = 0;
        len = 1;
      } else {
        cp = c & (0x3F >> (len - 1));
        for (size_t k = 1; k < len; k++) {
          if ((s[k] & 0xC0) != 0x80) {
            ok = 0;
            len = k;
            break;
          }
          cp = cp << 6 | (s[k] & 0x3F);
        }
        if (ok && ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                   (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF))
          ok = 0;
      }
    } else if ((c < 0x20 && c != '\t') || c == 0x7F) {
      ok = 0;
    }
    if (!ok) fputs("\xef\xbf\xbd", out);
    else if (c == '&') fputs("&amp;", out);
    else if (c == '<') fputs("&lt;", out);
    else if (c == '>') fputs("&gt;", out);
    else if (c == '"') fputs("&quot;", out);
    else if (c == '\'') fputs("&#39;", out);
    else fwrite(s, 1, len, out);
    s += len;
    cps++;
  }
}

/* Warm colours as flamegraph.pl's "hot" palette, from a hash of the name so
 * one function has one colour everywhere. */
static void color_of(const char *name, int *r, int *g, int *b) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  *r = 205 + (int)(h % 51);
  *g = (int)((h >> 8) % 231);
  *b = (int)((h >> 16) % 56);
}

static const char svg_script[] =
    "<script type=\"text/ecmascript\"><![CDATA[\n"
    "'use strict';\n"
    "var svg=document.documentElement, frames=[], details, matchedtxt, zoomed=null;\n"
    "function init(){details=document.getElementById('details').firstChild;"
    "matchedtxt=document.getElementById('matched');"
    "frames=Array.prototype.slice.call(document.querySelectorAll('g.f'));"
    "frames.forEach(function(g){g.addEventListener('mouseover',function(){details.nodeValue=g.querySelector('title').textContent;});"
    "g.addEventListener('mouseout',function(){details.nodeValue=' ';});"
    "g.addEventListener('click',function(){zoom(g);});});"
    "document.getElementById('search').addEventListener('click',search_prompt);"
    "document.getElementById('reset').addEventListener('click',function(){unzoom();clear_search();});}\n"
    "function attr(g,n){return parseFloat(g.querySelector('rect').getAttribute(n));}\n"
    "function place(g,x,w){var r=g.querySelector('rect'),t=g.querySelector('text');r.setAttribute('x',x);r.setAttribute('width',Math.max(w,0));"
    "t.setAttribute('x',x+3);var full=g.getAttribute('data-name'),n=Math.floor((w-6)/" "7.08" ");"
    "t.textContent=n<3?'':(full.length>n?full.slice(0,n-2)+'..':full);}\n"
    "function zoom(g){var x0=parseFloat(g.getAttribute('data-x')),w0=parseFloat(g.getAttribute('data-w')),y0=attr(g,'y');"
    "var L=" "10" ",W=svg.width.baseVal.value-20,k=W/w0;zoomed=g;"
    "frames.forEach(function(f){var x=parseFloat(f.getAttribute('data-x')),w=parseFloat(f.getAttribute('data-w')),y=attr(f,'y');"
    "var inside=x>=x0-1e-6&&x+w<=x0+w0+1e-6;var below=y>=y0;"
    "if(inside||(below&&x<=x0+1e-6&&x+w>=x0+w0-1e-6)){f.style.display='';place(f,L+(Math.max(x,x0)-x0)*k,(Math.min(x+w,x0+w0)-Math.max(x,x0))*k);}"
    "else f.style.display='none';});"
    "document.getElementById('reset').style.opacity='1';}\n"
    "function unzoom(){zoomed=null;frames.forEach(function(f){f.style.display='';"
    "place(f,parseFloat(f.getAttribute('data-x')),parseFloat(f.getAttribute('data-w')));});"
    "document.getElementById('reset').style.opacity='0';}\n"
    "function clear_search(){frames.forEach(function(f){var r=f.querySelector('rect');r.setAttribute('fill',r.getAttribute('data-fill'));});"
    "matchedtxt.firstChild.nodeValue=' ';}\n"
    "function search_prompt(){var term=window.prompt('Search for (regular expression):','');if(term!==null&&term!=='')search(term);}\n"
    "function search(term){var re;try{re=new RegExp(term);}catch(e){matchedtxt.firstChild.nodeValue='bad regular expression';return;}"
    "var total=parseFloat(svg.getAttribute('data-total')),spans=[];"
    "frames.forEach(function(f){var r=f.querySelector('rect');if(!re.test(f.getAttribute('data-name'))){r.setAttribute('fill',r.getAttribute('data-fill'));return;}"
    "r.setAttribute('fill','rgb(230,0,230)');spans.push([parseFloat(f.getAttribute('data-x')),parseFloat(f.getAttribute('data-w'))]);});"
    "spans.sort(function(a,b){return a[0]-b[0]||b[1]-a[1];});var end=-1,sum=0;"
    "spans.forEach(function(s){if(s[0]>=end-1e-9){sum+=s[1];end=s[0]+s[1];}});"
    "var W=svg.width.baseVal.value-20;"
    "matchedtxt.firstChild.nodeValue='Matched: '+(100*sum/W).toFixed(1)+'%';document.getElementById('reset').style.opacity='1';}\n"
    "window.addEventListener('load',init);\n"
    "]]></script>\n";

/* Writes the frames of t depth first. OUT: *skipped (frames left out). */
static int write_frames(bf_store *s, const stree *t, const bf_wstacks *w, double scale, double root_v,
                        double img_h, FILE *out, size_t *skipped) {
  int64_t *stk = malloc(t->n * sizeof *stk);
  double *xs = malloc(t->n * sizeof *xs);
  if (!stk || !xs) {
    free(stk);
    free(xs);
    return -ENOMEM;
  }
  size_t sp = 0;
  stk[sp] = 0;
  xs[sp++] = SVG_PAD;
  int rc = 0;
  double n_samples = (double)w->total_count;
  while (sp && !rc) {
    sp--;
    int64_t i = stk[sp];
    double x = xs[sp];
    const snode *nd = &t->v[i];
    double wpx = nd->total_v * scale;
    if (wpx < MIN_WIDTH_PX) {
      (*skipped)++;
      continue;
    }
    char name[1024];
    const char *qual = "all", *file = NULL;
    int64_t first = 0;
    char opb[96];
    if (nd->fid == -2) {
      qual = BF_NO_PYTHON_FRAME;
    } else if (BF_WSTACK_OP_OF(nd->fid) >= 0) { /* record --opcodes: the leaf's instruction */
      int op = BF_WSTACK_OP_OF(nd->fid);
      const char *on = bf_opname(w->info ? w->info->python_version : NULL, op, NULL);
      if (on)
        snprintf(opb, sizeof opb, "[%s]", on);
      else
        snprintf(opb, sizeof opb, "[opcode %d]", op);
      qual = opb;
    } else if (nd->fid >= 0) {
      bf_function_ref ref;
      if ((rc = bf_store_function_get(s, nd->fid, &ref))) break;
      qual = ref.qualname;
      file = ref.file;
      first = ref.firstlineno;
    }
    if (file && *file && !bf_ident_is_unknown(file, first))
      snprintf(name, sizeof name, "%s (%s:%lld)", qual, bf_short_file(file, 60), (long long)first);
    else
      snprintf(name, sizeof name, "%s", qual);
    double share = root_v > 0 ? nd->total_v / root_v : 0, lo, hi;
    bf_wilson(share * n_samples, n_samples, &lo, &hi);
    int r, g, b;
    color_of(qual, &r, &g, &b);
    if (nd->fid == -1) r = 220, g = 100, b = 60;
    double y = img_h - FOOT_H - (nd->depth + 1) * FRAME_H;
    fputs("<g class=\"f\" data-name=\"", out);
    xml_str(out, name, 0);
    fprintf(out, "\" data-x=\"%.2f\" data-w=\"%.2f\"><title>", x, wpx);
    xml_str(out, name, 0);
    if (w->by_weight && bf_q_kind_of(w->info) != BF_Q_IMPORTED)
      fprintf(out, " (%.3f s, ", nd->total_v / 1e9);
    else
      fprintf(out, " (%.0f samples, ", nd->total_v);
    fprintf(out, "%.2f%%, 95%% %.2f–%.2f%%)</title>", share * 100, lo * 100, hi * 100);
    fprintf(out,
            "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"rgb(%d,%d,%d)\" "
            "data-fill=\"rgb(%d,%d,%d)\" rx=\"2\" ry=\"2\"/><text x=\"%.2f\" y=\"%.1f\">",
            x, y, wpx, FRAME_H - 1, r, g, b, r, g, b, x + 3, y + FRAME_H - 4.5);
    size_t fit = wpx > 6 ? (size_t)((wpx - 6) / CHAR_PX) : 0;
    if (fit >= 3) xml_str(out, name, fit);
    fputs("</text></g>\n", out);
    /* children pushed right to left so the first is drawn first */
    size_t mark = sp;
    double cx = x;
    for (int64_t c = nd->first_child; c >= 0; c = t->v[c].next) {
      stk[sp] = c;
      xs[sp++] = cx;
      cx += t->v[c].total_v * scale;
    }
    for (size_t a = mark, z = sp; a + 1 < z; a++, z--) {
      int64_t ti = stk[a];
      double tx = xs[a];
      stk[a] = stk[z - 1];
      xs[a] = xs[z - 1];
      stk[z - 1] = ti;
      xs[z - 1] = tx;
    }
  }
  free(stk);
  free(xs);
  return rc;
}

int bf_view_flame_svg(bf_store *s, int64_t session_id, const bf_view_opts *o, FILE *out) {
  bf_wstacks *w = NULL;
  stree t = {0};
  bf_sample_filter fo = o ? o->filter : (bf_sample_filter){0};
  fo.by_opcode = 1;   /* record --opcodes: leaf instructions as frames */
  fo.kernel_leaf = 1; /* the kernel lens's state as a leaf frame */
  int rc = bf_wstacks_load(s, session_id, &fo, &w);
  if (rc) return rc;
  int64_t root, node;
  if ((rc = child_of(&t, -1, -1, &root))) goto out;
  for (size_t i = 0; i < w->n; i++) {
    const bf_wstack *st = &w->v[i];
    node = root;
    for (uint32_t d = 0; d < st->depth && !rc; d++) rc = child_of(&t, node, w->fids[st->off + d], &node);
    if (rc) goto out;
    t.v[node].self_v += bf_wstack_value(w, st);
  }
  double empty_v = w->by_weight ? w->empty_weight : (double)w->empty_count;
  if (empty_v > 0) {
    if ((rc = child_of(&t, root, -2, &node))) goto out;
    t.v[node].self_v += empty_v;
  }
  int max_depth = 0;
  for (size_t i = 0; i < t.n; i++) {
    t.v[i].total_v = t.v[i].self_v;
    if (t.v[i].depth > max_depth) max_depth = t.v[i].depth;
  }
  for (size_t i = t.n; i-- > 1;) t.v[t.v[i].parent].total_v += t.v[i].total_v; /* children after parents */
  double root_v = t.v[0].total_v;
  double scale = root_v > 0 ? (SVG_WIDTH - 2 * SVG_PAD) / root_v : 0;
  double img_h = HEAD_H + (max_depth + 1) * FRAME_H + FOOT_H;
  char sub[1024];
  bf_session_line(w->info, 1, sub, sizeof sub);
  size_t n = strlen(sub);
  if (!w->traced) snprintf(sub + n, sizeof sub - n, " · %lld samples", (long long)w->total_count);
  else snprintf(sub + n, sizeof sub - n, " · paths rebuilt from caller→callee edges (approximate)");

  fprintf(out,
          "<?xml version=\"1.0\" standalone=\"no\"?>\n"
          "<svg version=\"1.1\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
          "xmlns=\"http://www.w3.org/2000/svg\" data-total=\"%.6g\">\n"
          "<style type=\"text/css\">text{font-family:Verdana,sans-serif;font-size:%.0fpx;fill:rgb(0,0,0);}"
          "g.f:hover rect{stroke:black;stroke-width:0.5;cursor:pointer;}"
          "#title{font-size:17px;}#search,#reset{cursor:pointer;}#reset{opacity:0;}</style>\n",
          SVG_WIDTH, img_h, SVG_WIDTH, img_h, root_v, FONT_PX);
  fputs(svg_script, out);
  fprintf(out, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"rgb(248,248,240)\"/>\n", SVG_WIDTH, img_h);
  fprintf(out, "<text id=\"title\" x=\"%.0f\" y=\"24\" text-anchor=\"middle\">bifocal flame graph — session %lld</text>\n",
          SVG_WIDTH / 2, (long long)session_id);
  fprintf(out, "<text id=\"subtitle\" x=\"%.0f\" y=\"44\" text-anchor=\"middle\">", SVG_WIDTH / 2);
  xml_str(out, sub, 0);
  fputs("</text>\n", out);
  fprintf(out, "<text id=\"reset\" x=\"%.0f\" y=\"24\">Reset</text>\n", SVG_PAD);
  fprintf(out, "<text id=\"search\" x=\"%.0f\" y=\"24\" text-anchor=\"end\">Search</text>\n", SVG_WIDTH - SVG_PAD);
  fprintf(out, "<text id=\"matched\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\"> </text>\n", SVG_WIDTH - SVG_PAD,
          img_h - 8);
  fprintf(out, "<text id=\"details\" x=\"%.0f\" y=\"%.0f\"> </text>\n", SVG_PAD, img_h - 8);
  size_t skipped = 0;
  if ((rc = write_frames(s, &t, w, scale, root_v, img_h, out, &skipped))) goto out;
  if (skipped)
    fprintf(out, "<!-- %zu frames narrower than %.1f px left out -->\n", skipped, MIN_WIDTH_PX);
  fputs("</svg>\n", out);
out:
  if (rc == -ENOMEM) bf_store_fail(s, rc, "out of memory");
  bf_map3_free(&t.idx);
  free(t.v);
  bf_wstacks_free(w);
  return rc;
}
