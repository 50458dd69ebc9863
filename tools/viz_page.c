/* The page of gpumem viz: the template (tools/viz_page.html) with its blanks filled in: the title
 * and a summary table, readable without the script, the data as JSON, and the script that draws
 * it all (tools/viz_*.js). */
#define _POSIX_C_SOURCE 200809L

#include <string.h>

#include "viz.h"

void viz_human(char* out, size_t size, uint64_t bytes) {
  if (bytes >= (1ULL << 30))
    snprintf(out, size, "%.2f GiB", (double)bytes / (double)(1ULL << 30));
  else if (bytes >= (1ULL << 20))
    snprintf(out, size, "%.2f MiB", (double)bytes / (double)(1ULL << 20));
  else
    snprintf(out, size, "%.1f KiB", (double)bytes / 1024.0);
}

void viz_put_escaped(FILE* f, const char* text) {
  for (; *text; text++) {
    switch (*text) {
      case '&':
        fputs("&amp;", f);
        break;
      case '<':
        fputs("&lt;", f);
        break;
      case '>':
        fputs("&gt;", f);
        break;
      case '"':
        fputs("&quot;", f);
        break;
      case '\'':
        fputs("&#39;", f);
        break;
      default:
        fputc(*text, f);
    }
  }
}

/* "pool", "pool and device", "pool, pool:vm and device". */
static void put_config_names(FILE* f, const struct viz_trace* t) {
  for (int i = 0; i < t->config_count; i++) {
    if (i) fputs(i + 1 == t->config_count ? " and " : ", ", f);
    viz_put_escaped(f, t->configs[i].r.name);
  }
}

static void put_bytes_cell(FILE* f, uint64_t bytes) {
  char text[32];
  viz_human(text, sizeof text, bytes);
  fprintf(f, "<td title=\"%llu bytes\">%s</td>", (unsigned long long)bytes, text);
}

/* One row of the summary: a figure of each configuration, and of the recording where it has one. */
static void put_row(FILE* f, const struct viz_trace* t, const char* label, int figure) {
  fprintf(f, "<tr><th>%s</th>", label);
  for (int i = 0; i < t->config_count; i++) {
    const struct replay_result* r = &t->configs[i].r;
    if (figure == 0) put_bytes_cell(f, r->peak_live);
    if (figure == 1) put_bytes_cell(f, r->peak_reserved);
    if (figure == 2) fprintf(f, "<td>%.4f</td>", r->peak_live ? (double)r->peak_reserved / (double)r->peak_live : 0.0);
    if (figure == 3) fprintf(f, "<td>%llu</td>", (unsigned long long)r->allocs);
    if (figure == 4) fprintf(f, "<td>%llu</td>", (unsigned long long)(r->failed + r->refused));
  }
  if (t->has_recorded) {
    const struct summary_recorded* r = &t->recorded;
    if (figure == 0) put_bytes_cell(f, r->peak_live);
    if (figure == 1) put_bytes_cell(f, r->peak_reserved);
    if (figure == 2) fprintf(f, "<td>%.4f</td>", r->peak_live ? (double)r->peak_reserved / (double)r->peak_live : 0.0);
    if (figure == 3) fprintf(f, "<td>%llu</td>", (unsigned long long)r->allocs);
    if (figure == 4) fprintf(f, "<td>%llu</td>", (unsigned long long)r->failed);
  }
  fputs("</tr>\n", f);
}

static void put_summary(FILE* f, const struct viz_trace* t) {
  fputs("<table id=\"summary\">\n<tr><th>configuration</th>", f);
  for (int i = 0; i < t->config_count; i++) {
    fputs("<th class=\"config\">", f);
    viz_put_escaped(f, t->configs[i].r.name);
    fputs("</th>", f);
  }
  if (t->has_recorded) {
    fputs("<th>as recorded (", f);
    viz_put_escaped(f, t->recorded.kind);
    fputs(")</th>", f);
  }
  fputs("</tr>\n", f);
  static const char* const labels[] = {"peak live", "peak reserved", "reserved / live", "allocations",
                                       "failed allocations"};
  for (int figure = 0; figure < 5; figure++) put_row(f, t, labels[figure], figure);
  fputs("</table>\n", f);
}

/* What a blank of the template holds: 0, or -1 when out of memory. */
static int fill(FILE* f, const struct viz_trace* t, const char* name, size_t n) {
  if (n == 5 && !memcmp(name, "TITLE", 5)) {
    viz_put_escaped(f, t->path);
  } else if (n == 7 && !memcmp(name, "CONFIGS", 7)) {
    put_config_names(f, t);
  } else if (n == 6 && !memcmp(name, "FORMAT", 6)) {
    fputs(t->format[0] == 'R' ? "An " : "A ", f); /* an RMM log, a gpumem trace, a PyTorch snapshot */
    viz_put_escaped(f, t->format);
  } else if (n == 7 && !memcmp(name, "SUMMARY", 7)) {
    put_summary(f, t);
  } else if (n == 4 && !memcmp(name, "DATA", 4)) {
    return viz_write_json(f, t);
  } else if (n == 6 && !memcmp(name, "SCRIPT", 6)) {
    fputs((const char*)viz_page_js, f);
  } else {
    fprintf(f, "@@%.*s@@", (int)n, name); /* not a blank of ours */
  }
  return 0;
}

int viz_write_page(FILE* f, const struct viz_trace* t) {
  const char* at = (const char*)viz_page_html;
  for (const char* blank; (blank = strstr(at, "@@")) != NULL;) {
    const char* end = strstr(blank + 2, "@@");
    if (!end) break;
    fwrite(at, 1, (size_t)(blank - at), f);
    if (fill(f, t, blank + 2, (size_t)(end - blank - 2)) != 0) return -1;
    at = end + 2;
  }
  fputs(at, f);
  return 0;
}
