/*
 * uniclass.c: the Unicode classes of a split regex from utf8proc's tables.
 *
 * PCRE2 answers \p{L}, \s and \d from the Unicode tables it was built with
 * (Debian 12's 10.42: Unicode 14), so text with characters assigned since
 * then split differently from Hugging Face's tokenizers (Oniguruma,
 * Unicode 15: Kawi digits U+11F50..U+11F59 are \p{N} there, unassigned in
 * PCRE2's tables). Before PCRE2 compiles a pattern, each class below is
 * rewritten to hold exactly the code points utf8proc's tables
 * (utf8proc_unicode_version()) put in it:
 *   \p{X} \P{X} \pX \PX \p{^X}  X a general category (L, Lu, Ll, Lt, Lm,
 *                               Lo, L& or LC, M.., N.., P.., S.., Z.., C..)
 *   \s \S                       White_Space: Z, U+0009..U+000D, U+0085
 *                               (Oniguruma's; PCRE2's also has U+180E)
 *   \d \D                       Nd
 * Other properties (scripts, PCRE2's X.. classes) and \w, \b keep PCRE2's
 * tables.
 *
 * How: once per process, every code point of the planes Unicode assigns in
 * (0-3, 14) is put to PCRE2's general categories (one anchored match each,
 * ~0.27 M) and compared with utf8proc's; the few that differ (Unicode 15
 * over 14: ~4,500, mostly CJK Extension H, in a few dozen runs) patch
 * PCRE2's own class: \p{L} becomes [\p{L}<added>] where no code point
 * leaves the class, so matching costs what PCRE2's class costs plus a few
 * ranges. Where the patch cannot be written so (code points to remove from
 * a positive class, or to add to a negated one inside a class), the class
 * is written out whole as utf8proc's ranges, largest first (PCRE2 tries
 * the ranges above U+00FF in order: CJK and Hangul match at once).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/internal.h"

#define MAX_CP 0x10FFFFu

typedef struct run {
  uint32_t lo, hi; /* inclusive */
  uint8_t cat;     /* utf8proc_category_t */
} run;

typedef struct range {
  uint32_t lo, hi;
} range;

/* code points lo..hi: PCRE2's tables put them in category pcre, utf8proc's in ours */
typedef struct diff {
  uint32_t lo, hi;
  uint8_t pcre, ours;
} diff;

typedef struct list {
  void *p;
  size_t n, cap;
} list;

static struct {
  run *runs; /* utf8proc's categories, every code point (about 3,300 runs) */
  size_t n_runs;
  diff *diffs; /* where PCRE2's differ; NULL with diffs_ok false: unknown, every class written out */
  size_t n_diffs;
  bool diffs_ok;
} g;
static pthread_once_t g_diffs_once = PTHREAD_ONCE_INIT, g_runs_once = PTHREAD_ONCE_INIT;

/* The tables live as long as the process (made once, read by every
 * tokenizer), so they come from the C library, not ortep's counted heap. */
static bool grow(list *l, size_t elem) {
  if (l->n < l->cap) return true;
  size_t cap = l->cap ? 2 * l->cap : 1024;
  void *p = realloc(l->p, cap * elem);
  if (!p) return false;
  l->p = p, l->cap = cap;
  return true;
}

/* Appends a code point of category cat (as a run of its own or the last one
 * grown); false when out of memory. */
static bool add_run(list *l, uint32_t cp, uint8_t cat) {
  run *r = l->p;
  if (l->n && r[l->n - 1].cat == cat && r[l->n - 1].hi + 1 == cp) {
    r[l->n - 1].hi = cp;
    return true;
  }
  if (!grow(l, sizeof *r)) return false;
  ((run *)l->p)[l->n++] = (run){cp, cp, cat};
  return true;
}
static bool add_diff(list *l, uint32_t cp, uint8_t pcre, uint8_t ours) {
  diff *d = l->p;
  if (l->n && d[l->n - 1].pcre == pcre && d[l->n - 1].ours == ours && d[l->n - 1].hi + 1 == cp) {
    d[l->n - 1].hi = cp;
    return true;
  }
  if (!grow(l, sizeof *d)) return false;
  ((diff *)l->p)[l->n++] = (diff){cp, cp, pcre, ours};
  return true;
}

/* PCRE2's general category of each code point of the planes Unicode
 * assigns in (0-3, 14; the others hold private use alone, the same in every
 * version), by one anchored match of the alternatives below, whose group
 * numbers are utf8proc's category values (1 Lu .. 29 Co; none: Cn). */
