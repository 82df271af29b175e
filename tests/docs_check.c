/* docs_check.c: the docs say what the code does.
 *
 *   docs_check examples CC INCLUDE_DIR... -- FILE.md...
 *     compiles every ```c block of the files (each a whole translation
 *     unit) against the public headers, warnings as errors: an example
 *     that calls a function that is gone, or calls it wrongly, fails. A
 *     block after a line "<!-- excerpt: PATH -->" (PATH from the
 *     repository's root, a program the build compiles) is an excerpt
 *     instead: each of its lines but comments must be in that file.
 *   docs_check explain DOC.md PROGRAM ARG...
 *     runs PROGRAM and compares the first plan it prints (from "graph 0" to
 *     the first empty line) with the block of DOC.md between the lines
 *     "<!-- explain:begin -->" and "<!-- explain:end -->" (its fences
 *     apart), line by line.
 * Exits 0 when all agree, 1 naming the first that does not. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen, mkstemps */
#endif
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *slurp(FILE *f) {
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  size_t k;
  while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (n + 1 == cap) {
      char *g = realloc(b, cap *= 2);
      if (!g) free(b);
      b = g;
    }
  }
  if (b) b[n] = '\0';
  return b;
}

static char *read_path(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = slurp(f);
  fclose(f);
  return b;
}

static int line_of(const char *text, const char *at) {
  int line = 1;
  for (const char *p = text; p < at; p++) line += *p == '\n';
  return line;
}

/* Compiles one block (its text: [begin, end)). */
static bool compile_block(const char *cc, char **inc, int n_inc, const char *begin, const char *end) {
  char src[] = "/tmp/ortep-docs-XXXXXX.c";
  int fd = mkstemps(src, 2);
  if (fd < 0) return false;
  bool ok = write(fd, begin, (size_t)(end - begin)) == end - begin;
  close(fd);
  char cmd[8192];
  int w = snprintf(cmd, sizeof cmd, "%s -std=c11 -fsyntax-only -Wall -Wextra -Werror", cc);
  for (int i = 0; i < n_inc && w < (int)sizeof cmd; i++)
    w += snprintf(cmd + w, sizeof cmd - (size_t)w, " -I%s", inc[i]);
  if (w < (int)sizeof cmd) snprintf(cmd + w, sizeof cmd - (size_t)w, " %s", src);
  ok = ok && system(cmd) == 0;
  unlink(src);
  return ok;
}

/* Whether every line of [begin, end) but comments and blank ones is part
 * of a line of the file at path. */
static bool is_excerpt(const char *root, const char *path, const char *begin, const char *end, const char *md) {
  char full[4096];
  snprintf(full, sizeof full, "%s/%s", root, path);
  char *text = read_path(full);
  if (!text) return fprintf(stderr, "docs_check: %s names %s, which cannot be read\n", md, full), false;
  bool ok = true;
  for (const char *l = begin; ok && l < end;) {
    const char *nl = memchr(l, '\n', (size_t)(end - l));
    const char *e = nl ? nl : end, *b = l;
    while (b < e && (*b == ' ' || *b == '\t')) b++;
    char line[1024];
    size_t n = (size_t)(e - b) < sizeof line - 1 ? (size_t)(e - b) : sizeof line - 1;
    memcpy(line, b, n), line[n] = '\0';
    if (n && strncmp(line, "/*", 2) && !strstr(text, line)) {
      fprintf(stderr, "docs_check: %s: the line \"%s\" is not in %s\n", md, line, path);
      ok = false;
    }
    l = nl ? nl + 1 : end;
  }
  free(text);
  return ok;
}

