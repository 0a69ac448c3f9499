#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_list.h"
#include "utf8.h"

/* The most of a list's text a message quotes: a list of thousands of items
 * made one line of tens of kilobytes, the reason lost at its start. */
#define SHOWN_MAX 80

/* whole as a message quotes it, into out: 'whole' up to SHOWN_MAX bytes,
 * else 'its first bytes (whole characters)...' (N items). */
static void quote_list(const char *whole, char *out, size_t size)
{
    size_t len = strlen(whole);
    if (len <= SHOWN_MAX) {
        snprintf(out, size, "'%s'", whole);
        return;
    }
    size_t items = 1;
    for (const char *c = whole; (c = strchr(c, ',')); c++)
        items++;
    int shown = (int)utf8_whole_prefix(whole, SHOWN_MAX);
    snprintf(out, size, "'%.*s...' (%zu items)", shown, whole, items);
}

int cli_split_list(char *s, char **items, int max, const char *prog, const char *option)
{
    /* the value for the message, before the commas become NULs */
    char quoted[SHOWN_MAX + 48];
    quote_list(s, quoted, sizeof quoted);
    int n = 0;
    for (char *p = s;; p++) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p) {
            fprintf(stderr, "%s: %s: item %d of %s is empty\n", prog, option, n + 1, quoted);
            n = -1;
            break;
        }
        if (n == max) {
            fprintf(stderr, "%s: %s: more than %d items in %s\n", prog, option, max, quoted);
            n = -1;
            break;
        }
        items[n++] = p;
        if (!comma)
            break;
        p = comma;
    }
    return n;
}