static void find_diffs(void) {
  static const char alternatives[] =
      "(\\p{Lu})|(\\p{Ll})|(\\p{Lt})|(\\p{Lm})|(\\p{Lo})|(\\p{Mn})|(\\p{Mc})|(\\p{Me})|(\\p{Nd})|(\\p{Nl})|(\\p{No})|"
      "(\\p{Pc})|(\\p{Pd})|(\\p{Ps})|(\\p{Pe})|(\\p{Pi})|(\\p{Pf})|(\\p{Po})|(\\p{Sm})|(\\p{Sc})|(\\p{Sk})|(\\p{So})|"
      "(\\p{Zs})|(\\p{Zl})|(\\p{Zp})|(\\p{Cc})|(\\p{Cf})|(\\p{Cs})|(\\p{Co})";
  int err;
  PCRE2_SIZE at;
  pcre2_code *re =
      pcre2_compile((PCRE2_SPTR)alternatives, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED, &err, &at, NULL);
  pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
  if (!md) {
    pcre2_code_free(re);
    return;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  list l = {0};
  bool ok = true;
  for (uint32_t cp = 0; ok && cp <= 0xE0FFF; cp = cp == 0x3FFFF ? 0xE0000 : cp + 1) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue; /* surrogates: Cs in both, and no UTF-8 */
    uint8_t u8[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, u8);
    int rc = pcre2_match(re, u8, (PCRE2_SIZE)n, 0, PCRE2_NO_UTF_CHECK, md, NULL);
    uint8_t pcre = 0; /* Cn */
    if (rc > 1) {
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      for (int k = 1; k < rc && !pcre; k++)
        if (ov[2 * k] != PCRE2_UNSET) pcre = (uint8_t)k;
    }
    uint8_t ours = (uint8_t)utf8proc_category((utf8proc_int32_t)cp);
    if (pcre != ours) ok = add_diff(&l, cp, pcre, ours);
  }
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  if (!ok) {
    free(l.p);
    return;
  }
  g.diffs = l.p, g.n_diffs = l.n, g.diffs_ok = true;
}

/* utf8proc's categories as runs, for a class written out whole. */
static void build_runs(void) {
  list l = {0};
  bool ok = true;
  for (uint32_t cp = 0; ok && cp <= MAX_CP; cp++)
    ok = add_run(&l, cp, (uint8_t)utf8proc_category((utf8proc_int32_t)cp));
  if (!ok) {
    free(l.p);
    return;
  }
  g.runs = l.p, g.n_runs = l.n;
}

#define CAT(c) (1u << UTF8PROC_CATEGORY_##c)

/* A class the rewrite handles: the categories, extra code points, whether
 * it is negated, and the name PCRE2 knows it by. */
typedef struct cls {
  uint32_t mask;
  const uint32_t *extra;
  size_t n_extra;
  bool negate;
  const char *pcre_name;
} cls;

/* The categories a name stands for and PCRE2's name of them (false: not a
 * general category). */
static bool category(const char *name, size_t n, cls *c) {
  static const struct {
    const char *name, *pcre;
    uint32_t mask;
  } names[] = {
      {"L", "L", CAT(LU) | CAT(LL) | CAT(LT) | CAT(LM) | CAT(LO)},
      {"L&", "L&", CAT(LU) | CAT(LL) | CAT(LT)},
      {"LC", "L&", CAT(LU) | CAT(LL) | CAT(LT)},
      {"Lu", "Lu", CAT(LU)},
      {"Ll", "Ll", CAT(LL)},
      {"Lt", "Lt", CAT(LT)},
      {"Lm", "Lm", CAT(LM)},
      {"Lo", "Lo", CAT(LO)},
      {"M", "M", CAT(MN) | CAT(MC) | CAT(ME)},
      {"Mn", "Mn", CAT(MN)},
      {"Mc", "Mc", CAT(MC)},
      {"Me", "Me", CAT(ME)},
      {"N", "N", CAT(ND) | CAT(NL) | CAT(NO)},
      {"Nd", "Nd", CAT(ND)},
      {"Nl", "Nl", CAT(NL)},
      {"No", "No", CAT(NO)},
      {"P", "P", CAT(PC) | CAT(PD) | CAT(PS) | CAT(PE) | CAT(PI) | CAT(PF) | CAT(PO)},
      {"Pc", "Pc", CAT(PC)},
      {"Pd", "Pd", CAT(PD)},
      {"Ps", "Ps", CAT(PS)},
      {"Pe", "Pe", CAT(PE)},
      {"Pi", "Pi", CAT(PI)},
      {"Pf", "Pf", CAT(PF)},
      {"Po", "Po", CAT(PO)},
      {"S", "S", CAT(SM) | CAT(SC) | CAT(SK) | CAT(SO)},
      {"Sm", "Sm", CAT(SM)},
      {"Sc", "Sc", CAT(SC)},
      {"Sk", "Sk", CAT(SK)},
      {"So", "So", CAT(SO)},
      {"Z", "Z", CAT(ZS) | CAT(ZL) | CAT(ZP)},
      {"Zs", "Zs", CAT(ZS)},
      {"Zl", "Zl", CAT(ZL)},
      {"Zp", "Zp", CAT(ZP)},
      {"C", "C", CAT(CN) | CAT(CC) | CAT(CF) | CAT(CS) | CAT(CO)},
      {"Cc", "Cc", CAT(CC)},
      {"Cf", "Cf", CAT(CF)},
      {"Cs", "Cs", CAT(CS)},
      {"Co", "Co", CAT(CO)},
      {"Cn", "Cn", CAT(CN)},
  };
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (strlen(names[i].name) == n && !memcmp(names[i].name, name, n)) {
      c->mask = names[i].mask, c->pcre_name = names[i].pcre;
      return true;
    }
  return false;
}