static int examples(int argc, char **argv) {
  int sep = 3;
  while (sep < argc && strcmp(argv[sep], "--")) sep++;
  if (argc < 4 || sep >= argc)
    return fprintf(stderr, "usage: docs_check examples CC INCLUDE_DIR... -- README.md FILE.md...\n"), 2;
  int blocks = 0, bad = 0;
  char root[4096]; /* the repository: the folder of the first file, README.md */
  snprintf(root, sizeof root, "%s", argv[sep + 1]);
  char *slash = strrchr(root, '/');
  if (slash)
    *slash = '\0';
  else
    snprintf(root, sizeof root, ".");
  for (int f = sep + 1; f < argc; f++) {
    char *text = read_path(argv[f]);
    if (!text) return fprintf(stderr, "docs_check: cannot read %s\n", argv[f]), 1;
    for (const char *p = strstr(text, "```c\n"); p; p = strstr(p, "```c\n")) {
      const char *begin = p + 5, *end = strstr(begin, "\n```");
      if (!end) break;
      blocks++;
      const char *tag = "<!-- excerpt: ", *before = p;
      while (before > text && before[-1] == '\n') before--;
      while (before > text && before[-1] != '\n') before--;
      char path[512] = "";
      if (!strncmp(before, tag, strlen(tag))) sscanf(before + strlen(tag), "%511s", path);
      if (path[0]) {
        if (!is_excerpt(root, path, begin, end + 1, argv[f])) bad++;
      } else if (!compile_block(argv[2], argv + 3, sep - 3, begin, end + 1)) {
        fprintf(stderr, "docs_check: the C example at %s:%d does not compile (above)\n", argv[f], line_of(text, p));
        bad++;
      }
      p = end + 4;
    }
    free(text);
  }
  printf("docs_check: %d C examples, %d that do not compile\n", blocks, bad);
  return bad ? 1 : 0;
}

/* The next line of *p (NUL-terminated in place), or NULL at the end. */
static char *next_line(char **p) {
  if (!*p || !**p) return NULL;
  char *l = *p, *nl = strchr(l, '\n');
  if (nl)
    *nl = '\0', *p = nl + 1;
  else
    *p = l + strlen(l);
  return l;
}

static int explain(int argc, char **argv) {
  if (argc < 4) return fprintf(stderr, "usage: docs_check explain DOC.md PROGRAM ARG...\n"), 2;
  char *doc = read_path(argv[2]);
  if (!doc) return fprintf(stderr, "docs_check: cannot read %s\n", argv[2]), 1;
  char *want = strstr(doc, "<!-- explain:begin -->\n```\n"), *stop = strstr(doc, "```\n<!-- explain:end -->");
  if (!want || !stop || stop < want) return fprintf(stderr, "docs_check: %s has no explain block\n", argv[2]), 1;
  want += strlen("<!-- explain:begin -->\n```\n");
  *stop = '\0';
  char cmd[4096];
  int w = 0;
  for (int i = 3; i < argc && w < (int)sizeof cmd; i++)
    w += snprintf(cmd + w, sizeof cmd - (size_t)w, "%s'%s'", i > 3 ? " " : "", argv[i]);
  FILE *pp = popen(cmd, "r");
  char *out = pp ? slurp(pp) : NULL;
  int rc = pp ? pclose(pp) : -1;
  if (!out || rc != 0) return fprintf(stderr, "docs_check: '%s' failed (status %d)\n", cmd, rc), 1;
  char *got = strstr(out, "graph 0 of ");
  if (!got) return fprintf(stderr, "docs_check: '%s' printed no plan\n", cmd), 1;
  int line = 0;
  for (char *a, *b;; line++) {
    a = next_line(&want), b = next_line(&got);
    if (b && !*b) b = NULL; /* the plan ends at an empty line */
    if (!a && !b) break;
    if (!a || !b || strcmp(a, b)) {
      fprintf(stderr,
              "docs_check: %s's explain block differs from the program's at line %d:\n  doc:     %s\n  program: %s\n",
              argv[2], line + 1, a ? a : "(end)", b ? b : "(end)");
      return 1;
    }
  }
  printf("docs_check: the explain block of %s is the program's (%d lines)\n", argv[2], line);
  free(out), free(doc);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "examples")) return examples(argc, argv);
  if (argc > 1 && !strcmp(argv[1], "explain")) return explain(argc, argv);
  fprintf(stderr, "usage: docs_check examples CC INCLUDE_DIR... -- FILE.md... | explain DOC.md PROGRAM ARG...\n");
  return 2;
}