/* The class an escape at p (after the backslash) names, and its length
 * (0: not one of ours, left as written). */
static size_t escape_class(const char *p, cls *c) {
  static const uint32_t space_extra[] = {0x9, 0xA, 0xB, 0xC, 0xD, 0x85};
  *c = (cls){0};
  if (*p == 's' || *p == 'S') {
    *c = (cls){CAT(ZS) | CAT(ZL) | CAT(ZP), space_extra, 6, *p == 'S', "Z"};
    return 1;
  }
  if (*p == 'd' || *p == 'D') {
    *c = (cls){CAT(ND), NULL, 0, *p == 'D', "Nd"};
    return 1;
  }
  if (*p != 'p' && *p != 'P') return 0;
  c->negate = *p == 'P';
  if (p[1] != '{') return p[1] && category(p + 1, 1, c) ? 2 : 0;
  const char *name = p + 2, *end = strchr(name, '}');
  if (!end) return 0;
  if (*name == '^') c->negate = !c->negate, name++;
  return category(name, (size_t)(end - name), c) ? (size_t)(end - p) + 1 : 0;
}

typedef struct text {
  char *p;
  size_t n, cap;
  bool oom;
} text;

static void put(text *t, const char *s, size_t n) {
  if (t->oom) return;
  if (t->n + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->n + n + 1) cap *= 2;
    char *grown = ortep__realloc(t->p, cap);
    if (!grown) {
      t->oom = true;
      return;
    }
    t->p = grown, t->cap = cap;
  }
  memcpy(t->p + t->n, s, n);
  t->n += n;
  t->p[t->n] = '\0';
}
static void put_str(text *t, const char *s) { put(t, s, strlen(s)); }

static void put_range(text *t, uint32_t lo, uint32_t hi) {
  char buf[32];
  int w = lo == hi ? snprintf(buf, sizeof buf, "\\x{%X}", lo) : snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", lo, hi);
  put(t, buf, (size_t)w);
}

static int by_size(const void *a, const void *b) {
  const range *x = a, *y = b;
  uint32_t nx = x->hi - x->lo, ny = y->hi - y->lo;
  if (nx != ny) return nx > ny ? -1 : 1;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The class written out whole: the ranges of its code points (ascending,
 * merged; with complement their complement), surrogates left out (PCRE2
 * refuses them in UTF mode), largest first. */
static void put_whole(text *t, const cls *c, bool complement) {
  pthread_once(&g_runs_once, build_runs);
  if (!g.runs) {
    t->oom = true;
    return;
  }
  range *r = ortep__malloc((g.n_runs + c->n_extra + 2) * 2 * sizeof *r);
  if (!r) {
    t->oom = true;
    return;
  }
  size_t n = 0, e = 0;
  for (size_t i = 0; i <= g.n_runs; i++) { /* runs and extras, both ascending, merged */
    while (e < c->n_extra && (i == g.n_runs || c->extra[e] < g.runs[i].lo)) {
      if (n && r[n - 1].hi + 1 >= c->extra[e])
        r[n - 1].hi = r[n - 1].hi > c->extra[e] ? r[n - 1].hi : c->extra[e];
      else
        r[n++] = (range){c->extra[e], c->extra[e]};
      e++;
    }
    if (i == g.n_runs || !(c->mask & (1u << g.runs[i].cat))) continue;
    if (n && r[n - 1].hi + 1 >= g.runs[i].lo)
      r[n - 1].hi = g.runs[i].hi > r[n - 1].hi ? g.runs[i].hi : r[n - 1].hi;
    else
      r[n++] = (range){g.runs[i].lo, g.runs[i].hi};
  }
  if (complement) { /* into the upper half, then back */
    range *u = r + n + 1;
    size_t m = 0;
    uint32_t next = 0;
    for (size_t i = 0; i < n; i++) {
      if (r[i].lo > next) u[m++] = (range){next, r[i].lo - 1};
      next = r[i].hi + 1;
    }
    if (next <= MAX_CP) u[m++] = (range){next, MAX_CP};
    memmove(r, u, m * sizeof *r);
    n = m;
  }
  size_t k = 0; /* the surrogates out */
  range *o = r + n;
  for (size_t i = 0; i < n; i++) {
    if (r[i].hi < 0xD800 || r[i].lo > 0xDFFF) {
      o[k++] = r[i];
      continue;
    }
    if (r[i].lo < 0xD800) o[k++] = (range){r[i].lo, 0xD7FF};
    if (r[i].hi > 0xDFFF) o[k++] = (range){0xE000, r[i].hi};
  }
  qsort(o, k, sizeof *o, by_size);
  for (size_t i = 0; i < k; i++) put_range(t, o[i].lo, o[i].hi);
  ortep__free(r);
}

/* Whether difference i enters the class (utf8proc puts it in, PCRE2 not:
 * into) or leaves it (the other way). */
static bool moved(const cls *c, size_t i, bool into) {
  bool ours = c->mask & (1u << g.diffs[i].ours), pcre = c->mask & (1u << g.diffs[i].pcre);
  return into ? ours && !pcre : pcre && !ours;
}
static bool moves(const cls *c, bool into) {
  for (size_t i = 0; i < g.n_diffs; i++)
    if (moved(c, i, into)) return true;
  return false;
}
static void put_moved(text *t, const cls *c, bool into) {
  for (size_t i = 0; i < g.n_diffs; i++)
    if (moved(c, i, into)) put_range(t, g.diffs[i].lo, g.diffs[i].hi);
}

/* The class c as PCRE2 is to read it, inside a character class or as one. */
static void put_class(text *t, const cls *c, bool in_class) {
  char prop[16];
  bool leaves = !g.diffs_ok || moves(c, false), enters = !g.diffs_ok || moves(c, true);
  if (!leaves && (!in_class || !c->negate)) { /* PCRE2's class, what enters it and the extras */
    snprintf(prop, sizeof prop, "\\p{%s}", c->pcre_name);
    if (!in_class) put_str(t, c->negate ? "[^" : "[");
    put_str(t, prop);
    put_moved(t, c, true);
    for (size_t i = 0; i < c->n_extra; i++) put_range(t, c->extra[i], c->extra[i]);
    if (!in_class) put_str(t, "]");
  } else if (in_class && c->negate && !enters && !c->n_extra) { /* PCRE2's complement and what leaves the class */
    snprintf(prop, sizeof prop, "\\P{%s}", c->pcre_name);
    put_str(t, prop);
    put_moved(t, c, false);
  } else {
    if (!in_class) put_str(t, c->negate ? "[^" : "[");
    put_whole(t, c, in_class && c->negate);
    if (!in_class) put_str(t, "]");
  }
}

ortep_status ortep__regex_with_tables(const char *pattern, char **out) {
  *out = NULL;
  pthread_once(&g_diffs_once, find_diffs); /* none found (no memory): every class written out whole */
  text t = {0};
  put(&t, "", 0);
  bool in_class = false;
  for (const char *p = pattern; *p;) {
    if (*p == '\\' && p[1] == 'Q') { /* quoted up to \E: as written */
      const char *e = strstr(p + 2, "\\E");
      size_t n = e ? (size_t)(e - p) + 2 : strlen(p);
      put(&t, p, n), p += n;
      continue;
    }
    if (*p == '\\' && p[1]) {
      cls c;
      size_t n = escape_class(p + 1, &c);
      if (n)
        put_class(&t, &c, in_class);
      else /* another escape: the backslash and its character as written */
        put(&t, p, 2);
      p += n ? 1 + n : 2;
      continue;
    }
    if (*p == '[' && !in_class) {
      in_class = true;
      size_t n = 1 + (p[1] == '^');
      n += p[n] == ']'; /* a ']' first is a literal */
      put(&t, p, n), p += n;
      continue;
    }
    if (*p == '[' && in_class && p[1] == ':') { /* a POSIX class: as written */
      const char *e = strstr(p + 2, ":]");
      size_t n = e ? (size_t)(e - p) + 2 : 1;
      put(&t, p, n), p += n;
      continue;
    }
    if (*p == ']' && in_class) in_class = false;
    put(&t, p, 1), p++;
  }
  if (t.oom) {
    ortep__free(t.p);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "tokenizer: no memory to rewrite the split regex (%zu bytes)", t.cap);
  }
  *out = t.p;
  return ORTEP_OK;
}

const char *ortep_tokenizer_unicode_version(void) { return utf8proc_unicode_version(); }
